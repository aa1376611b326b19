//! Supervision of long-lived tasks (docs/reliability.md, REL-1 and REL-2).
//!
//! Two kinds of task, two policies:
//!
//! - A **registry** that dies (a panic, or an error other than a bad config) is restarted with
//!   exponential backoff. Meanwhile the aggregate keeps serving its last state, marked degraded
//!   with the panic message (`/debug/registryz`, `tributary_registry_degraded`), and counts the
//!   restart (`tributary_registry_restarts`). The restarted instance replaces that state once it
//!   has synced, exactly as after a config reload.
//! - The **aggregate, the builder, the admin and the xDS servers** have no last state to fall back
//!   on: one of them ending before shutdown leaves a control plane that looks alive and serves
//!   frozen config. [`TaskNames`] names what ended and why; `runtime::run` then turns `/ready` 503,
//!   shuts down and exits non-zero, so Kubernetes or systemd restart the process.
//!
//! [`Faults`] kills a named task on purpose (hidden `--inject-panic` flag), so tests can prove both
//! policies against the real binary.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::task::{Id, JoinError};
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, error, info, warn};
use tributary_registries::{RegistryError, RegistrySink, RegistryStatus};

use crate::aggregate::{AggregateCommand, CommandSender};

/// First wait before restarting a dead registry: long enough not to spin on a task that dies at
/// once, short enough that a one-off panic costs little freshness.
pub const RESTART_INITIAL: Duration = Duration::from_millis(500);
/// Longest wait between restarts of a registry that keeps dying.
pub const RESTART_MAX: Duration = Duration::from_secs(30);
/// A registry that ran this long before dying starts its backoff over.
const RESTART_RESET_AFTER: Duration = Duration::from_secs(60);

/// Builds a fresh instance of one configured registry for each (re)start.
pub(super) use tributary_registries::RegistryFactory;

/// The text of a panic payload, or a placeholder when it is not text.
pub(super) fn panic_message(err: JoinError) -> String {
    if err.is_cancelled() {
        return "cancelled".to_string();
    }
    let payload = err.into_panic();
    if let Some(s) = payload.downcast_ref::<&str>() {
        return (*s).to_string();
    }
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(_) => "a panic with a non-text payload".to_string(),
    }
}

/// Runs one registry until `stop`, restarting it whenever it dies (REL-1).
pub(super) async fn supervise_registry(
    make: RegistryFactory,
    sink: RegistrySink,
    commands: CommandSender,
    stop: CancellationToken,
    fault: Option<Duration>,
) {
    let id = sink.registry().clone();
    let mut backoff = RESTART_INITIAL;
    let mut fault = fault;
    let mut restarts: u64 = 0;
    loop {
        let started = tokio::time::Instant::now();
        let run = make().run(sink.clone());
        let run = inject(fault.take(), "registry", run);
        // Its own task, so that a panic is caught here and not in the supervisor.
        let task = tokio::spawn(run.in_current_span());
        let abort = task.abort_handle();
        let result = tokio::select! {
            () = stop.cancelled() => {
                abort.abort();
                return;
            }
            r = task => r,
        };
        let reason = match result {
            Ok(Ok(())) | Ok(Err(RegistryError::Closed)) => {
                info!("registry stopped");
                return;
            }
            Ok(Err(RegistryError::Config(e))) => {
                // A config that cannot work will not work on retry either; a reload fixes it.
                error!(error = %e, "registry stopped on a configuration error; its last state is still served");
                let reason = format!("stopped: configuration is invalid: {e}");
                let _ = sink.status(RegistryStatus::Degraded { reason }).await;
                return;
            }
            Ok(Err(e)) => format!("registry task failed: {e}"),
            Err(e) if e.is_cancelled() => return,
            Err(e) => format!("registry task panicked: {}", panic_message(e)),
        };
        if started.elapsed() >= RESTART_RESET_AFTER {
            backoff = RESTART_INITIAL;
        }
        restarts += 1;
        super::metrics::registry_restarted(id.as_str());
        error!(registry = %id, %reason, restart_in = ?backoff, restarts, "registry task died; serving its last state and restarting it");
        // Degraded first, then Restart: the aggregate keeps every hostname until the new instance
        // has synced, and the degraded mark shows the panic message meanwhile.
        let status = RegistryStatus::Degraded {
            reason: format!("{reason}; restarting (restart {restarts})"),
        };
        if sink.status(status).await.is_err() {
            return;
        }
        commands.apply(AggregateCommand::Restart(id.clone())).await;
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(RESTART_MAX);
    }
}

