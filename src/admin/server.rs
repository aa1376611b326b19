//! The admin's accept loop: hyper HTTP/1 over the axum router, with a cap on open connections, a
//! header-read timeout (slow clients cannot hold slots), and backoff with a rate-limited log line
//! when `accept` fails (at the fd limit it fails at once, every time: retrying at once would spin a
//! core and flood the log).

use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::{AdminState, router};

/// First wait after a failed accept.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
/// Longest wait between accept attempts while they keep failing: short enough that the admin
/// comes back within a second once descriptors are free.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one log line per this interval for a repeating accept or over-capacity condition.
const LOG_INTERVAL: Duration = Duration::from_secs(5);

/// Serves admin HTTP on `listener` until `shutdown` is cancelled.
pub async fn serve(listener: TcpListener, state: AdminState, shutdown: CancellationToken) {
    let settings = state.config.admin.clone();
    let app = router(state);
    let slots = Arc::new(Semaphore::new(settings.max_connections));
    let mut connections = JoinSet::new();
    let mut backoff = Backoff::default();
    let mut accept_log = RateLimited::new(LOG_INTERVAL);
    let mut full_log = RateLimited::new(LOG_INTERVAL);
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(a) => {
                backoff.reset();
                a
            }
            Err(e) => {
                let wait = backoff.next_wait();
                if let Some(suppressed) = accept_log.allow(Instant::now()) {
                    warn!(error = %e, retry_in = %humantime::format_duration(wait), suppressed, "admin accept failed; backing off");
                }
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(wait) => continue,
                }
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            if let Some(suppressed) = full_log.allow(Instant::now()) {
                warn!(%peer, max = settings.max_connections, suppressed,
                    "admin connection limit reached; closing new connections");
            }
            drop(stream);
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        let shutdown = shutdown.clone();
        let header_timeout = settings.header_read_timeout;
        connections.spawn(async move {
            let _slot = slot;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                r = conn => if let Err(e) = r { debug!(%peer, error = %e, "admin connection ended") },
                _ = shutdown.cancelled() => {}
            }
        });
        while connections.try_join_next().is_some() {}
    }
    connections.shutdown().await;
}

/// Exponential backoff between failed accepts, reset by a successful one.
#[derive(Debug, Default)]
struct Backoff {
    current: Option<Duration>,
}

impl Backoff {
    fn next_wait(&mut self) -> Duration {
        let next = match self.current {
            None => ACCEPT_BACKOFF_MIN,
            Some(d) => (d * 2).min(ACCEPT_BACKOFF_MAX),
        };
        self.current = Some(next);
        next
    }

    fn reset(&mut self) {
        self.current = None;
    }
}

/// Lets one log line through per interval and counts the ones it held back.
#[derive(Debug)]
struct RateLimited {
    interval: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimited {
    fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(n)` if a line may be logged now, `n` being how many were held back since the last one.
    fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.duration_since(last) < self.interval => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_ceiling_and_resets() {
        let mut b = Backoff::default();
        let waits: Vec<Duration> = (0..12).map(|_| b.next_wait()).collect();
        assert_eq!(waits[0], ACCEPT_BACKOFF_MIN);
        assert_eq!(waits[1], ACCEPT_BACKOFF_MIN * 2);
        assert!(waits.windows(2).all(|w| w[1] >= w[0]));
        assert_eq!(*waits.last().unwrap(), ACCEPT_BACKOFF_MAX);
        b.reset();
        assert_eq!(b.next_wait(), ACCEPT_BACKOFF_MIN);
    }

    #[tokio::test(start_paused = true)]
    async fn repeated_errors_log_once_per_interval_with_a_count() {
        let mut log = RateLimited::new(LOG_INTERVAL);
        let start = Instant::now();
        assert_eq!(log.allow(start), Some(0));
        for i in 1..=1000u64 {
            assert_eq!(log.allow(start + Duration::from_millis(i)), None);
        }
        assert_eq!(log.allow(start + LOG_INTERVAL), Some(1000));
        assert_eq!(log.allow(start + LOG_INTERVAL), None);
    }
}
