//! HTTP/2 keepalive that counts every byte a peer sends as a sign of life (TRANS-7,
//! `docs/protocol.md`; why: `docs/hardening.md`, "Keepalive on busy connections").
//!
//! hyper's server keepalive pings a connection whose requests have not been read for the interval
//! and closes it unless the PING's acknowledgement is processed within the timeout. Frames that
//! arrive meanwhile do not count, and hyper checks the timeout before it reads what is waiting on
//! the socket. On a connection busy pushing megabytes of configuration, both the PING (queued
//! behind what the socket already holds) and the server task that would read the answer (busy
//! building responses) are late, so a healthy connection is closed in the middle of its largest
//! push. gRPC servers judge liveness by any frame received instead; so does this module.
//!
//! hyper still sends the pings (an idle peer answers them), but is given [`PONG_WAIT`] to see the
//! answer; the connection is closed by [`silent_for`] once nothing at all has been read from the
//! peer for the interval plus the timeout. A dead peer is found as soon as before; a busy one
//! keeps its connection as long as it sends anything (acknowledgements, WINDOW_UPDATE frames as
//! it reads, the PING's own answer however late).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How long hyper waits for a PING's acknowledgement before closing the connection itself: long
/// enough never to matter, [`silent_for`] closes silent connections first.
pub(super) const PONG_WAIT: Duration = Duration::from_secs(24 * 3600);

/// When bytes were last read from a connection's peer.
#[derive(Debug)]
pub(crate) struct LastRead {
    base: Instant,
    /// Milliseconds after `base`.
    at_ms: AtomicU64,
}

impl LastRead {
    /// A connection that has just been read from.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            base: Instant::now(),
            at_ms: AtomicU64::new(0),
        })
    }

    /// Bytes were read from the peer now.
    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.at_ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn at(&self) -> Instant {
        self.base + Duration::from_millis(self.at_ms.load(Ordering::Relaxed))
    }
}

/// Returns once nothing has been read from the peer for `silence`.
pub(super) async fn silent_for(last: &LastRead, silence: Duration) {
    loop {
        let deadline = last.at() + silence;
        if Instant::now() >= deadline {
            return;
        }
        tokio::time::sleep_until(deadline).await;
    }
}

#[cfg(test)]
mod tests;
