//! The xDS gRPC server: ADS and the per-type services (CDS, EDS, LDS, RDS), each in
//! state-of-the-world and incremental (delta) form.
//!
//! What it does:
//! - serves `AggregatedDiscoveryService/StreamAggregatedResources` and `StreamClusters`,
//!   `StreamEndpoints`, `StreamListeners`, `StreamRoutes` from the [`SnapshotStore`], following
//!   the rules of `docs/protocol.md` (SOTW-1..37, TRANS-1/3/4/10/11/14/15, section G);
//! - serves their delta twins (`DeltaAggregatedResources`, `DeltaClusters`, ...) from the same
//!   snapshot and the same encoded bytes (DELTA-1..19, DELTA-21; see `delta.rs`);
//! - sends each response as a small per-stream header plus shared pre-encoded resource bytes, with
//!   raw tower services instead of tonic's generated server (no per-stream encode buffer,
//!   `docs/floor.md`);
//! - runs one task per stream for its requests; the stream's response body, the single writer,
//!   builds a response only when h2 asks it for one (the client has room), from the newest
//!   snapshot (a slow client skips snapshots, never delays others);
//! - keeps a [`Connections`] registry for debug views (sync status as istiod computes it) and
//!   records istiod's metric families (see `metrics.rs` in this module).
//!
//! Per stream the server keeps (besides HTTP/2 and tonic's own few KB): the node (id, cluster,
//! bounded metadata shared with the registry entry), and per type a ~300-byte state — the
//! subscription (a persistent set of shared names), the last sent nonce/version/time, the acked
//! nonce/version, the last NACK text (at most 4 KiB), and names still owed. It never keeps a copy
//! of what it sent: responses are built from the newest snapshot when the client has room, and a
//! stuck client pins at most the responses already handed to h2/hyper. ADS streams also hold the snapshot their last CDS response
//! came from (shared structure) for make-before-break removals (SOTW-31), and the names of clusters
//! CDS added whose EDS has not gone out yet (listeners and routes wait for it, bounded by
//! [`XdsOptions::eds_warm_wait`]; `warming.rs`).
//!
//! A delta stream keeps the same per-type records, with the client's view held as a shared
//! reference to the map its last response came from instead of SotW's owed-name sets (`delta/state.rs`).
//!
//! Streams on mTLS connections (`crate::tls`) carry the peer's SPIFFE identity; the node of the
//! first request must match it (SEC-2) or the stream ends with `PERMISSION_DENIED` before any
//! config is generated.
//!
//! - serves client status (CSDS, `csds.rs`) from the same connection registry and snapshot;
//! - serves REST-JSON polls (`POST /v3/discovery:*`, `rest.rs`) from the same snapshot.
//!
//! What it does not do: TTL/heartbeats (SOTW-38, DELTA-20), delta aliases and resource locators,
//! TLS itself (`crate::tls`), admission rate limiting, the HTTP/2 transport with its keepalive,
//! limits and connection age (`crate::runtime`'s connection loop, `runtime/connections.rs`), and
//! HTTP debug endpoints (the admin module reads [`Connections`]).
//!
//! tributary itself mounts [`XdsServer::routes`] on that connection loop. [`XdsServer::router`]
//! mounts the same services on a plain `tonic::transport::Server`, the simplest way to serve them
//! (the in-process protocol tests do this):
//!
//! ```no_run
//! # async fn demo(store: tributary::snapshot::SnapshotStore) -> anyhow::Result<()> {
//! use tributary::xds::{XdsOptions, XdsServer};
//! let xds = XdsServer::new(store, XdsOptions::default());
//! xds.router(&mut tonic::transport::Server::builder())
//!     .serve("127.0.0.1:15010".parse()?)
//!     .await?;
//! # Ok(()) }
//! ```

mod body;
mod cache;
mod connections;
mod csds;
mod delta;
mod diffs;
mod empty_answers;
pub(crate) mod metrics;
mod names;
mod node;
mod own_waker;
mod per_type;
mod record;
mod request;
mod response;
mod rest;
mod service;
mod sotw;
mod stream;
mod subscription;
mod warming;

pub use connections::{ConnectionInfo, Connections, SyncStatus, TypeStatus};
#[cfg(test)]
pub(crate) use connections::{Registration, StatusSource};
pub use csds::CsdsService;
pub use node::{LISTENER_ADDRESS_KEY, NodeError, NodeInfo, VHDS_KEY};
pub use record::MAX_ERROR_BYTES;
pub use request::{MAX_NAME_BYTES, MAX_NAMES_PER_REQUEST};
pub use rest::RestService;
pub use service::{AdsService, CdsService, EdsService, LdsService, RdsService};
pub use subscription::{Change, SotwNames, Subscription, WILDCARD};
pub use warming::DEFAULT_EDS_WARM_WAIT;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::snapshot::SnapshotStore;

/// Default largest request accepted. A SotW request naming 20k+ clusters (TRANS-6) is ~2 MiB, a
/// delta reconnect IRV for them ~4 MiB; 16 MiB covers those with room while keeping one bad
/// client from making the server buffer unbounded input (SEC-9). tonic's default is 4 MiB.
pub const DEFAULT_MAX_DECODING_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

