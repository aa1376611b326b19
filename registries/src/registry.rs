//! The contract between a registry and the aggregate.
//!
//! A registry is a task. It lists its platform, reports every hostname it knows as a
//! [`Change::Upsert`], says [`RegistryEvent::Synced`] once, and from then on reports changes as they
//! happen. When its platform fails it reports [`RegistryStatus::Degraded`] and keeps quiet about
//! data: the aggregate keeps serving what it last reported (a failing registry never wipes what it
//! served before). Events only flow one way, registry → aggregate, over a bounded channel.
//!
//! A registry that reads user-written config objects (ServiceEntries, say) also reports the
//! objects it rejected, as [`RegistryEvent::Rejected`], so that they show in `/debug/configz`
//! beside everything that is served (REG-11).

use std::fmt;

use futures::future::BoxFuture;
use serde::Serialize;
use tokio::sync::mpsc;

use crate::model::{Hostname, RegistryId, ServiceState};

/// One change to what a registry knows, keyed by hostname.
// Nearly every change is an upsert, so boxing the large variant would cost an allocation per
// change to save space only in the rare deletes.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// The registry's complete current view of this hostname (service and endpoints).
    Upsert(ServiceState),
    /// The registry no longer knows this hostname.
    Delete(Hostname),
}

impl Change {
    /// The hostname the change is about.
    pub fn hostname(&self) -> &Hostname {
        match self {
            Change::Upsert(state) => &state.service.hostname,
            Change::Delete(host) => host,
        }
    }
}

/// Whether a registry can currently reach its platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryStatus {
    /// Reading its platform normally.
    Healthy,
    /// Cannot read its platform; what it reported last is kept and served, marked stale.
    Degraded {
        /// What went wrong and what to check, for logs and `/debug/registryz`.
        reason: String,
    },
}

impl RegistryStatus {
    /// `Healthy` with no reasons, else `Degraded` with every reason, `; `-separated.
    pub fn from_reasons<S: std::borrow::Borrow<str>>(reasons: &[S]) -> Self {
        match reasons.is_empty() {
            true => Self::Healthy,
            false => Self::Degraded {
                reason: reasons.join("; "),
            },
        }
    }
}

/// A config object (or a file of them) a registry could not accept, with where and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Rejection {
    /// The object: `ServiceEntry shop/payments`, or a file when it could not be read whole.
    pub object: String,
    /// Where it came from: `/etc/se/payments.yaml:12` (the line of the bad field), or the API it
    /// was read from (`networking.istio.io/v1 in cluster Kubernetes`).
    pub source: String,
    /// The field at fault (`spec.ports[1].number`); empty when the whole object is.
    pub field: String,
    /// What is wrong.
    pub message: String,
    /// Whether an earlier valid version of the object is still served in its place.
    pub serving_previous: bool,
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.object, self.source)?;
        if !self.field.is_empty() {
            write!(f, " {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Something a registry reports.
#[derive(Debug, Clone, PartialEq)]
pub enum RegistryEvent {
    /// A batch of changes to apply together.
    Changes(Vec<Change>),
    /// The initial listing is complete: what was reported so far is the whole truth. Sent once;
    /// later `Synced` events are ignored.
    Synced,
    /// The registry's health changed.
    Status(RegistryStatus),
    /// The complete list of config objects the registry currently rejects, replacing the list it
    /// reported before (an empty list: none). Sent only by registries that read config objects,
    /// and only when the list changes.
    Rejected(Vec<Rejection>),
}

/// A [`RegistryEvent`] with the registry that sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistryMessage {
    /// The sender.
    pub registry: RegistryId,
    /// What it reported.
    pub event: RegistryEvent,
}

/// Why a registry task stopped.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The aggregate is gone (tributary is shutting down); not a failure.
    #[error("the aggregate stopped listening")]
    Closed,
    /// The registry's configuration cannot work; it will not be retried.
    #[error("registry configuration is invalid: {0}")]
    Config(String),
    /// Anything else that ended the task.
    #[error("{0}")]
    Other(String),
}

/// Where a registry sends what it learns. Cheap to clone; every send waits for room in the
/// aggregate's bounded channel, so a fast registry cannot run memory up.
#[derive(Clone, Debug)]
pub struct RegistrySink {
    registry: RegistryId,
    tx: mpsc::Sender<RegistryMessage>,
}

impl RegistrySink {
    /// A sink that tags everything it sends with `registry`.
    pub fn new(registry: RegistryId, tx: mpsc::Sender<RegistryMessage>) -> Self {
        Self { registry, tx }
    }

    /// The registry this sink speaks for.
    pub fn registry(&self) -> &RegistryId {
        &self.registry
    }

    /// Sends one event.
    pub async fn send(&self, event: RegistryEvent) -> Result<(), RegistryError> {
        self.tx
            .send(RegistryMessage {
                registry: self.registry.clone(),
                event,
            })
            .await
            .map_err(|_| RegistryError::Closed)
    }

    /// Sends a batch of changes; an empty batch sends nothing.
    pub async fn changes(&self, changes: Vec<Change>) -> Result<(), RegistryError> {
        if changes.is_empty() {
            return Ok(());
        }
        self.send(RegistryEvent::Changes(changes)).await
    }

    /// Reports that the initial listing is complete.
    pub async fn synced(&self) -> Result<(), RegistryError> {
        self.send(RegistryEvent::Synced).await
    }

    /// Reports the registry's health.
    pub async fn status(&self, status: RegistryStatus) -> Result<(), RegistryError> {
        self.send(RegistryEvent::Status(status)).await
    }

    /// Reports the complete list of rejected config objects.
    pub async fn rejected(&self, rejections: Vec<Rejection>) -> Result<(), RegistryError> {
        self.send(RegistryEvent::Rejected(rejections)).await
    }
}

/// A platform adapter. Each configured registry is one value of a type implementing this, started
/// once as its own task.
pub trait Registry: Send + 'static {
    /// The configured name of this registry instance.
    fn id(&self) -> RegistryId;

    /// Runs until the platform watch ends for good or the sink closes. Transient platform failures
    /// are retried inside, reported through [`RegistrySink::status`], never returned.
    fn run(self: Box<Self>, sink: RegistrySink) -> BoxFuture<'static, Result<(), RegistryError>>;
}
