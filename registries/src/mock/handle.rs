//! The cloneable handle through which tests and the control API drive a running mock registry.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::file_format::{EndpointSpec, InvalidField, ServiceSpec};
use crate::model::ServiceState;
use crate::registry::RegistryStatus;

/// How many handle requests may wait for the registry task. Requests are tiny and answered
/// quickly; the bound only stops a runaway client from queueing without limit (callers wait).
pub(crate) const COMMAND_CAPACITY: usize = 64;

/// A fault the mock registry can simulate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Every change is delivered this long after it is made (status is not delayed).
    Delay(Duration),
    /// The platform is failing: the registry reports `Degraded { reason: message }` and holds
    /// every change until the fault is cleared; the last good state keeps being served.
    Error {
        /// The Degraded reason.
        message: String,
    },
    /// The registry goes silent, like a hung platform request: no events at all (no changes, no
    /// status) until cleared.
    Stall,
}

/// What a mock registry serves and how it is doing, as seen by [`MockHandle::state`].
#[derive(Debug, Clone, PartialEq)]
pub struct MockState {
    /// What it serves now, sorted by hostname, including changes a fault still holds back.
    pub services: Vec<ServiceState>,
    /// Whether `Synced` has been delivered.
    pub synced: bool,
    /// Whether the initial sync is still withheld (`hold_sync`, not released).
    pub sync_held: bool,
    /// Whether delivery is paused.
    pub paused: bool,
    /// Active faults.
    pub faults: Vec<Fault>,
    /// The status it reports (or will, once a stall ends).
    pub status: RegistryStatus,
}

/// Why a handle request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MockError {
    /// The request carries an invalid service or endpoint; names the field.
    #[error("invalid request: {0}")]
    Invalid(#[from] InvalidField),
    /// The hostname is not served by this registry.
    #[error("service {0:?} is not served by this mock registry")]
    UnknownService(String),
    /// The registry task is not running (never started, or stopped).
    #[error("the mock registry is not running")]
    Stopped,
}

/// A request to the registry task, with where to send the answer.
#[derive(Debug)]
pub(crate) enum Command {
    Upsert(ServiceSpec, oneshot::Sender<Result<(), MockError>>),
    Delete(String, oneshot::Sender<Result<(), MockError>>),
    SetEndpoints(
        String,
        Vec<EndpointSpec>,
        oneshot::Sender<Result<(), MockError>>,
    ),
    State(oneshot::Sender<MockState>),
    Inject(Fault, oneshot::Sender<()>),
    ClearFaults(oneshot::Sender<()>),
    ReleaseSync(oneshot::Sender<()>),
    SetPaused(bool, oneshot::Sender<()>),
}

/// Drives a running [`MockRegistry`](super::MockRegistry). Cheap to clone.
///
/// Every method returns once the registry task has applied the request and handed any events it
/// caused to the sink, so a test can look at the sink right after. Requests made before the
/// registry runs wait for it.
#[derive(Debug, Clone)]
pub struct MockHandle {
    tx: mpsc::Sender<Command>,
}

impl MockHandle {
    pub(crate) fn new(tx: mpsc::Sender<Command>) -> Self {
        Self { tx }
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Command,
    ) -> Result<T, MockError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| MockError::Stopped)?;
        rx.await.map_err(|_| MockError::Stopped)
    }

    /// Creates or replaces a whole service (endpoints included).
    pub async fn upsert_service(&self, spec: ServiceSpec) -> Result<(), MockError> {
        self.call(|r| Command::Upsert(spec, r)).await?
    }

    /// Removes a served service.
    pub async fn delete_service(&self, hostname: &str) -> Result<(), MockError> {
        let hostname = hostname.to_string();
        self.call(|r| Command::Delete(hostname, r)).await?
    }

    /// Replaces the endpoints of a served service.
    pub async fn set_endpoints(
        &self,
        hostname: &str,
        endpoints: Vec<EndpointSpec>,
    ) -> Result<(), MockError> {
        let hostname = hostname.to_string();
        self.call(|r| Command::SetEndpoints(hostname, endpoints, r))
            .await?
    }

    /// What the registry serves and how it is doing.
    pub async fn state(&self) -> Result<MockState, MockError> {
        self.call(Command::State).await
    }

    /// Turns a fault on; one of the same kind is replaced.
    pub async fn inject_fault(&self, fault: Fault) -> Result<(), MockError> {
        self.call(|r| Command::Inject(fault, r)).await
    }

    /// Turns every fault off; held changes go out at once (a sync pause stays).
    pub async fn clear_faults(&self) -> Result<(), MockError> {
        self.call(Command::ClearFaults).await
    }

    /// Lets a registry started with `hold_sync` deliver its initial state and `Synced`.
    pub async fn release_sync(&self) -> Result<(), MockError> {
        self.call(Command::ReleaseSync).await
    }

    /// Stops delivering changes (status still flows) until [`Self::resume_sync`].
    pub async fn pause_sync(&self) -> Result<(), MockError> {
        self.call(|r| Command::SetPaused(true, r)).await
    }

    /// Delivers the net changes made while paused and resumes normal delivery.
    pub async fn resume_sync(&self) -> Result<(), MockError> {
        self.call(|r| Command::SetPaused(false, r)).await
    }
}
