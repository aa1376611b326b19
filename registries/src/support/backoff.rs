//! Exponential backoff with jitter between retries of a failing watch, list or client build.
//!
//! kube-runtime's `StreamBackoff` asks it for the next delay after each error and resets it after
//! each success. Jitter keeps many clusters (or many tributary replicas) from retrying against a
//! recovering API server in lockstep.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use kube::runtime::utils::Backoff;

/// Each delay is drawn from [base/2, base], base doubling from `initial` up to `max`.
#[derive(Debug, Clone)]
pub(crate) struct RetryBackoff {
    initial: Duration,
    max: Duration,
    next_base: Duration,
    jitter: bool,
}

impl RetryBackoff {
    /// A backoff starting at `initial`, capped at `max`.
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            next_base: initial,
            jitter: true,
        }
    }

    /// The same without jitter (deterministic tests).
    #[cfg(test)]
    pub(crate) fn without_jitter(mut self) -> Self {
        self.jitter = false;
        self
    }
}

/// A fraction in [0.5, 1.0] from the standard library's per-instance random hash keys.
fn jitter_factor() -> f64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u8(0);
    0.5 + (h.finish() % 1_000_000) as f64 / 2_000_000.0
}

impl Iterator for RetryBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let base = self.next_base;
        self.next_base = (base * 2).min(self.max);
        Some(match self.jitter {
            true => base.mul_f64(jitter_factor()),
            false => base,
        })
    }
}

impl Backoff for RetryBackoff {
    fn reset(&mut self) {
        self.next_base = self.initial;
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
}
