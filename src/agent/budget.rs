//! The restart budget (pilot-agent's): after an abnormal exit Envoy is started again after a
//! delay that starts at `initial` and doubles, at most `max` times in a row; a run that lasted a
//! stable period refills the budget.

use std::time::Duration;

/// A run at least this long counts as stable: the budget is whole again after it. Long enough that
/// a crash loop with doubling delays never reaches it before the budget is spent at the defaults
/// (10 restarts from 200 ms), short enough that a crash a day later starts from a full budget.
pub(super) const STABLE_PERIOD: Duration = Duration::from_secs(120);

/// The longest delay between restarts, whatever the doubling says.
pub(super) const MAX_DELAY: Duration = Duration::from_secs(30);

/// Restarts left and the next delay.
#[derive(Debug, Clone)]
pub(super) struct RestartBudget {
    max: u32,
    initial: Duration,
    left: u32,
    next: Duration,
}

impl RestartBudget {
    /// `max` restarts, the first after `initial`.
    pub(super) fn new(max: u32, initial: Duration) -> Self {
        Self {
            max,
            initial,
            left: max,
            next: initial,
        }
    }

    /// Envoy exited abnormally after running `uptime`: the delay before the next start, or `None`
    /// when the budget is spent.
    pub(super) fn on_failure(&mut self, uptime: Duration) -> Option<Duration> {
        if uptime >= STABLE_PERIOD {
            self.left = self.max;
            self.next = self.initial;
        }
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let delay = self.next;
        self.next = (self.next * 2).min(MAX_DELAY);
        Some(delay)
    }

    /// How many restarts the budget allows in a row.
    pub(super) fn max(&self) -> u32 {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_and_the_budget_runs_out() {
        let mut b = RestartBudget::new(4, Duration::from_millis(200));
        let quick = Duration::from_millis(5);
        let delays: Vec<_> = (0..5).map(|_| b.on_failure(quick)).collect();
        assert_eq!(
            delays,
            vec![
                Some(Duration::from_millis(200)),
                Some(Duration::from_millis(400)),
                Some(Duration::from_millis(800)),
                Some(Duration::from_millis(1600)),
                None
            ]
        );
    }

    #[test]
    fn a_stable_run_refills_the_budget_and_delays_are_capped() {
        let mut b = RestartBudget::new(2, Duration::from_secs(20));
        assert_eq!(b.on_failure(Duration::ZERO), Some(Duration::from_secs(20)));
        assert_eq!(b.on_failure(Duration::ZERO), Some(MAX_DELAY));
        assert_eq!(b.on_failure(Duration::ZERO), None);
        assert_eq!(b.on_failure(STABLE_PERIOD), Some(Duration::from_secs(20)));
        let mut none = RestartBudget::new(0, Duration::from_secs(1));
        assert_eq!(none.on_failure(STABLE_PERIOD), None);
    }
}
