//! The supervision loop: one task owns the running Envoy, its draining parents and the restart
//! budget, and reacts to Envoy exiting, the certificates rotating and the agent being asked to
//! stop. One cohesive state machine, so it is kept in one file.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;
use tracing::{error, info, warn};

use super::AgentError;
use super::budget::RestartBudget;
use super::certs::CertWatch;
use super::consul::Registrar;
use super::drain;
use super::envoy::{Admin, EnvoyProc};
use super::metrics::AgentMetrics;
use super::options::AgentOptions;

/// How often exited hot-restart parents are reaped.
const REAP_INTERVAL: Duration = Duration::from_millis(250);

/// How the loop ended without an error.
#[derive(Debug)]
pub(super) enum Outcome {
    /// SIGTERM or SIGINT: Envoy was drained and stopped.
    Stopped,
    /// Envoy exited by itself with status 0.
    EnvoyExited,
}

/// What follows an Envoy exit.
enum Next {
    /// The agent ends (Envoy exited cleanly).
    Stop,
    /// Start Envoy again at this time.
    RestartAt(Instant),
    /// An Envoy is already running again (the hot-restart fallback restarted it).
    Running,
}

/// What a stop (requested or Envoy's clean exit) does before Envoy is drained.
#[derive(Debug)]
pub(super) struct StopHooks {
    /// Set first: readiness fails from then on.
    pub draining: Arc<AtomicBool>,
    /// Deregistered next, so the mesh stops sending before the listeners close.
    pub registrar: Option<Registrar>,
}

impl StopHooks {
    async fn stopping(&self) {
        self.draining.store(true, Ordering::Relaxed);
        if let Some(r) = &self.registrar
            && let Err(e) = r.deregister().await
        {
            warn!(error = %e, "Consul deregistration failed");
        }
    }
}

/// The state the loop owns.
pub(super) struct Supervisor {
    o: AgentOptions,
    service_account: Option<String>,
    admin: Admin,
    metrics: Arc<AgentMetrics>,
    budget: RestartBudget,
    hot_restart: bool,
    /// The newest Envoy; `None` while waiting to restart it.
    current: Option<EnvoyProc>,
    /// Older epochs draining after a hot restart (Envoy stops them itself).
    parents: Vec<EnvoyProc>,
    /// The last epoch started.
    epoch: u32,
    stop: StopHooks,
}

impl Supervisor {
    /// A supervisor for `o`; nothing runs until [`Self::run`].
    pub(super) fn new(
        o: AgentOptions,
        service_account: Option<String>,
        admin: Admin,
        metrics: Arc<AgentMetrics>,
        stop: StopHooks,
    ) -> Self {
        Self {
            stop,
            budget: RestartBudget::new(o.restart_budget, o.restart_initial_delay),
            hot_restart: o.hot_restart,
            o,
            service_account,
            admin,
            metrics,
            current: None,
            parents: Vec::new(),
            epoch: 0,
        }
    }

    /// Writes `envoy-rev<epoch>.json`.
    fn write_bootstrap(&self, epoch: u32) -> Result<PathBuf, AgentError> {
        let path = self.o.config_dir.join(format!("envoy-rev{epoch}.json"));
        let mut b = self.o.clone();
        b.hot_restart = self.hot_restart;
        let json = crate::bootstrap::render_json(&b.bootstrap(self.service_account.as_deref()))
            .map_err(|e| AgentError::Invalid(format!("bootstrap does not render: {e}")))?;
        std::fs::write(&path, json).map_err(|e| AgentError::File {
            path: path.clone(),
            error: e.to_string(),
        })?;
        Ok(path)
    }

    /// Starts Envoy at `epoch`.
    fn start(&mut self, epoch: u32) -> Result<(), AgentError> {
        let config = self.write_bootstrap(epoch)?;
        let mut o = self.o.clone();
        o.hot_restart = self.hot_restart;
        let envoy = EnvoyProc::spawn(&o, &config, epoch)?;
        info!(epoch, pid = envoy.pid, config = %config.display(), "Envoy started");
        self.epoch = epoch;
        self.metrics
            .epoch
            .store(u64::from(epoch), Ordering::Relaxed);
        self.current = Some(envoy);
        Ok(())
    }

