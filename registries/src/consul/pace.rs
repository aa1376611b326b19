//! How fast the watches may go: token buckets (Consul's "rate limit, don't sleep" advice, REG-6)
//! and the retry backoff after failures (REG-5). All time is `tokio::time`, so tests run them under
//! a paused clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// A token bucket that never refuses: [`TokenBucket::reserve`] takes a token now, or the next one
/// to come, and says when the caller may go. In the happy case (a blocking query that waited for
/// a change) a token is there and nobody waits; when answers come back fast, the loop degrades into
/// polling at the refill rate.
#[derive(Debug, Clone)]
pub(super) struct TokenBucket {
    capacity: f64,
    /// Time to earn one token.
    interval: Duration,
    /// May be negative: tokens already promised to waiting callers.
    tokens: f64,
    updated: Instant,
}

impl TokenBucket {
    /// A full bucket of `capacity` tokens, earning one every `interval`.
    pub(super) fn new(capacity: u32, interval: Duration, now: Instant) -> Self {
        Self {
            capacity: f64::from(capacity.max(1)),
            interval,
            tokens: f64::from(capacity.max(1)),
            updated: now,
        }
    }

    /// Takes a token; returns when the caller may proceed (`now` when one was available).
    pub(super) fn reserve(&mut self, now: Instant) -> Instant {
        let earned =
            now.saturating_duration_since(self.updated).as_secs_f64() / self.interval.as_secs_f64();
        self.tokens = (self.tokens + earned).min(self.capacity);
        self.updated = now;
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            now
        } else {
            now + self.interval.mul_f64(-self.tokens)
        }
    }
}

/// A [`TokenBucket`] shared by every watch of a registry. The lock is held only to do arithmetic;
/// callers wait outside it.
#[derive(Debug, Clone)]
pub(super) struct SharedBucket(Arc<Mutex<TokenBucket>>);

impl SharedBucket {
    /// A bucket allowing `per_second` requests per second, holding `burst` of them.
    pub(super) fn new(per_second: u32, burst: u32) -> Self {
        let interval = Duration::from_secs(1) / per_second.max(1);
        Self(Arc::new(Mutex::new(TokenBucket::new(
            burst,
            interval,
            Instant::now(),
        ))))
    }

    /// Waits for a token.
    pub(super) async fn acquire(&self) {
        let now = Instant::now();
        let at = match self.0.lock() {
            Ok(mut bucket) => bucket.reserve(now),
            // A panic while holding the lock left plain numbers behind; keep using them.
            Err(poisoned) => poisoned.into_inner().reserve(now),
        };
        wait_until(at, now).await;
    }
}

/// Sleeps until `at` only if it is in the future: the happy path does not touch the timer.
pub(super) async fn wait_until(at: Instant, now: Instant) {
    if at > now {
        tokio::time::sleep_until(at).await;
    }
}

/// Exponential backoff with "equal jitter": the n-th delay is uniformly random in
/// `[d/2, d]` where `d = min(initial * 2^n, max)`, so retries from many watches spread out and
/// never come faster than half the nominal delay.
#[derive(Debug, Clone)]
pub(super) struct Backoff {
    initial: Duration,
    max: Duration,
    current: Option<Duration>,
}

impl Backoff {
    /// A backoff from `initial` doubling up to `max`.
    pub(super) fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
            current: None,
        }
    }

    /// The next delay.
    pub(super) fn next_delay(&mut self) -> Duration {
        let nominal = match self.current {
            None => self.initial,
            Some(d) => d.saturating_mul(2).min(self.max),
        };
        self.current = Some(nominal);
        let half = nominal / 2;
        half + half.mul_f64(fastrand::f64())
    }

    /// Back to the initial delay, after a success.
    pub(super) fn reset(&mut self) {
        self.current = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // REG-6: a burst of 2 goes at once, then one request per interval; an idle bucket refills.
    #[tokio::test(start_paused = true)]
    async fn token_bucket_lets_a_burst_through_then_paces() {
        let start = Instant::now();
        let mut b = TokenBucket::new(2, Duration::from_secs(1), start);
        assert_eq!(b.reserve(start), start);
        assert_eq!(b.reserve(start), start);
        assert_eq!(b.reserve(start), start + Duration::from_secs(1));
        assert_eq!(b.reserve(start), start + Duration::from_secs(2));
        // Long idle: full again, but never more than the capacity.
        let later = start + Duration::from_secs(60);
        assert_eq!(b.reserve(later), later);
        assert_eq!(b.reserve(later), later);
        assert_eq!(b.reserve(later), later + Duration::from_secs(1));
    }

    // REG-6: the happy path never sleeps; a spinning loop is held to the rate.
    #[tokio::test(start_paused = true)]
    async fn shared_bucket_waits_only_when_empty() {
        let bucket = SharedBucket::new(10, 10);
        let start = Instant::now();
        for _ in 0..10 {
            bucket.acquire().await;
        }
        assert_eq!(Instant::now(), start, "a full bucket costs no time");
        for _ in 0..20 {
            bucket.acquire().await;
        }
        let took = Instant::now() - start;
        assert!(
            took >= Duration::from_millis(1990) && took <= Duration::from_millis(2010),
            "20 more requests at 10/s take 2 s, took {took:?}"
        );
    }

    // REG-5: exponential, jittered, capped; reset after success.
    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        let mut nominal = Duration::from_millis(100);
        let mut seen = Vec::new();
        for _ in 0..10 {
            let d = b.next_delay();
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
        assert!(b.next_delay() <= Duration::from_millis(100));
        // Jitter: many draws of the same step are not all equal.
        let draws: std::collections::BTreeSet<Duration> = (0..20)
            .map(|_| Backoff::new(Duration::from_secs(1), Duration::from_secs(1)).next_delay())
            .collect();
        assert!(draws.len() > 1, "jittered: {draws:?}");
    }
}
