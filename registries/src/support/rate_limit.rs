//! Client-side request rate limits (a rate with a burst), as client-go's token bucket and
//! Consul's "rate limit, don't sleep" advice (REG-6) ask: governor's GCRA limiter on tokio's
//! clock, so tests drive it with a paused clock.
//!
//! Two ways in: [`until_ready`] for a loop that waits its turn (the Consul watches), and
//! [`RateLimitLayer`], a tower layer in front of kube's HTTP stack whose `poll_ready` waits until
//! a request may go. kube's `Client` puts a `Buffer` in front of the whole stack, so every request
//! of one client (one cluster) draws from the same limiter. Long watches cost one request when
//! they start.

use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tokio::time::{Sleep, sleep};
use tower::{Layer, Service};

/// governor's clock on `tokio::time`: a paused test clock paces the limiters too.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TokioClock;

impl Clock for TokioClock {
    type Instant = std::time::Instant;

    fn now(&self) -> std::time::Instant {
        tokio::time::Instant::now().into_std()
    }
}

/// A limiter shared by whoever holds it.
pub(crate) type Limiter =
    RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<std::time::Instant>>;

/// The shortest interval between requests a limiter takes (a zero one would mean no limit).
const MIN_INTERVAL: Duration = Duration::from_nanos(1);

/// A limiter letting `burst` requests through at once, then one every `interval`.
pub(crate) fn limiter(interval: Duration, burst: u32) -> Limiter {
    let quota = Quota::with_period(interval.max(MIN_INTERVAL))
        .expect("a non-zero period")
        .allow_burst(NonZeroU32::new(burst.max(1)).expect("at least one"));
    RateLimiter::direct_with_clock(quota, TokioClock)
}

/// A limiter of `per_second` requests per second (fractions allowed), holding `burst` of them.
pub(crate) fn per_second(per_second: f64, burst: u32) -> Limiter {
    let interval = Duration::try_from_secs_f64(1.0 / per_second.max(f64::MIN_POSITIVE))
        .unwrap_or(Duration::MAX);
    limiter(interval, burst)
}

/// How long until `limiter` lets a request through; `None` when it just did (and counted it).
fn take(limiter: &Limiter) -> Option<Duration> {
    limiter
        .check()
        .err()
        .map(|not_until| not_until.wait_time_from(TokioClock.now()))
}

/// Waits for `limiter` to let one request through. The happy path does not touch the timer.
pub(crate) async fn until_ready(limiter: &Limiter) {
    while let Some(wait) = take(limiter) {
        sleep(wait).await;
    }
}

/// Adds [`RateLimit`] to a service stack.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RateLimitLayer {
    pub(crate) qps: f32,
    pub(crate) burst: u32,
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            limiter: per_second(f64::from(self.qps), self.burst),
            reserved: false,
            wait: None,
        }
    }
}

/// A service that lets requests through at most at its limiter's rate.
pub(crate) struct RateLimit<S> {
    inner: S,
    limiter: Limiter,
    /// A request was counted for the next `call`.
    reserved: bool,
    wait: Option<Pin<Box<Sleep>>>,
}

impl<S, R> Service<R> for RateLimit<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        while !self.reserved {
            if let Some(wait) = self.wait.as_mut() {
                ready!(wait.as_mut().poll(cx));
                self.wait = None;
            }
            match take(&self.limiter) {
                None => self.reserved = true,
                Some(delay) => self.wait = Some(Box::pin(sleep(delay))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> S::Future {
        self.reserved = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tokio::time::{Instant, advance};

    use super::*;

    // REG-6: a burst goes at once, then one request per interval; an idle limiter refills, but
    // never beyond the burst.
    #[tokio::test(start_paused = true)]
    async fn burst_then_steady_rate() {
        let b = per_second(2.0, 3);
        for _ in 0..3 {
            assert_eq!(take(&b), None);
        }
        assert_eq!(take(&b), Some(Duration::from_millis(500)));
        advance(Duration::from_millis(500)).await;
        assert_eq!(take(&b), None);
        // Idle time refills, but never beyond the burst.
        advance(Duration::from_secs(60)).await;
        for _ in 0..3 {
            assert_eq!(take(&b), None);
        }
        assert!(take(&b).is_some());
    }

    // REG-6: the happy path never sleeps; a spinning loop is held to the rate.
    #[tokio::test(start_paused = true)]
    async fn until_ready_waits_only_when_empty() {
        let limiter = per_second(10.0, 10);
        let start = Instant::now();
        for _ in 0..10 {
            until_ready(&limiter).await;
        }
        assert_eq!(Instant::now(), start, "a full limiter costs no time");
        for _ in 0..20 {
            until_ready(&limiter).await;
        }
        let took = Instant::now() - start;
        assert!(
            took >= Duration::from_millis(1990) && took <= Duration::from_millis(2010),
            "20 more requests at 10/s take 2 s, took {took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_layer_delays_requests_past_the_burst() {
        use tower::ServiceExt;
        let svc = tower::service_fn(|_: ()| async { Ok::<_, Infallible>(Instant::now()) });
        let mut svc = RateLimitLayer {
            qps: 10.0,
            burst: 2,
        }
        .layer(svc);
        let start = Instant::now();
        let mut at = Vec::new();
        for _ in 0..4 {
            at.push(svc.ready().await.unwrap().call(()).await.unwrap() - start);
        }
        assert_eq!(at[0], Duration::ZERO);
        assert_eq!(at[1], Duration::ZERO);
        assert!(
            at[2] >= Duration::from_millis(99) && at[2] <= Duration::from_millis(101),
            "{at:?}"
        );
        assert!(
            at[3] >= Duration::from_millis(199) && at[3] <= Duration::from_millis(201),
            "{at:?}"
        );
    }
}
