//! What the aggregate knows about each registry, published for `/ready` and `/debug/registryz`.

use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use serde::Serialize;
use tributary_registries::{RegistryId, RegistryStatus, Rejection};

mod rfc3339;

/// Where a registry is in its initial sync.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SyncState {
    /// Still listing.
    Pending,
    /// Reported its complete initial state.
    Synced {
        /// When.
        #[serde(serialize_with = "rfc3339::serialize")]
        at: SystemTime,
    },
    /// Did not sync within the sync timeout; served without it.
    TimedOut {
        /// When the timeout passed.
        #[serde(serialize_with = "rfc3339::serialize")]
        at: SystemTime,
    },
}

/// One registry as the aggregate sees it.
#[derive(Debug, Clone, Serialize)]
pub struct RegistryInfo {
    /// Its configured name.
    pub id: RegistryId,
    /// Initial sync progress.
    pub sync: SyncState,
    /// Healthy, or degraded with the reason (its last state is still served, marked stale).
    #[serde(serialize_with = "serialize_status")]
    pub status: RegistryStatus,
    /// Since when it has been degraded (the "stale since" of REG-2).
    #[serde(serialize_with = "rfc3339::serialize_opt")]
    pub degraded_since: Option<SystemTime>,
    /// Hostnames it currently reports.
    pub services: usize,
    /// When it last reported anything.
    #[serde(serialize_with = "rfc3339::serialize_opt")]
    pub last_event: Option<SystemTime>,
    /// Config objects it currently rejects (REG-11), as it last reported them.
    pub rejected: Vec<Rejection>,
}

impl RegistryInfo {
    pub(crate) fn new(id: RegistryId) -> Self {
        Self {
            id,
            sync: SyncState::Pending,
            status: RegistryStatus::Healthy,
            degraded_since: None,
            services: 0,
            last_event: None,
            rejected: Vec::new(),
        }
    }
}

fn serialize_status<S: serde::Serializer>(s: &RegistryStatus, ser: S) -> Result<S::Ok, S::Error> {
    match s {
        RegistryStatus::Healthy => ser.serialize_str("healthy"),
        RegistryStatus::Degraded { reason } => ser.serialize_str(&format!("degraded: {reason}")),
    }
}

/// The registries' status as last published by the aggregate. Cheap to clone; lock-free reads.
#[derive(Clone, Default)]
pub struct RegistriesView {
    inner: Arc<ArcSwap<ViewState>>,
}

/// A published copy of the aggregate's registry status.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ViewState {
    /// Every configured registry, in merge order.
    pub registries: Vec<RegistryInfo>,
    /// Whether the mesh is being served (every registry synced or timed out).
    pub serving: bool,
}

impl RegistriesView {
    /// The latest published status.
    pub fn load(&self) -> Arc<ViewState> {
        self.inner.load_full()
    }

    pub(crate) fn publish(&self, registries: Vec<RegistryInfo>, serving: bool) {
        self.inner.store(Arc::new(ViewState {
            registries,
            serving,
        }));
    }
}
