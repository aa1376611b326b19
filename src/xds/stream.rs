//! One SotW stream: what its requests mean and what its pushes send, run by the shared loop in
//! `driver.rs` (TRANS-15). Also the request checks both protocols share (type, names, node).
//!
//! One push walks CDS → EDS → LDS → RDS from a single pinned snapshot before moving on
//! (SOTW-30/31). No lock is held across an await and nothing shared is locked while a response is
//! handed over.

use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use prost::Message;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::codec::{BufferSettings, DecodeBuf, Decoder, Streaming};
use tonic::{Code, Status};

use super::body::{BodyGone, SlotWriter};
use super::cache::FullSetCache;
use super::connections::{Connections, Registration};
use super::driver;
use super::metrics::{self, InvalidReason};
use super::node::NodeInfo;
use super::response;
use super::state::{Kind, TypeState};
use crate::envoy::ResourceType;
use crate::snapshot::{Snapshot, SnapshotStore};

/// Longest resource name accepted. Istio-style names (`outbound|port|subset|hostname`) stay under
/// 300 bytes; hostnames are at most 253. Anything longer is garbage (SEC-12).
pub const MAX_NAME_BYTES: usize = 2048;

/// Most resource names accepted in one request. A large mesh (20k clusters, TRANS-6) stays well
/// under this; more is garbage and would only cost memory.
pub const MAX_NAMES_PER_REQUEST: usize = 200_000;

/// How many unknown-type requests per stream are logged; the rest are only counted (SOTW-5).
const UNKNOWN_TYPE_LOG_LIMIT: u32 = 4;

/// Initial request buffer per stream. tonic's default is 8 KiB per stream; a typical request (an
/// ACK, a few names) is a few hundred bytes, and the buffer grows on demand for larger ones, so
/// 1 KiB keeps idle streams small (docs/floor.md's per-stream budget).
const REQUEST_BUFFER_BYTES: usize = 1024;

/// Decodes requests (`DiscoveryRequest` or `DeltaDiscoveryRequest`), reporting malformed ones as
/// the client's fault (TRANS-10), not `INTERNAL`.
pub(crate) struct RequestDecoder<T>(PhantomData<T>);

impl<T> RequestDecoder<T> {
    pub(crate) fn new() -> Self {
        Self(PhantomData)
    }
}

