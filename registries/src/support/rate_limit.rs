//! Client-side request rate limiting (QPS with a burst), as client-go's token bucket does it.
//!
//! A tower layer in front of kube's HTTP stack: `poll_ready` waits until a token is available.
//! kube's `Client` puts a `Buffer` in front of the whole stack, so every request of one client
//! (one cluster) draws from the same bucket. Long watches cost one token when they start.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::time::{Instant, Sleep, sleep};
use tower::{Layer, Service};

/// A token bucket: `burst` tokens, refilled at `qps` per second.
#[derive(Debug, Clone)]
pub(crate) struct TokenBucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub(crate) fn new(qps: f32, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: f64::from(qps).max(f64::MIN_POSITIVE),
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes a token, or says how long until one is available.
    pub(crate) fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
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
            bucket: TokenBucket::new(self.qps, self.burst, Instant::now()),
            reserved: false,
            wait: None,
        }
    }
}

/// A service that lets requests through at most at its bucket's rate.
pub(crate) struct RateLimit<S> {
    inner: S,
    bucket: TokenBucket,
    /// A token was taken for the next `call`.
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
            match self.bucket.take(Instant::now()) {
                Ok(()) => self.reserved = true,
                Err(delay) => self.wait = Some(Box::pin(sleep(delay))),
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

    use super::*;

    #[test]
    fn burst_then_steady_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(2.0, 3, t0);
        for _ in 0..3 {
            b.take(t0).unwrap();
        }
        let wait = b.take(t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        b.take(t0 + Duration::from_millis(500)).unwrap();
        // Idle time refills, but never beyond the burst.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            b.take(later).unwrap();
        }
        assert!(b.take(later).is_err());
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
