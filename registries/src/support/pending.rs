//! Futures for the arms of a worker's `select!` that may have nothing to wait for: with no
//! receiver or no deadline they wait forever, so the arm never fires.

use tokio::sync::mpsc;
use tokio::time::Instant;

/// The next message, or never when there is no receiver; `None` when it closed.
pub(crate) async fn recv<T>(rx: Option<&mut mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `at`, or forever.
pub(crate) async fn sleep(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