impl<T: Message + Default> Decoder for RequestDecoder<T> {
    type Item = T;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<T>, Status> {
        T::decode(src).map(Some).map_err(|e| {
            metrics::invalid(InvalidReason::Malformed);
            let full = std::any::type_name::<T>();
            let name = full.rsplit("::").next().unwrap_or(full);
            Status::invalid_argument(format!("malformed {name}: {e}"))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        // The yield threshold only matters when encoding; keep tonic's 32 KiB default.
        BufferSettings::new(REQUEST_BUFFER_BYTES, 32 * 1024)
    }
}

/// The type a request is about, checked against the service it came on: `Ok(None)` for a type
/// tributary does not serve on ADS, which is ignored and counted (SOTW-5); an error ends the
/// stream.
pub(crate) fn request_type(
    fixed: Option<ResourceType>,
    type_url: &str,
) -> Result<Option<ResourceType>, Status> {
    match (fixed, type_url) {
        (Some(t), "") => Ok(Some(t)),
        (Some(t), url) if url == t.type_url() => Ok(Some(t)),
        (Some(t), url) => Err(refuse(
            InvalidReason::TypeMismatch,
            format!(
                "this service serves {} only, got type_url {url:.256}",
                t.type_url()
            ),
        )),
        (None, "") => Err(refuse(
            InvalidReason::MissingTypeUrl,
            "type_url is required for ADS".to_owned(),
        )),
        (None, url) => match ResourceType::from_type_url(url) {
            Some(t) => Ok(Some(t)),
            None => {
                metrics::invalid(InvalidReason::UnknownType);
                Ok(None)
            }
        },
    }
}

/// Checks a request's resource names against [`MAX_NAMES_PER_REQUEST`] and [`MAX_NAME_BYTES`]
/// (SEC-12): `count` names in all, `names` to look at.
pub(crate) fn check_names<'a>(
    count: usize,
    mut names: impl Iterator<Item = &'a str>,
) -> Result<(), Status> {
    if count > MAX_NAMES_PER_REQUEST {
        return Err(refuse(
            InvalidReason::BadNames,
            format!(
                "{count} resource names in one request, over the limit of {MAX_NAMES_PER_REQUEST}"
            ),
        ));
    }
    if let Some(long) = names.find(|n| n.len() > MAX_NAME_BYTES) {
        return Err(refuse(
            InvalidReason::BadNames,
            format!(
                "resource name of {} bytes is over the {MAX_NAME_BYTES}-byte limit (starts {:.64?})",
                long.len(),
                long
            ),
        ));
    }
    Ok(())
}

/// Requests for types tributary does not serve on one stream: ignored and counted (SOTW-5), the
/// first few logged.
#[derive(Default)]
pub(crate) struct UnknownTypes(u32);

impl UnknownTypes {
    pub(crate) fn log(&mut self, conn: &str, url: &str) {
        self.0 = self.0.saturating_add(1);
        if self.0 <= UNKNOWN_TYPE_LOG_LIMIT {
            tracing::info!(conn, type_url = %format!("{url:.256}"), "ignoring request for unknown type");
        }
    }
}

/// Counts an invalid request and makes the status that ends its stream.
pub(crate) fn refuse(reason: InvalidReason, message: String) -> Status {
    metrics::invalid(reason);
    Status::invalid_argument(message)
}

/// Checks the first request's node and returns it, or the status that ends the stream.
pub(crate) fn first_node(
    node: Option<&envoy_types::pb::envoy::config::core::v3::Node>,
    peer: Option<SocketAddr>,
) -> Result<NodeInfo, Status> {
    NodeInfo::from_first(node).map_err(|e| {
        metrics::invalid(match e {
            super::node::NodeError::Missing | super::node::NodeError::EmptyId => {
                InvalidReason::MissingNode
            }
            _ => InvalidReason::BadMetadata,
        });
        tracing::info!(error = %e, peer = %super::driver::peer_text(peer), "refusing xDS stream");
        Status::invalid_argument(e.to_string())
    })
}

/// Refuses a request whose node differs from the stream's (SOTW-3: never re-scope a stream).
pub(crate) fn check_same_node(
    stream_node: &NodeInfo,
    node: Option<&envoy_types::pb::envoy::config::core::v3::Node>,
) -> Result<(), Status> {
    match node {
        Some(node) if !stream_node.same_as(node) => Err(refuse(
            InvalidReason::NodeChanged,
            format!(
                "node changed mid-stream (was {:?}, now {:.256?}); open a new stream",
                &*stream_node.id, node.id
            ),
        )),
        _ => Ok(()),
    }
}

/// A TLS stream's authenticated identity and the rule binding it to the claimed node (SEC-2).
pub(crate) struct Auth {
    pub identity: Arc<crate::tls::PeerIdentity>,
    pub mapping: crate::tls::IdentityMapping,
    pub trust_domain: Option<Arc<str>>,
}

/// Refuses a node its connection's certificate does not vouch for: `PERMISSION_DENIED` before
/// any config is generated (SEC-2). The identity is the connection's, fixed at the handshake, and
/// later requests cannot change the node (SOTW-3), so it holds for the stream's life (SEC-3).
pub(crate) fn authorize(
    auth: Option<&Auth>,
    node: Option<&envoy_types::pb::envoy::config::core::v3::Node>,
    peer: Option<SocketAddr>,
) -> Result<(), Status> {
    let (Some(auth), Some(node)) = (auth, node) else {
        return Ok(());
    };
    auth.identity
        .authorize(auth.mapping, auth.trust_domain.as_deref(), node)
        .map_err(|e| {
            tracing::warn!(error = %e, peer = %super::driver::peer_text(peer), "refusing xDS stream: identity mismatch");
            Status::permission_denied(e.to_string())
        })
}

/// Everything a stream needs from the server.
pub(crate) struct Params {
    pub store: SnapshotStore,
    pub connections: Connections,
    pub drain: CancellationToken,
    /// The type a per-type service serves; `None` for ADS.
    pub fixed: Option<ResourceType>,
    pub peer: Option<SocketAddr>,
    /// The TLS peer's identity and how it binds the node; `None` on plaintext connections.
    pub auth: Option<Auth>,
    /// Whole-type bytes shared by wildcard streams.
    pub full_sets: Arc<FullSetCache>,
}

/// Runs one stream to its end. Aborted (and cleaned up by drop guards) if the body goes away.
pub(crate) async fn run(
    params: Params,
    requests: Streaming<DiscoveryRequest>,
    writer: SlotWriter,
    snapshots: watch::Receiver<u64>,
) {
    driver::run(
        params,
        requests,
        writer,
        snapshots,
        false,
        |params, node, registration, writer| Stream {
            params,
            node,
            nonce_prefix: format!("{:x}", registration.serial()),
            registration,
            types: ResourceType::PUSH_ORDER.map(TypeState::new),
            writer,
            cycle: None,
            cds_base: None,
            cds_cleanup: false,
            unconverged: None,
            nonces: 0,
            unknown: UnknownTypes::default(),
        },
    )
    .await;
}

/// The tonic status for a request-stream error: limits are RESOURCE_EXHAUSTED and decoding faults
/// INVALID_ARGUMENT (TRANS-10); transport errors pass through.
pub(crate) fn client_fault(status: Status) -> Status {
    match status.code() {
        Code::OutOfRange => {
            metrics::invalid(InvalidReason::Malformed);
            Status::resource_exhausted(status.message().to_owned())
        }
        Code::Internal => Status::invalid_argument(status.message().to_owned()),
        _ => status,
    }
}

struct Stream {
    params: Params,
    node: NodeInfo,
    registration: Registration,
    nonce_prefix: String,
    types: [TypeState; 4],
    writer: SlotWriter,
    /// The snapshot the current push walks through (SOTW-31); `None` between pushes.
    cycle: Option<Arc<Snapshot>>,
    /// ADS only: the snapshot the last CDS response came from, to keep removed clusters until the
    /// routes moved off them (SOTW-31). Shared with every other holder; costs only what changed
    /// since.
    cds_base: Option<Arc<Snapshot>>,
    /// A CDS response kept removed clusters: owe a clean one when the push completes.
    cds_cleanup: bool,
    /// Trigger time of a snapshot whose push started but whose convergence is not recorded yet.
    unconverged: Option<Instant>,
    nonces: u64,
    unknown: UnknownTypes,
}

impl driver::Protocol for Stream {
    type Request = DiscoveryRequest;

