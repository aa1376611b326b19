//! Stopping an Envoy gracefully through its admin API: fail its health check, drain its listeners
//! (graceful, without letting Envoy exit by itself), wait for the drain time or until no
//! connection is left, then `/quitquitquit` (SIGKILL if it does not go).

use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::envoy::{Admin, EnvoyProc};

/// How often active connections are counted while draining.
const DRAIN_POLL: Duration = Duration::from_millis(100);

/// How long Envoy gets to exit after `/quitquitquit` before it is killed.
const QUIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Drains `envoy` for at most `drain_time`, then stops it.
pub(super) async fn drain_and_stop(admin: &Admin, envoy: &mut EnvoyProc, drain_time: Duration) {
    let started = Instant::now();
    for path in ["/healthcheck/fail", "/drain_listeners?graceful&skip_exit"] {
        if let Err(e) = admin.post(path).await {
            warn!(error = %e, "Envoy did not take the drain request");
        }
    }
    let deadline = started + drain_time;
    loop {
        tokio::time::sleep(DRAIN_POLL).await;
        if envoy.exited() {
            break;
        }
        match admin.active_connections().await {
            Ok(0) => break,
            Ok(n) if Instant::now() >= deadline => {
                warn!(connections = n, "drain time over with connections left");
                break;
            }
            Ok(_) => {}
            Err(e) if Instant::now() >= deadline => {
                warn!(error = %e, "drain time over; Envoy's admin does not answer");
                break;
            }
            Err(_) => {}
        }
    }
    info!(drained_for = ?started.elapsed(), epoch = envoy.epoch, "stopping Envoy");
    stop(admin, envoy).await;
}

/// `/quitquitquit`, then SIGKILL after [`QUIT_TIMEOUT`].
pub(super) async fn stop(admin: &Admin, envoy: &mut EnvoyProc) {
    if !envoy.exited()
        && let Err(e) = admin.post("/quitquitquit").await
    {
        warn!(error = %e, "Envoy's admin did not take /quitquitquit");
    }
    if tokio::time::timeout(QUIT_TIMEOUT, envoy.wait())
        .await
        .is_err()
    {
        warn!(pid = envoy.pid, "Envoy did not exit; killing it");
        envoy.kill().await;
    }
}