/// Settings of the xDS server.
#[derive(Debug, Clone)]
pub struct XdsOptions {
    /// Largest request message accepted; bigger ones end the stream with `RESOURCE_EXHAUSTED`.
    pub max_decoding_message_size: usize,
    /// How a TLS peer's certificate identity binds the node it may claim (SEC-2). Streams on
    /// plaintext connections carry no identity and are not checked.
    pub identity: crate::tls::IdentityMapping,
    /// Accept only SPIFFE IDs of this trust domain.
    pub trust_domain: Option<String>,
    /// Over ADS, how long listeners and routes wait for the EDS of clusters a push added before they
    /// go anyway (make-before-break, SOTW-31; see `warming.rs` in this module). Zero turns the wait
    /// off.
    pub eds_warm_wait: std::time::Duration,
    /// Answer the MCP collections (`ResourceType::is_mcp`) for istiod. When off they are unknown
    /// types, ignored (SOTW-5).
    pub serve_mcp: bool,
}

impl Default for XdsOptions {
    fn default() -> Self {
        Self {
            max_decoding_message_size: DEFAULT_MAX_DECODING_MESSAGE_SIZE,
            identity: crate::tls::IdentityMapping::default(),
            trust_domain: None,
            eds_warm_wait: DEFAULT_EDS_WARM_WAIT,
            serve_mcp: false,
        }
    }
}

/// The services to mount, all sharing one server state.
#[derive(Clone)]
pub struct XdsServices {
    /// `AggregatedDiscoveryService`.
    pub ads: AdsService,
    /// `ClusterDiscoveryService`.
    pub cds: CdsService,
    /// `EndpointDiscoveryService`.
    pub eds: EdsService,
    /// `ListenerDiscoveryService`.
    pub lds: LdsService,
    /// `RouteDiscoveryService`.
    pub rds: RdsService,
}

/// The xDS server: services to mount, the connection registry, and the drain signal.
#[derive(Clone)]
pub struct XdsServer {
    shared: Arc<service::Shared>,
}

impl XdsServer {
    /// A server answering from `store`. Streams are refused with `UNAVAILABLE` until the store has
    /// its first snapshot (TRANS-11).
    pub fn new(store: SnapshotStore, options: XdsOptions) -> Self {
        metrics::describe();
        Self {
            shared: Arc::new(service::Shared {
                store,
                connections: Connections::default(),
                drain: CancellationToken::new(),
                max_decoding_message_size: options.max_decoding_message_size,
                identity: options.identity,
                trust_domain: options.trust_domain.map(Arc::from),
                serve_mcp: options.serve_mcp,
                full_sets: Arc::default(),
                diffs: Arc::default(),
                names: Arc::default(),
                eds_warm_wait: options.eds_warm_wait,
            }),
        }
    }

    /// The live connections (for `/debug/syncz`, `/debug/adsz`, proxy-status).
    pub fn connections(&self) -> Connections {
        self.shared.connections.clone()
    }

    /// The tower services, to mount on a `tonic::transport::Server` or in a
    /// [`tonic::service::Routes`].
    pub fn services(&self) -> XdsServices {
        let shared = &self.shared;
        XdsServices {
            ads: AdsService {
                shared: Arc::clone(shared),
            },
            cds: CdsService {
                shared: Arc::clone(shared),
            },
            eds: EdsService {
                shared: Arc::clone(shared),
            },
            lds: LdsService {
                shared: Arc::clone(shared),
            },
            rds: RdsService {
                shared: Arc::clone(shared),
            },
        }
    }

    /// A router serving all five services on `server` (add other services to it as usual). Used by
    /// tests and embedders; tributary's own transport uses [`Self::routes`].
    pub fn router<L: Clone>(
        &self,
        server: &mut tonic::transport::Server<L>,
    ) -> tonic::transport::server::Router<L> {
        let s = self.services();
        server
            .add_service(s.ads)
            .add_service(s.cds)
            .add_service(s.eds)
            .add_service(s.lds)
            .add_service(s.rds)
    }

    /// The five services as routes, for a connection loop of one's own (tributary's is
    /// `runtime/connections.rs`).
    pub fn routes(&self) -> tonic::service::Routes {
        let s = self.services();
        tonic::service::Routes::new(s.ads)
            .add_service(s.cds)
            .add_service(s.eds)
            .add_service(s.lds)
            .add_service(s.rds)
    }

    /// The client status service (CSDS) over this server's connections and snapshot store.
    pub fn csds(&self) -> CsdsService {
        CsdsService {
            connections: self.shared.connections.clone(),
            store: self.shared.store.clone(),
        }
    }

    /// The REST-JSON discovery endpoints over this server's snapshot store.
    pub fn rest(&self) -> RestService {
        RestService {
            store: self.shared.store.clone(),
        }
    }

    /// Starts draining: new streams are refused and live ones end with `UNAVAILABLE` (TRANS-8).
    /// Call after readiness turns false, before stopping the transport.
    pub fn drain(&self) {
        self.shared.drain.cancel();
    }

    /// Whether [`Self::drain`] was called.
    pub fn is_draining(&self) -> bool {
        self.shared.drain.is_cancelled()
    }
}
