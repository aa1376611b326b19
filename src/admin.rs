//! The admin HTTP server (istiod's monitoring port, 15014): readiness, Prometheus metrics and the
//! `/debug/*` views, routed with axum and served by hyper on our own accept loop (`server.rs`:
//! connection cap, header-read timeout, backoff on accept errors).
//!
//! It only reads: the snapshot store, the aggregate's registry view and the xDS server's connection
//! status (through [`XdsStatus`], so this module does not depend on stream internals). The one
//! action it takes is `/debug/adsz?push=true`, which asks every stream to resend its state; it is
//! off unless `admin.allow_push` is set, and needs a bearer token when one is configured
//! (`auth.rs`).

mod auth;
pub mod config_dump;
mod debug;
pub mod metrics;
mod process;
mod routes;
mod server;
mod tasks;
mod xds_status;

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tributary_registries::config_store::ConfigStore;

use crate::aggregate::RegistriesView;
use crate::config::Config;
use crate::snapshot::SnapshotStore;

pub use config_dump::{ProxyView, TypeView};
pub use routes::router;
pub use server::serve;

/// What the xDS server tells the admin about its connections.
pub trait XdsStatus: Send + Sync + 'static {
    /// `/debug/syncz`: per connection and type, sent/acked nonces and SYNCED / STALE / NOT SENT /
    /// ERROR with the last NACK message.
    fn syncz(&self) -> Value;
    /// `/debug/adsz`: connections and their subscriptions, optionally only `proxy_id`'s.
    fn adsz(&self, proxy_id: Option<&str>) -> Value;
    /// Asks every stream to resend everything it is subscribed to; returns how many streams.
    fn push_all(&self) -> usize;
    /// What the config dump needs of proxy `proxy_id` (its newest connection), if it is
    /// connected. `proxy_id` is a full node id, or istioctl's `<pod>.<namespace>` (the third `~`
    /// field of a sidecar's node id); see [`proxy_id_matches`].
    fn proxy(&self, proxy_id: &str) -> Option<ProxyView>;
}

/// Everything the admin server reads.
#[derive(Clone)]
pub struct AdminState {
    /// The published snapshots.
    pub store: SnapshotStore,
    /// Registry sync and health.
    pub registries: RegistriesView,
    /// Connected proxies.
    pub xds: Arc<dyn XdsStatus>,
    /// The effective configuration, for `/debug/configz` and the admin's own settings.
    pub config: Arc<Config>,
    /// Cancelled when shutdown starts: `/ready` turns 503 first (TRANS-8).
    pub draining: CancellationToken,
    /// The traffic rules every config source holds, merged: `/debug/configz` shows them.
    pub rules: ConfigStore,
}

/// Whether a node id matches what an operator typed as `proxyID`: the id itself, or istioctl's
/// `<pod>.<namespace>` form, which is the third field of a sidecar node id
/// `sidecar~<ip>~<pod>.<namespace>~<namespace>.svc.cluster.local`.
pub fn proxy_id_matches(node_id: &str, proxy_id: &str) -> bool {
    if node_id == proxy_id {
        return true;
    }
    !proxy_id.contains('~') && node_id.split('~').nth(2) == Some(proxy_id)
}

#[cfg(test)]
mod tests;