    fn writer(&self) -> &SlotWriter {
        &self.writer
    }

    fn on_request(&mut self, req: DiscoveryRequest) -> Result<(), Status> {
        check_same_node(&self.node, req.node.as_ref())?;
        let Some(ty) = request_type(self.params.fixed, &req.type_url)? else {
            self.unknown.log(self.registration.id(), &req.type_url);
            return Ok(());
        };
        check_names(
            req.resource_names.len(),
            req.resource_names.iter().map(String::as_str),
        )?;
        let error = req.error_detail.as_ref().map(|e| e.message.as_str());
        let known = self.params.store.load();
        let state = &mut self.types[ty.index()];
        if state.acks_before_staged(&req.response_nonce)
            && let Some(framed) = self.writer.recall(ty)
        {
            // The request is stale only because of a response still waiting in our slot: take that
            // back (it is rebuilt after this request) so subscription changes are not lost (BUG-8)
            // and nothing goes out for names or types the client just dropped (SOTW-35).
            state.recalled(framed.names);
        }
        let kind = state.on_request_known(
            &req.response_nonce,
            &req.version_info,
            &req.resource_names,
            error,
            known.as_deref().map(|s| s.resources(ty)),
        );
        match kind {
            Kind::Stale => metrics::expired_nonce(ty),
            Kind::Nack => {
                metrics::rejected(ty);
                tracing::info!(conn = %self.registration.id(), r#type = %ty, error = error.unwrap_or_default(), "NACK");
            }
            Kind::Initial | Kind::Ack | Kind::Update => {}
        }
        if !state.subscribed()
            && let Some(framed) = self.writer.recall(ty)
        {
            // SOTW-35: the staged response is for a type the client no longer wants.
            state.recalled(framed.names);
        }
        self.registration.update(ty, state.status());
        Ok(())
    }

    fn has_work(&self, latest_seq: u64) -> bool {
        self.types.iter().any(|t| t.has_work(latest_seq))
    }

    /// Stages the next owed response, walking the pinned snapshot in push order.
    fn push_one(&mut self, latest_seq: &mut u64) -> Result<(), BodyGone> {
        loop {
            let Some(snap) = driver::pin_cycle(&mut self.cycle, &self.params.store) else {
                return Ok(());
            };
            *latest_seq = (*latest_seq).max(snap.seq);
            for ty in ResourceType::PUSH_ORDER {
                if !self.types[ty.index()].has_work(snap.seq) {
                    continue;
                }
                // SOTW-31: when this push also changes the client's listeners or routes, clusters it
                // removes stay until those went out, then a follow-up CDS drops them.
                let retain_from = match (ty, &self.cds_base) {
                    (ResourceType::Cluster, Some(base))
                        if [ResourceType::Listener, ResourceType::Route]
                            .iter()
                            .any(|t| self.types[t.index()].would_send(&snap)) =>
                    {
                        Some(Arc::clone(base))
                    }
                    _ => None,
                };
                let started = std::time::Instant::now();
                let Some(built) = self.types[ty.index()].build(
                    &snap,
                    self.node.view(),
                    retain_from.as_deref(),
                    &self.params.full_sets,
                ) else {
                    continue;
                };
                let nonce = self.next_nonce();
                let version = built.version.to_string();
                let names = if ty.full_state_in_sotw() {
                    Vec::new()
                } else {
                    built.names.clone()
                };
                let (framed, len) = match response::frame(
                    ty,
                    &version,
                    &nonce,
                    built.entries,
                    names,
                ) {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::error!(conn = %self.registration.id(), error = %e, "cannot send response");
                        metrics::internal_error(ty.short());
                        continue;
                    }
                };
                if self.writer.stage(framed).is_err() {
                    metrics::send_error(ty);
                    return Err(BodyGone);
                }
                let state = &mut self.types[ty.index()];
                state.sent(nonce, built.version, &built.names);
                metrics::pushed(ty, len);
                metrics::push_time(ty, started.elapsed());
                self.registration.update(ty, state.status());
                if ty == ResourceType::Cluster {
                    self.types[ResourceType::Endpoint.index()].note_warming(&built.warming);
                    self.cds_cleanup |= built.retained > 0;
                    if self.params.fixed.is_none() {
                        self.cds_base = Some(Arc::clone(&snap));
                    }
                }
                if built.change_driven {
                    self.unconverged.get_or_insert(snap.triggered_at);
                }
                let more = ResourceType::PUSH_ORDER[ty.index() + 1..]
                    .iter()
                    .any(|t| self.types[t.index()].has_work(snap.seq));
                if !more {
                    self.end_cycle();
                }
                return Ok(());
            }
            self.end_cycle();
            match self.params.store.load() {
                Some(newer) if newer.seq > snap.seq => continue,
                _ => return Ok(()),
            }
        }
    }

    fn force_all(&mut self) {
        for t in &mut self.types {
            t.force_all();
        }
    }
}

impl Stream {
    /// The push is complete: the next one starts from the newest snapshot.
    fn end_cycle(&mut self) {
        self.cycle = None;
        if let Some(t) = self.unconverged.take() {
            metrics::converged(t.elapsed());
        }
        if std::mem::take(&mut self.cds_cleanup) {
            self.types[ResourceType::Cluster.index()].owe_full_response();
        }
    }

    fn next_nonce(&mut self) -> Arc<str> {
        self.nonces += 1;
        Arc::from(format!("{}-{:x}", self.nonce_prefix, self.nonces))
    }
}
