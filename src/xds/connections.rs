//! The live connections, for debug and admin views (`/debug/syncz`, `/debug/adsz`, proxy-status).
//!
//! Each stream owns its entry; the admin side only reads copies. What each type of a stream has
//! asked for and been sent is read from the stream itself when a view asks ([`StatusSource`]):
//! publishing it on every request and response cost ~4 % of the server's CPU in an endpoint
//! change at 5,000 proxies, for views that are rarely open. Dropping the stream's [`Registration`]
//! removes the entry and lowers the `pilot_xds` gauge, however the stream ended (TRANS-3).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::SystemTime;

use envoy_types::pb::google::protobuf::Struct;
use imbl::OrdSet;
use serde::Serialize;
use tokio::sync::Notify;

use super::metrics;
use super::node::NodeInfo;
use crate::envoy::ResourceType;
use crate::snapshot::View;

/// Sync state of one type on one connection, computed exactly as istiod's proxy-status does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SyncStatus {
    /// The client acknowledged the last response sent.
    #[serde(rename = "SYNCED")]
    Synced,
    /// A response was sent and not (yet) acknowledged.
    #[serde(rename = "STALE")]
    Stale,
    /// Nothing was sent for this type.
    #[serde(rename = "NOT SENT")]
    NotSent,
    /// The client's last request for this type was a NACK.
    #[serde(rename = "ERROR")]
    Error,
}

impl fmt::Display for SyncStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SyncStatus::Synced => "SYNCED",
            SyncStatus::Stale => "STALE",
            SyncStatus::NotSent => "NOT SENT",
            SyncStatus::Error => "ERROR",
        })
    }
}

/// What one connection has asked for and been sent, for one type.
#[derive(Debug, Clone, Default)]
pub struct TypeStatus {
    /// Whether the type was requested on this stream at all.
    pub requested: bool,
    /// Wildcard subscription.
    pub wildcard: bool,
    /// Explicitly subscribed names.
    pub names: OrdSet<Arc<str>>,
    /// Nonce of the last response sent.
    pub sent_nonce: Option<Arc<str>>,
    /// `version_info` of the last response sent.
    pub sent_version: Option<Arc<str>>,
    /// When it was sent.
    pub sent_at: Option<SystemTime>,
    /// Nonce the client last acknowledged.
    pub acked_nonce: Option<Arc<str>>,
    /// `version_info` the client last acknowledged (as the client sent it, bounded).
    pub acked_version: Option<Arc<str>>,
    /// Message of the client's last NACK, if its last request was one (bounded).
    pub last_error: Option<String>,
    /// SotW EDS/RDS: the names the last response carried (what a NACK of it rejects); `None` for
    /// full-state types, delta streams and a response that carried every subscribed name, whose
    /// NACKs are about every resource of the type.
    pub last_names: Option<Arc<[Arc<str>]>>,
}

impl TypeStatus {
    /// SYNCED / STALE / NOT SENT / ERROR, as istiod's `debugSyncStatus` decides it.
    pub fn status(&self) -> SyncStatus {
        if self.last_error.is_some() {
            SyncStatus::Error
        } else if self.sent_nonce.is_none() {
            SyncStatus::NotSent
        } else if self.acked_nonce == self.sent_nonce {
            SyncStatus::Synced
        } else {
            SyncStatus::Stale
        }
    }
}

/// A copy of one live connection's state.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    /// Unique connection id: node id plus a process-wide counter (TRANS-4).
    pub id: Arc<str>,
    /// `node.id`.
    pub node_id: Arc<str>,
    /// `node.cluster`.
    pub cluster: Arc<str>,
    /// Node metadata as sent (bounded), for config dumps.
    pub metadata: Option<Arc<Struct>>,
    /// Listener bind address the node chose, if not the default.
    pub listener_address: Option<IpAddr>,
    /// The snapshot view the node sees (Envoy, rebound Envoy, or proxyless gRPC).
    pub view: View,
    /// Client address, when the transport knows it.
    pub peer: Option<SocketAddr>,
    /// When the stream was accepted.
    pub connected_at: SystemTime,
    /// Whether it is an incremental (delta) stream rather than state-of-the-world.
    pub delta: bool,
    /// Per type, in [`ResourceType::ALL`] order.
    pub types: [(ResourceType, TypeStatus); ResourceType::COUNT],
}

/// Where a live connection's per-type state is read from when a debug view asks: the stream.
pub(crate) trait StatusSource: Send {
    /// What `ty` has asked for and been sent on this stream.
    fn status(&self, ty: ResourceType) -> TypeStatus;
}

/// A stream's state, held weakly: the entry must not keep an ended stream alive.
type WeakSource = Weak<parking_lot::Mutex<dyn StatusSource>>;

