//! Exponential backoff with jitter between retries of a failing watch, list, client build or
//! Consul read: backon's exponential backoff, which kube-runtime also uses.
//!
//! kube-runtime's `StreamBackoff` asks it for the next delay after each error and resets it after
//! each success; the Consul watches do the same by hand. Jitter keeps many clusters, watches (or
//! many tributary replicas) from retrying against a recovering server in lockstep.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use kube::runtime::utils::Backoff;

/// Each delay is drawn from [base/2, base], base doubling from `initial` up to `max` ("equal
/// jitter"): retries spread out and never come faster than half the nominal delay.
#[derive(Debug)]
pub(crate) struct RetryBackoff {
    initial: Duration,
    max: Duration,
    jitter: bool,
    current: ExponentialBackoff,
}

impl RetryBackoff {
    /// A backoff starting at `initial`, capped at `max`.
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        let max = max.max(initial);
        Self {
            initial,
            max,
            jitter: true,
            current: builder(initial, max, true).build(),
        }
    }

    /// Back to the first delay, after a success.
    pub(crate) fn reset(&mut self) {
        self.current = builder(self.initial, self.max, self.jitter).build();
    }

    /// The same without jitter (deterministic tests).
    #[cfg(test)]
    pub(crate) fn without_jitter(mut self) -> Self {
        self.jitter = false;
        self.reset();
        self
    }
}

/// backon adds a jitter in [0, d) to a delay d, so with jitter the builder runs at half the
/// nominal delays. Retries go on for as long as the failure lasts.
fn builder(initial: Duration, max: Duration, jitter: bool) -> ExponentialBuilder {
    let b = ExponentialBuilder::new()
        .with_factor(2.0)
        .without_max_times();
    match jitter {
        true => b
            .with_min_delay(initial / 2)
            .with_max_delay(max / 2)
            .with_jitter(),
        false => b.with_min_delay(initial).with_max_delay(max),
    }
}

/// A clone starts from the first delay.
impl Clone for RetryBackoff {
    fn clone(&self) -> Self {
        Self {
            current: builder(self.initial, self.max, self.jitter).build(),
            ..*self
        }
    }
}

impl Iterator for RetryBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.current.next()
    }
}

/// What kube-runtime's `StreamBackoff` drives.
impl Backoff for RetryBackoff {
    fn reset(&mut self) {
        RetryBackoff::reset(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = RetryBackoff::new(Duration::from_millis(100), Duration::from_millis(500))
            .without_jitter();
        let first: Vec<u128> = b.by_ref().take(5).map(|d| d.as_millis()).collect();
        assert_eq!(first, [100, 200, 400, 500, 500]);
        b.reset();
        assert_eq!(b.next(), Some(Duration::from_millis(100)));
    }

    #[test]
    fn jitter_stays_within_half_to_full() {
        let mut b = RetryBackoff::new(Duration::from_secs(1), Duration::from_secs(1));
        for _ in 0..100 {
            let d = b.next().unwrap();
            assert!(
                d >= Duration::from_millis(500) && d <= Duration::from_secs(1),
                "{d:?}"
            );
        }
    }

    // REG-5: exponential, jittered, capped; reset after success.
    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        let mut b = RetryBackoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let mut nominal = Duration::from_millis(100);
        let mut seen = Vec::new();
        for _ in 0..10 {
            let d = b.next().unwrap();
            assert!(
                d >= nominal / 2 && d <= nominal,
                "{d:?} within [{:?}, {nominal:?}]",
                nominal / 2
            );
            seen.push(d);
            nominal = (nominal * 2).min(Duration::from_secs(2));
        }
        assert!(seen[9] >= Duration::from_secs(1), "capped at 2 s: {seen:?}");
        b.reset();
        assert!(b.next().unwrap() <= Duration::from_millis(100));
        // Jitter: many draws of the same step are not all equal.
        let draws: std::collections::BTreeSet<Duration> = (0..20)
            .map(|_| {
                RetryBackoff::new(Duration::from_secs(1), Duration::from_secs(1))
                    .next()
                    .unwrap()
            })
            .collect();
        assert!(draws.len() > 1, "jittered: {draws:?}");
    }
}
