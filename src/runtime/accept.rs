//! What the accept loops do when `accept` fails, and the per-peer connection count.
//!
//! A failing `accept` (EMFILE/ENFILE at the file-descriptor limit, ENOBUFS, ...) fails again at
//! once while its cause lasts: retrying immediately spins a core and, logged every time, writes
//! hundreds of thousands of lines a second. So a failure waits before the next accept, doubling
//! from [`ACCEPT_BACKOFF_MIN`] to [`ACCEPT_BACKOFF_MAX`] (Go's `net/http` does the same) and is
//! logged at most once per [`ACCEPT_ERROR_LOG_INTERVAL`], with how many were not logged.
//! (docs/hardening.md, "Accepting connections".)

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

/// The first wait after a failed accept.
pub(crate) const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
/// The longest wait between accepts while they keep failing: short enough that service resumes
/// within a second once descriptors are free again.
pub(crate) const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one accept-error line per this interval.
pub(crate) const ACCEPT_ERROR_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The failure state of one accept loop.
#[derive(Debug)]
pub(crate) struct AcceptErrors {
    /// Which listener, for the log line.
    what: &'static str,
    backoff: Duration,
    last_logged: Option<Instant>,
    not_logged: u64,
}

impl AcceptErrors {
    pub(crate) fn new(what: &'static str) -> Self {
        Self {
            what,
            backoff: Duration::ZERO,
            last_logged: None,
            not_logged: 0,
        }
    }

    /// An accept succeeded: the next failure starts from the shortest wait again.
    pub(crate) fn succeeded(&mut self) {
        self.backoff = Duration::ZERO;
    }

    /// Records a failed accept at `now`, logs it if a line is due, and returns how long to wait
    /// before accepting again.
    pub(crate) fn failed(&mut self, error: &io::Error, now: Instant) -> Duration {
        self.backoff = (self.backoff * 2).clamp(ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX);
        let due = self
            .last_logged
            .is_none_or(|t| now.duration_since(t) >= ACCEPT_ERROR_LOG_INTERVAL);
        if due {
            warn!(
                listener = self.what,
                error = %error,
                not_logged = self.not_logged,
                retry_in = ?self.backoff,
                "accepting a connection failed (at the file-descriptor limit? check `ulimit -n`); \
                 backing off, further failures logged at most every 10s"
            );
            self.last_logged = Some(now);
            self.not_logged = 0;
        } else {
            self.not_logged += 1;
        }
        self.backoff
    }
}

/// Open connections per peer IP, shared by one listener's accept loop and its connections.
#[derive(Debug, Clone, Default)]
pub(crate) struct PeerCounts {
    counts: Arc<Mutex<HashMap<IpAddr, u32>>>,
}

/// One counted connection; dropping it (the connection ended) frees its slot.
#[derive(Debug)]
pub(crate) struct PeerSlot {
    counts: PeerCounts,
    ip: IpAddr,
}

impl PeerCounts {
    /// A slot for a new connection from `ip`, or `None` when `ip` already has `limit` open
    /// (0: no limit).
    pub(crate) fn admit(&self, ip: IpAddr, limit: u32) -> Option<PeerSlot> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = counts.entry(ip).or_insert(0);
        if limit != 0 && *n >= limit {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            counts: self.clone(),
            ip,
        })
    }

    /// Open connections from `ip`.
    #[cfg(test)]
    pub(crate) fn open(&self, ip: IpAddr) -> u32 {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        counts.get(&ip).copied().unwrap_or(0)
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                // No entry per peer ever seen: the map holds only peers with open connections.
                counts.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_and_log_rarely() {
        let mut errors = AcceptErrors::new("test");
        let e = io::Error::from_raw_os_error(24); // EMFILE
        let mut waits = Vec::new();
        for _ in 0..10 {
            waits.push(errors.failed(&e, Instant::now()));
        }
        assert_eq!(waits[0], ACCEPT_BACKOFF_MIN);
        assert_eq!(waits[1], ACCEPT_BACKOFF_MIN * 2);
        assert_eq!(*waits.last().unwrap(), ACCEPT_BACKOFF_MAX);
        // The first failure was logged, the 9 others in the same interval were not.
        assert_eq!(errors.not_logged, 9);
        tokio::time::advance(ACCEPT_ERROR_LOG_INTERVAL).await;
        errors.failed(&e, Instant::now());
        assert_eq!(
            errors.not_logged, 0,
            "a line is due again after the interval"
        );
        errors.succeeded();
        assert_eq!(errors.failed(&e, Instant::now()), ACCEPT_BACKOFF_MIN);
    }

    #[test]
    fn peer_slots_are_limited_and_freed() {
        let counts = PeerCounts::default();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let a = counts.admit(ip, 2).unwrap();
        let _b = counts.admit(ip, 2).unwrap();
        assert!(
            counts.admit(ip, 2).is_none(),
            "a third connection is refused"
        );
        assert!(counts.admit("10.0.0.2".parse().unwrap(), 2).is_some());
        drop(a);
        assert_eq!(counts.open(ip), 1);
        assert!(counts.admit(ip, 2).is_some());
        assert!(counts.admit(ip, 0).is_some(), "0 is no limit");
    }
}