struct Entry {
    about: About,
    /// Set once the stream applied its first request.
    source: Mutex<Option<WeakSource>>,
    /// Wakes the stream to send everything it is subscribed to again.
    force_push: Arc<Notify>,
}

/// What [`ConnectionInfo`] says of a connection besides its types, fixed when it registers.
struct About {
    id: Arc<str>,
    node_id: Arc<str>,
    cluster: Arc<str>,
    metadata: Option<Arc<Struct>>,
    listener_address: Option<IpAddr>,
    view: View,
    peer: Option<SocketAddr>,
    connected_at: SystemTime,
    delta: bool,
}

impl Entry {
    /// A copy of the connection's state, each type's read from its stream.
    fn info(&self) -> ConnectionInfo {
        let a = &self.about;
        let source = lock(&self.source).as_ref().and_then(Weak::upgrade);
        let types = match source {
            Some(source) => {
                let source = source.lock();
                ResourceType::ALL.map(|t| (t, source.status(t)))
            }
            None => ResourceType::ALL.map(|t| (t, TypeStatus::default())),
        };
        ConnectionInfo {
            id: Arc::clone(&a.id),
            node_id: Arc::clone(&a.node_id),
            cluster: Arc::clone(&a.cluster),
            metadata: a.metadata.clone(),
            listener_address: a.listener_address,
            view: a.view,
            peer: a.peer,
            connected_at: a.connected_at,
            delta: a.delta,
            types,
        }
    }
}

/// Cloneable handle on the live connections.
#[derive(Clone, Default)]
pub struct Connections {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: Mutex<BTreeMap<Arc<str>, Arc<Entry>>>,
    counter: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Connections {
    /// Copies of every live connection, ordered by connection id.
    pub fn list(&self) -> Vec<ConnectionInfo> {
        let entries: Vec<Arc<Entry>> = lock(&self.inner.entries).values().cloned().collect();
        entries.iter().map(|e| e.info()).collect()
    }

    /// Connections of node `node_id` (there may be several, TRANS-4).
    pub fn for_node(&self, node_id: &str) -> Vec<ConnectionInfo> {
        self.list()
            .into_iter()
            .filter(|c| &*c.node_id == node_id)
            .collect()
    }

    /// Number of live connections.
    pub fn len(&self) -> usize {
        lock(&self.inner.entries).len()
    }

    /// Whether none are live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Makes every live connection send its full subscription again (`/debug/adsz?push=true`).
    /// Returns how many were asked.
    pub fn push_all(&self) -> usize {
        let entries: Vec<Arc<Entry>> = lock(&self.inner.entries).values().cloned().collect();
        for e in &entries {
            e.force_push.notify_one();
        }
        entries.len()
    }

    /// Registers a new stream for `node`.
    pub(crate) fn register(
        &self,
        node: &NodeInfo,
        peer: Option<SocketAddr>,
        delta: bool,
    ) -> Registration {
        let n = self.inner.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let id: Arc<str> = Arc::from(format!("{}-{n}", node.id));
        let force_push = Arc::new(Notify::new());
        let entry = Arc::new(Entry {
            about: About {
                id: Arc::clone(&id),
                node_id: Arc::clone(&node.id),
                cluster: Arc::clone(&node.cluster),
                metadata: node.metadata.clone(),
                listener_address: node.listener_address,
                view: node.view_for(delta),
                peer,
                connected_at: SystemTime::now(),
                delta,
            },
            source: Mutex::new(None),
            force_push: Arc::clone(&force_push),
        });
        lock(&self.inner.entries).insert(Arc::clone(&id), Arc::clone(&entry));
        metrics::connected(1.0);
        Registration {
            connections: self.clone(),
            id,
            entry,
            serial: n,
        }
    }
}

/// A stream's own entry. Dropping it unregisters the connection.
pub(crate) struct Registration {
    connections: Connections,
    id: Arc<str>,
    entry: Arc<Entry>,
    serial: u64,
}

impl Registration {
    /// The connection id.
    pub(crate) fn id(&self) -> &Arc<str> {
        &self.id
    }

    /// Process-wide serial number of this connection (used to make nonces unique per process).
    pub(crate) fn serial(&self) -> u64 {
        self.serial
    }

    /// Wakes when an admin asks for a full push.
    pub(crate) fn force_push(&self) -> Arc<Notify> {
        Arc::clone(&self.entry.force_push)
    }

    /// Debug views read the state of each type from `source` from now on.
    pub(crate) fn attach(&self, source: WeakSource) {
        *lock(&self.entry.source) = Some(source);
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.connections.inner.entries).remove(&self.id);
        metrics::connected(-1.0);
    }
}
