//! The loop every stream runs, SotW or delta: one task, the single writer (TRANS-15).
//!
//! The task selects, in priority order, over: the drain signal; incoming requests (handled at once,
//! never queued behind pushes, SOTW-36); room in the body's one-response slot when something is
//! owed; snapshot wake-ups; admin push requests. Responses are built only when the body has room,
//! from the newest snapshot (latest wins, TRANS-1). What a request means and what a push sends is
//! the protocol's business ([`Protocol`]); this module owns only the shape of the loop.

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tonic::Status;
use tonic::codec::Streaming;

use super::body::{BodyGone, SlotWriter};
use super::connections::Registration;
use super::node::NodeInfo;
use super::stream::{Params, authorize, client_fault, first_node};
use crate::snapshot::{Snapshot, SnapshotStore};

/// The snapshot the current push cycle walks: the newest one when the cycle starts, then the same
/// one until the protocol ends the cycle, so every type of one push comes from one snapshot.
pub(crate) fn pin_cycle(
    cycle: &mut Option<Arc<Snapshot>>,
    store: &SnapshotStore,
) -> Option<Arc<Snapshot>> {
    if cycle.is_none() {
        *cycle = store.load();
    }
    cycle.clone()
}

/// One protocol's stream state, driven by [`serve`].
pub(crate) trait Protocol {
    /// The request message (`DiscoveryRequest` or `DeltaDiscoveryRequest`).
    type Request;

    /// The body slot responses go to.
    fn writer(&self) -> &SlotWriter;

    /// Applies one request; an error ends the stream with that status.
    fn on_request(&mut self, req: Self::Request) -> Result<(), Status>;

    /// Whether a response may be owed, given the newest snapshot `latest_seq`.
    fn has_work(&self, latest_seq: u64) -> bool;

    /// Stages the next owed response, if any (called only when the slot has room).
    fn push_one(&mut self, latest_seq: &mut u64) -> Result<(), BodyGone>;

    /// Owes everything subscribed again (`/debug/adsz?push=true`).
    fn force_all(&mut self);
}

/// The node of a request, for the first-request check.
pub(crate) trait HasNode {
    fn node(&self) -> Option<&Node>;
}

impl HasNode for envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest {
    fn node(&self) -> Option<&Node> {
        self.node.as_ref()
    }
}

impl HasNode for envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest {
    fn node(&self) -> Option<&Node> {
        self.node.as_ref()
    }
}

/// Runs one stream to its end: waits for the first request, checks its node, registers the
/// connection, builds the protocol state with `new` and serves it. Aborted (and cleaned up by drop
/// guards) if the body goes away.
pub(crate) async fn run<P: Protocol>(
    params: Params,
    mut requests: Streaming<P::Request>,
    writer: SlotWriter,
    snapshots: watch::Receiver<u64>,
    delta: bool,
    new: impl FnOnce(Params, NodeInfo, Registration, SlotWriter) -> P,
) where
    P::Request: HasNode,
{
    let first = match first_request(&params.drain, &mut requests, &writer).await {
        None => return,
        Some(Err(status)) => return writer.finish(status),
        Some(Ok(req)) => req,
    };
    let node = match first_node(first.node(), params.peer) {
        Ok(node) => node,
        Err(status) => return writer.finish(status),
    };
    if let Err(status) = authorize(params.auth.as_ref(), first.node(), params.peer) {
        return writer.finish(status);
    }
    let registration = params.connections.register(&node, params.peer, delta);
    let conn = Arc::clone(registration.id());
    let force_push = registration.force_push();
    let drain = params.drain.clone();
    let node_id = Arc::clone(&node.id);
    let peer = peer_text(params.peer);
    tracing::info!(%conn, node = %node_id, %peer, delta, "xDS stream connected");
    let mut p = new(params, node, registration, writer);
    let status = serve(&mut p, first, requests, snapshots, drain, &force_push).await;
    match status {
        Some(status) => {
            tracing::info!(%conn, node = %node_id, %peer, code = %status.code(), "xDS stream ended");
            p.writer().finish(status);
        }
        None => tracing::info!(%conn, node = %node_id, %peer, "xDS stream closed by the client"),
    }
}

/// A peer address for log fields (`unknown` when the transport does not say).
pub(crate) fn peer_text(peer: Option<std::net::SocketAddr>) -> String {
    peer.map_or_else(|| "unknown".to_string(), |p| p.to_string())
}

/// Waits for the first request. `None`: the body went away; `Err`: end the stream with it.
async fn first_request<R>(
    drain: &CancellationToken,
    requests: &mut Streaming<R>,
    writer: &SlotWriter,
) -> Option<Result<R, Status>> {
    tokio::select! {
        biased;
        () = drain.cancelled() => Some(Err(Status::unavailable("server is shutting down"))),
        msg = requests.message() => Some(match msg {
            Ok(Some(req)) => Ok(req),
            Ok(None) => Err(Status::ok("")),
            Err(status) => Err(client_fault(status)),
        }),
        () = writer.gone() => None,
    }
}

/// Serves until the stream ends; returns the status to end it with (`None`: the body is gone).
async fn serve<P: Protocol>(
    p: &mut P,
    first: P::Request,
    mut requests: Streaming<P::Request>,
    mut snapshots: watch::Receiver<u64>,
    drain: CancellationToken,
    force_push: &Notify,
) -> Option<Status> {
    let mut latest_seq = *snapshots.borrow_and_update();
    if let Err(status) = p.on_request(first) {
        return Some(status);
    }
    loop {
        let want = p.has_work(latest_seq);
        tokio::select! {
            biased;
            () = drain.cancelled() => return Some(Status::unavailable("server is shutting down")),
            msg = requests.message() => match msg {
                Ok(Some(req)) => if let Err(status) = p.on_request(req) {
                    return Some(status);
                },
                Ok(None) => return Some(Status::ok("")),
                Err(status) => return Some(client_fault(status)),
            },
            room = p.writer().room(), if want => {
                if room.is_err() || p.push_one(&mut latest_seq).is_err() {
                    return None;
                }
            }
            changed = snapshots.changed() => match changed {
                Ok(()) => latest_seq = *snapshots.borrow_and_update(),
                Err(_) => return Some(Status::unavailable("server is shutting down")),
            },
            () = force_push.notified() => p.force_all(),
            () = p.writer().gone() => return None,
        }
    }
}