/// Names of the critical tasks, by tokio task id, to say which one ended (REL-2).
#[derive(Debug, Default)]
pub(super) struct TaskNames(HashMap<Id, &'static str>);

impl TaskNames {
    /// Records that task `id` is `name`.
    pub(super) fn insert(&mut self, id: Id, name: &'static str) {
        self.0.insert(id, name);
    }

    /// What a critical task's end means: which task, and how it ended.
    pub(super) fn describe(&self, ended: Result<Id, JoinError>) -> String {
        match ended {
            Ok(id) => format!("the {} task ended unexpectedly", self.name(id)),
            Err(e) => {
                let name = self.name(e.id());
                format!("the {name} task panicked: {}", panic_message(e))
            }
        }
    }

    fn name(&self, id: Id) -> &'static str {
        self.0.get(&id).copied().unwrap_or("unnamed")
    }
}

/// A task to kill on purpose, for supervision tests: `aggregate`, `builder`, `admin`, `xds`,
/// `registries` (the supervisor) or `registry:<name>`, after a delay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    target: Option<(String, Duration)>,
}

/// Why an `--inject-panic` value was not understood.
#[derive(Debug, thiserror::Error)]
#[error(
    "--inject-panic takes TASK or TASK@DELAY (TASK: aggregate, builder, admin, xds, registries or registry:NAME; DELAY like 500ms), not {0:?}"
)]
pub struct FaultParseError(String);

impl std::str::FromStr for Faults {
    type Err = FaultParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (task, delay) = match s.split_once('@') {
            Some((t, d)) => (
                t,
                humantime::parse_duration(d).map_err(|_| FaultParseError(s.to_string()))?,
            ),
            None => (s, Duration::ZERO),
        };
        let known = matches!(
            task,
            "aggregate" | "builder" | "admin" | "xds" | "registries"
        ) || task
            .strip_prefix("registry:")
            .is_some_and(|n| !n.is_empty());
        if !known || delay > tributary_registries::duration::MAX_SETTING {
            return Err(FaultParseError(s.to_string()));
        }
        Ok(Self {
            target: Some((task.to_string(), delay)),
        })
    }
}

impl Faults {
    /// The delay after which `task` must panic, if it is the target.
    pub fn delay_for(&self, task: &str) -> Option<Duration> {
        match &self.target {
            Some((t, d)) if t == task => Some(*d),
            _ => None,
        }
    }

    /// `fut`, made to panic after the fault's delay if `task` is the target.
    pub fn wrap<F>(&self, task: &'static str, fut: F) -> impl Future<Output = F::Output> + use<F>
    where
        F: Future,
    {
        inject(self.delay_for(task), task, fut)
    }
}

async fn inject<F: Future>(delay: Option<Duration>, task: &'static str, fut: F) -> F::Output {
    let Some(delay) = delay else {
        return fut.await;
    };
    tokio::select! {
        out = fut => out,
        () = tokio::time::sleep(delay) => {
            warn!(task, "killing this task on purpose (--inject-panic)");
            panic!("injected fault: {task} killed by --inject-panic");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_targets_parse_and_unknown_ones_are_refused() {
        let f: Faults = "builder@250ms".parse().expect("valid");
        assert_eq!(f.delay_for("builder"), Some(Duration::from_millis(250)));
        assert_eq!(f.delay_for("aggregate"), None);
        let f: Faults = "registry:mock".parse().expect("valid");
        assert_eq!(f.delay_for("registry:mock"), Some(Duration::ZERO));
        for bad in ["", "router", "registry:", "xds@soon", "xds@99999999days"] {
            assert!(bad.parse::<Faults>().is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_panic_message_is_recovered_from_the_join_error() {
        // REL-2: the log line says why the task died.
        let err = tokio::spawn(async { panic!("boom {}", 7) })
            .await
            .expect_err("panicked");
        assert_eq!(panic_message(err), "boom 7");
    }
}