    /// Runs until a signal, a clean Envoy exit, or a spent budget.
    pub(super) async fn run(mut self) -> Result<Outcome, AgentError> {
        let sig = |k| signal(k).map_err(|e| AgentError::Signal(e.to_string()));
        let mut term = sig(SignalKind::terminate())?;
        let mut int = sig(SignalKind::interrupt())?;
        let mut certs = CertWatch::new(self.o.watched_files())?;
        let mut reap = tokio::time::interval(REAP_INTERVAL);
        let mut restart_at: Option<Instant> = None;
        self.start(0)?;
        loop {
            tokio::select! {
                status = wait_current(&mut self.current) => {
                    let envoy = self.current.take().expect("wait_current only returns with an Envoy");
                    match self.on_exit(envoy, status).await? {
                        Next::RestartAt(at) => restart_at = Some(at),
                        Next::Running => {}
                        Next::Stop => return Ok(Outcome::EnvoyExited),
                    }
                }
                _ = sleep_until(restart_at), if self.current.is_none() => {
                    restart_at = None;
                    let epoch = self.next_epoch();
                    self.start(epoch)?;
                    self.metrics.restarts.fetch_add(1, Ordering::Relaxed);
                }
                _ = certs.changed() => self.rotate().await?,
                _ = term.recv() => return Ok(self.shutdown("SIGTERM").await),
                _ = int.recv() => return Ok(self.shutdown("SIGINT").await),
                _ = reap.tick() => self.parents.retain_mut(|p| !p.exited()),
            }
        }
    }

    /// The epoch of the next Envoy: one more while a parent still runs (it hands over), else 0.
    fn next_epoch(&mut self) -> u32 {
        self.parents.retain_mut(|p| !p.exited());
        match self.hot_restart && !self.parents.is_empty() {
            true => self.epoch + 1,
            false => 0,
        }
    }

    /// Envoy `envoy` exited with `status`: what comes next.
    async fn on_exit(
        &mut self,
        envoy: EnvoyProc,
        status: std::io::Result<ExitStatus>,
    ) -> Result<Next, AgentError> {
        let clean = matches!(&status, Ok(s) if s.success());
        let status = status
            .map(|s| s.to_string())
            .unwrap_or_else(|e| format!("unknown ({e})"));
        if clean {
            info!(epoch = envoy.epoch, "Envoy exited cleanly; the agent stops");
            self.stop.stopping().await;
            for p in &mut self.parents {
                p.kill().await;
            }
            return Ok(Next::Stop);
        }
        let tail = envoy.tail();
        error!(epoch = envoy.epoch, %status, last_output = %tail, "Envoy exited abnormally");
        self.parents.retain_mut(|p| !p.exited());
        if self.hot_restart && envoy.epoch > 0 && !self.parents.is_empty() {
            // The new epoch died while its parent still runs: hot restart does not work here.
            warn!(
                epoch = envoy.epoch,
                "hot restart failed; falling back to drain-then-restart for good"
            );
            self.hot_restart = false;
            self.current = self.parents.pop();
            self.epoch = self.current.as_ref().map(|e| e.epoch).unwrap_or(0);
            self.cold_rotate().await?;
            return Ok(Next::Running);
        }
        match self.budget.on_failure(envoy.started.elapsed()) {
            Some(delay) => {
                info!(?delay, "restarting Envoy");
                Ok(Next::RestartAt(Instant::now() + delay))
            }
            None => Err(AgentError::EnvoyKeepsFailing {
                starts: self.budget.max() + 1,
                budget: self.budget.max(),
                status,
                tail,
            }),
        }
    }

    /// The certificates changed: a new epoch takes over (hot restart), or drain-then-restart.
    async fn rotate(&mut self) -> Result<(), AgentError> {
        if self.current.is_none() {
            info!("certificates changed while Envoy is down; the next start reads them");
            return Ok(());
        }
        if !self.hot_restart {
            return self.cold_rotate().await;
        }
        let parent = self.current.take().expect("checked above");
        let epoch = self.epoch + 1;
        info!(epoch, "certificates changed; hot restart");
        self.parents.push(parent);
        self.start(epoch)?;
        self.metrics.hot_restarts.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Drain the running Envoy, stop it, and start a fresh one at epoch 0.
    async fn cold_rotate(&mut self) -> Result<(), AgentError> {
        warn!("certificates changed; drain-then-restart (hot restart is off or unavailable)");
        if let Some(mut envoy) = self.current.take() {
            drain::drain_and_stop(&self.admin, &mut envoy, self.o.drain_time).await;
        }
        for p in &mut self.parents {
            p.kill().await;
        }
        self.parents.clear();
        self.start(0)?;
        self.metrics.cold_rotations.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Drains and stops every Envoy.
    async fn shutdown(&mut self, signal: &str) -> Outcome {
        info!(signal, drain_time = ?self.o.drain_time, "shutting down: draining Envoy");
        self.stop.stopping().await;
        if let Some(mut envoy) = self.current.take() {
            drain::drain_and_stop(&self.admin, &mut envoy, self.o.drain_time).await;
        }
        for p in &mut self.parents {
            p.kill().await;
        }
        Outcome::Stopped
    }
}

/// Waits for the current Envoy to exit; pending forever when there is none.
async fn wait_current(current: &mut Option<EnvoyProc>) -> std::io::Result<ExitStatus> {
    match current {
        Some(e) => e.wait().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
