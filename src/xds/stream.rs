//! One xDS stream, SotW or delta, generic over the protocol's hooks ([`Protocol`]): a task that
//! applies the client's requests, and the response body, which pulls each response when h2 can
//! take it (`body.rs`) and so is the single writer (TRANS-15).
//!
//! [`Stream`] owns what both protocols share: the server's params, the node, the registration,
//! nonces, the push cycle, convergence accounting and unknown types; the task and the body share
//! it behind one lock, taken for one request or one response, never across an await. It runs the
//! request skeleton (node, type and name checks from `request.rs`, then the protocol's `apply`, then
//! NACK/stale accounting) and the push cycle: one push walks CDS → EDS → LDS → RDS from a single
//! pinned snapshot (SOTW-30), one response each time the body asks. Make-before-break lives here,
//! once (SOTW-31): over ADS, when the same push also changes the client's listeners or routes, the
//! CDS response holds back its cluster removals and the protocol releases them when the push
//! completes; and after a CDS response that added EDS clusters, listeners and routes wait (the push
//! stays on its snapshot) until an EDS response carried those clusters or the bounded wait ran out
//! (`warming.rs`).
//!
//! The task selects, in priority order, over: the drain signal; incoming requests (handled at once,
//! never queued behind pushes, SOTW-36); admin push requests. After each it wakes the body if a
//! response is owed. The body is woken by the snapshot store on every publish (one registration
//! per stream) and by the warming gate's timer. The drain signal and admin push requests are
//! polled only after they woke their task (`own_waker.rs`). Responses are built only when h2 asks
//! for one, from the newest snapshot (latest wins, TRANS-1), after every request applied before it
//! (INV-5, SOTW-35).

use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::body::{BodyWriter, Framed, SharedSource, Source};
use super::cache::FullSetCache;
use super::connections::{Connections, Registration, StatusSource, TypeStatus};
use super::diffs::DiffCache;
use super::empty_answers::{EMPTY_VERSION, EmptyAnswers};
use super::metrics;
use super::names::SharedNames;
use super::node::NodeInfo;
use super::own_waker::OwnWakers;
use super::record;
use super::request::{
    Auth, FromFrame, Kind, Requests, UnknownTypes, authorize, check_same_node, client_fault,
    first_node, peer_text, request_type,
};
use super::response::{TooLarge, frame_empty};
use super::warming::WarmGate;
use crate::envoy::ResourceType;
use crate::snapshot::{Listener, Snapshot, SnapshotStore, TypeResources, TypeVersion, View};

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
    /// Whether the MCP collections are served; when not, they are unknown types.
    pub serve_mcp: bool,
    /// Whole-type bytes shared by wildcard streams.
    pub full_sets: Arc<FullSetCache>,
    /// What changed between two maps, shared by the delta streams that go the same way.
    pub diffs: Arc<DiffCache>,
    /// Subscribed name sets shared between streams.
    pub names: Arc<SharedNames>,
    /// How long listeners and routes wait for the EDS of clusters a push added (`warming.rs`).
    pub eds_warm_wait: Duration,
}

/// One protocol's hooks: its per-type state and what its requests and responses look like.
pub(crate) trait Protocol: Default + Send + 'static {
    /// The request message (`DiscoveryRequest` or `DeltaDiscoveryRequest`).
    type Request: FromFrame;
    /// A response's content, built from a snapshot, before framing.
    type Built;
    /// Whether this is the incremental protocol (registry and logs).
    const DELTA: bool;
    /// Marks this protocol's nonces after the stream's serial (debug readability).
    const NONCE_MARK: &'static str;

    /// The request's node, if it carries one.
    fn node(req: &Self::Request) -> Option<&Node>;
    /// The request's `type_url`.
    fn type_url(req: &Self::Request) -> &str;
    /// The request's `response_nonce` (empty on a new subscription).
    fn response_nonce(req: &Self::Request) -> &str;
    /// The request's `error_detail.message`, if it is a NACK.
    fn error(req: &Self::Request) -> Option<&str>;
    /// The protocol's own checks of a request before it is applied (names, SEC-12).
    fn check(req: &Self::Request) -> Result<(), Status>;

    /// Applies a request about `ty`; `known` is the newest snapshot's resources of the type (new
    /// subscriptions share their name `Arc`s), `shared` the server's shared name sets (a changed
    /// subscription shares an equal set's nodes). An error ends the stream.
    fn apply(
        &mut self,
        ty: ResourceType,
        req: &Self::Request,
        known: Option<&TypeResources>,
        shared: &SharedNames,
        conn: &str,
    ) -> Result<Kind, Status>;
    /// The debug view of `ty`.
    fn status(&self, ty: ResourceType) -> TypeStatus;

    /// Whether a response of `ty` may be owed, given the newest snapshot `latest_seq`.
    fn has_work(&self, ty: ResourceType, latest_seq: u64) -> bool;
    /// Whether a response of `ty` built from `snap` would carry something (costs the change).
    fn would_send(&self, ty: ResourceType, snap: &Snapshot, view: View, diffs: &DiffCache) -> bool;
    /// Builds the next response of `ty` from `snap`, consuming what was owed; `None` when there is
    /// nothing to send. `hold_removals` (CDS over ADS only): removed clusters must not go away in
    /// this response (make-before-break, SOTW-31); the protocol releases them in
    /// [`Self::end_cycle`].
    #[allow(clippy::too_many_arguments)]
    fn build(
        &mut self,
        ty: ResourceType,
        snap: &Snapshot,
        view: View,
        hold_removals: bool,
        full_sets: &FullSetCache,
        diffs: &DiffCache,
    ) -> Option<Self::Built>;
    /// The nonce `built` comes with when other streams send the same response (`diffs.rs`);
    /// `None`: the stream gives it one of its own.
    fn shared_nonce(built: &Self::Built) -> Option<Arc<str>>;
    /// The type version `built` answers with (`version_info` / `system_version_info`).
    fn version(built: &Self::Built) -> TypeVersion;
    /// Frames `built` with `nonce` and `version` (its [`Self::version`], spelled out), as
    /// `type_url` (the URL the client asked `ty` with); returns the framed response and its
    /// message size.
    #[allow(clippy::too_many_arguments)]
    fn frame(
        ty: ResourceType,
        type_url: &str,
        built: &mut Self::Built,
        nonce: &str,
        version: &str,
        view: View,
        full_sets: &FullSetCache,
    ) -> Result<(Framed, usize), TooLarge>;
    /// Whether snapshot changes (not only the client's requests) caused `built`.
    fn change_driven(built: &Self::Built) -> bool;
    /// What follows a CDS response `built` from `snap` went out: the EDS it re-warms (SOTW-32).
    /// Returns the clusters it added for a client that fetches endpoints over EDS (each has a load
    /// assignment in `snap`), for the warming gate (`warming.rs`); empty for the first CDS response
    /// of the stream, when not over ADS, or when the client never asked for EDS.
    fn after_cds(
        &mut self,
        built: &Self::Built,
        snap: &Arc<Snapshot>,
        view: View,
        ads: bool,
    ) -> Vec<Arc<str>>;
    /// EDS only: the names `built` answers (resources and removals).
    fn carried(built: &Self::Built) -> impl Iterator<Item = &Arc<str>>;
    /// Records that `built` of `ty` was handed to the body with `nonce` and `version`.
    fn sent(&mut self, ty: ResourceType, nonce: Arc<str>, version: Arc<str>, built: Self::Built);
    /// The push is complete: what [`Self::build`] held back is owed now (SOTW-31).
    fn end_cycle(&mut self);
    /// Owes everything subscribed again (`/debug/adsz?push=true`).
    fn force_all(&mut self);
}

/// One stream of protocol `P`: what its task (requests) and its body (responses) share.
pub(crate) struct Stream<P: Protocol> {
    params: Params,
    node: NodeInfo,
    registration: Registration,
    nonce_prefix: String,
    proto: P,
    /// The newest snapshot's sequence number this stream has seen.
    latest_seq: u64,
    /// Wakes the body's [`CHANGED`] branch on every publish (registered once, `snapshot/store.rs`).
    _listener: Listener,
    /// The body's waker, for new snapshots and for requests that make a response owed.
    body: OwnWakers<1>,
    /// The snapshot the current push walks through (SOTW-31); `None` between pushes.
    cycle: Option<Arc<Snapshot>>,
    /// Trigger time of a snapshot whose push started but whose convergence is not recorded yet.
    unconverged: Option<Instant>,
    nonces: u64,
    unknown: UnknownTypes,
    /// Listeners and routes wait for the EDS of clusters CDS added (ADS only, `warming.rs`).
    gate: WarmGate,
    /// Wakes the body when the gate's wait runs out; set only while the gate holds.
    gate_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The `type_url` each type is answered with: the one the client last asked it with (an MCP
    /// collection has one per API version, `crate::mcp::type_urls`).
    urls: [&'static str; ResourceType::COUNT],
    /// Collections the client asked for that tributary does not serve, owed an empty answer.
    empty: EmptyAnswers,
}

/// The body's one branch: a snapshot was published.
const CHANGED: usize = 0;

/// Runs one stream to its end: waits for the first request, checks its node, registers the
/// connection and serves it. Aborted (and cleaned up by drop guards) if the body goes away.
pub(crate) async fn run<P: Protocol>(
    params: Params,
    mut requests: Requests<P::Request>,
    writer: BodyWriter,
) {
    let first = match first_request(&params.drain, &mut requests, &writer).await {
        None => return,
        Some(Err(status)) => return writer.finish(status),
        Some(Ok(req)) => req,
    };
    let node = match first_node(P::node(&first), params.peer) {
        Ok(node) => node,
        Err(status) => return writer.finish(status),
    };
    if let Err(status) = authorize(params.auth.as_ref(), P::node(&first), params.peer) {
        return writer.finish(status);
    }
    let delta = P::DELTA;
    let registration = params.connections.register(&node, params.peer, delta);
    let conn = Arc::clone(registration.id());
    let force_push = registration.force_push();
    let drain = params.drain.clone();
    let node_id = Arc::clone(&node.id);
    let peer = peer_text(params.peer);
    // No span around the task: entering one on every poll cost ~2 % of the server's CPU in an
    // endpoint change; each line names the connection instead.
    let api = params.fixed.map_or("ads", ResourceType::short);
    tracing::info!(%conn, node = %node_id, %peer, delta, api, "xDS stream connected");
    // TRANS-14: listen before reading the newest `seq`, so no publish falls between the two.
    let body = OwnWakers::new();
    let listener = params.store.listen(body.waker(CHANGED));
    let latest_seq = params.store.seq();
    // Made in place and held only behind the `Arc`: a `Stream` held by value in this future (or
    // passed by value to `serve`) would be laid out in the task again (~2.5 KB each, MEM-3).
    let stream = Arc::new(parking_lot::Mutex::new(Stream {
        params,
        node,
        nonce_prefix: format!("{:x}{}", registration.serial(), P::NONCE_MARK),
        registration,
        proto: P::default(),
        latest_seq,
        _listener: listener,
        body,
        cycle: None,
        unconverged: None,
        nonces: 0,
        unknown: UnknownTypes::default(),
        gate: WarmGate::default(),
        gate_timer: None,
        urls: ResourceType::ALL.map(ResourceType::type_url),
        empty: EmptyAnswers::default(),
    }));
    let applied = stream.lock().on_request(first);
    let status = match applied {
        Err(status) => Some(status),
        Ok(()) => {
            stream
                .lock()
                .registration
                .attach(Arc::downgrade(&stream) as _);
            writer.attach(Arc::clone(&stream) as SharedSource);
            serve(&stream, requests, drain, &force_push).await
        }
    };
    match status {
        Some(status) => {
            tracing::info!(%conn, node = %node_id, %peer, code = %status.code(), "xDS stream ended");
            writer.finish(status);
        }
        None => tracing::info!(%conn, node = %node_id, %peer, "xDS stream closed by the client"),
    }
}

/// Waits for the first request. `None`: the body went away; `Err`: end the stream with it.
async fn first_request<R: FromFrame>(
    drain: &CancellationToken,
    requests: &mut Requests<R>,
    writer: &BodyWriter,
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

/// The stream task: applies requests until the stream ends; returns the status to end it with
/// (`None`: the client closed it). The body pulls the responses (`body.rs`); this task wakes it
/// when a request or an admin push makes one owed.
async fn serve<P: Protocol>(
    stream: &parking_lot::Mutex<Stream<P>>,
    mut requests: Requests<P::Request>,
    drain: CancellationToken,
    force_push: &Notify,
) -> Option<Status> {
    // Made once and kept across wake-ups: each one registered anew per loop turn cost every
    // stream two waiter-list updates (one on the server-wide drain token) per request.
    // The body going away needs no arm: dropping the body aborts this task (`body.rs`).
    let drained = drain.cancelled();
    tokio::pin!(drained);
    let forced = force_push.notified();
    tokio::pin!(forced);
    // And these two are polled only when they woke the task (`own_waker.rs`): polling each on
    // every turn took their locks on every request.
    const DRAINED: usize = 0;
    const FORCED: usize = 1;
    let branches = OwnWakers::<2>::new();
    loop {
        tokio::select! {
            biased;
            () = poll_fn(|cx| {
                branches.register(cx);
                Poll::Pending
            }) => {}
            () = poll_fn(|_| branches.poll(DRAINED, drained.as_mut())) => {
                return Some(Status::unavailable("server is shutting down"));
            }
            msg = requests.message() => match msg {
                Ok(Some(req)) => {
                    let mut stream = stream.lock();
                    if let Err(status) = stream.on_request(req) {
                        return Some(status);
                    }
                    stream.wake_body_if_owed();
                }
                Ok(None) => return Some(Status::ok("")),
                Err(status) => return Some(client_fault(status)),
            },
            () = poll_fn(|_| branches.poll(FORCED, forced.as_mut())) => {
                forced.set(force_push.notified());
                branches.arm(FORCED);
                let mut stream = stream.lock();
                stream.proto.force_all();
                stream.wake_body_if_owed();
            }
        }
    }
}

impl<P: Protocol> StatusSource for Stream<P> {
    fn status(&self, ty: ResourceType) -> TypeStatus {
        self.proto.status(ty)
    }
}

impl<P: Protocol> Source for Stream<P> {
    fn poll_response(&mut self, cx: &mut Context<'_>) -> Poll<Result<Framed, Status>> {
        loop {
            if self.body.take(CHANGED) {
                self.latest_seq = self.latest_seq.max(self.params.store.seq());
            }
            if self.has_work(self.latest_seq)
                && let Some(framed) = self.push_one()
            {
                return Poll::Ready(Ok(framed));
            }
            if self.gate_ran_out(cx) {
                continue;
            }
            // The body registers only to wait (a body about to be polled again needs no wake-up).
            // The task wakes it only under this lock, so nothing it owes is missed; a snapshot
            // published since the look above is seen by looking again.
            self.body.register(cx);
            if !self.body.woken(CHANGED) {
                return Poll::Pending;
            }
        }
    }
}

impl<P: Protocol> Stream<P> {
    /// Checks and applies one request; an error ends the stream with that status.
    fn on_request(&mut self, req: P::Request) -> Result<(), Status> {
        check_same_node(&self.node, P::node(&req))?;
        let ty = request_type(self.params.fixed, P::type_url(&req))?;
        let url = P::type_url(&req);
        let Some(ty) = ty.filter(|t| self.params.serve_mcp || !t.is_mcp()) else {
            if self.params.serve_mcp && crate::mcp::type_urls::is_collection(url) {
                self.empty.on_request(url, P::response_nonce(&req));
            } else {
                self.unknown.log(self.registration.id(), url);
            }
            return Ok(());
        };
        if let Some((_, served)) = crate::mcp::type_urls::served(url) {
            self.urls[ty.index()] = served;
        }
        P::check(&req)?;
        let known = self.params.store.load();
        let kind = self.proto.apply(
            ty,
            &req,
            known.as_deref().map(|s| s.resources(ty)),
            &self.params.names,
            self.registration.id(),
        )?;
        match kind {
            Kind::Stale => metrics::expired_nonce(ty),
            Kind::Nack => {
                metrics::rejected(ty);
                let error = P::error(&req).unwrap_or_default();
                tracing::info!(conn = %self.registration.id(), r#type = %ty, error, "NACK");
            }
            Kind::Initial | Kind::Ack | Kind::Update => {}
        }
        Ok(())
    }

    fn has_work(&self, latest_seq: u64) -> bool {
        // A push under way finishes on its own snapshot first (`push_one` walks only that one):
        // counting work from a newer snapshot while the gate holds the rest of the push would wake
        // the stream for a push that stages nothing, again and again until the gate opens.
        let seq = self.cycle.as_ref().map_or(latest_seq, |s| s.seq);
        self.empty.owed()
            || ResourceType::ALL
                .iter()
                .any(|t| self.proto.has_work(*t, seq) && !self.held(*t))
    }

    /// Whether responses of `ty` wait for the EDS of added clusters (reads the clock only while
    /// the gate is on).
    fn held(&self, ty: ResourceType) -> bool {
        self.gate.deadline().is_some() && self.gate.holds(ty, Instant::now())
    }

    /// Whether the warming gate's wait ran out (it is then ended); otherwise the body is woken
    /// when it does. The body keeps the timer: it is the one that sends what the gate held.
    fn gate_ran_out(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = self.gate.deadline() else {
            self.gate_timer = None;
            return false;
        };
        let deadline = tokio::time::Instant::from_std(deadline);
        let timer = self
            .gate_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.deadline() != deadline {
            timer.as_mut().reset(deadline);
        }
        if timer.as_mut().poll(cx).is_pending() {
            return false;
        }
        self.gate_timer = None;
        self.expire_gate();
        true
    }

    /// The warming gate ran out: listeners and routes go without the EDS they waited for.
    fn expire_gate(&mut self) {
        if let Some(clusters) = self.gate.expire(Instant::now()) {
            tracing::info!(
                conn = %self.registration.id(),
                count = clusters.len(),
                first = clusters.first().map(|c| &**c).unwrap_or_default(),
                wait = ?self.params.eds_warm_wait,
                "the client did not ask for the EDS of added clusters in time; sending routes anyway"
            );
        }
    }

    /// Wakes the body when a response is owed.
    fn wake_body_if_owed(&self) {
        if self.has_work(self.latest_seq) {
            self.body.wake();
        }
    }

    /// The next owed response, walking the pinned snapshot in push order.
    fn push_one(&mut self) -> Option<Framed> {
        let ads = self.params.fixed.is_none();
        if let Some(url) = self.empty.take() {
            let nonce = self.next_nonce();
            return Some(frame_empty(&url, EMPTY_VERSION, &nonce));
        }
        loop {
            if self.cycle.is_none() {
                self.cycle = self.params.store.load();
            }
            let snap = self.cycle.clone()?;
            self.latest_seq = self.latest_seq.max(snap.seq);
            let view = self.node.view_for(P::DELTA);
            for ty in ResourceType::ALL {
                if !self.proto.has_work(ty, snap.seq) {
                    continue;
                }
                if self.held(ty) {
                    // SOTW-31: listeners and routes wait for the EDS of clusters CDS just added;
                    // the cycle stays on this snapshot until it went out or the wait ran out.
                    return None;
                }
                // SOTW-31: when this push also changes the client's listeners or routes, clusters
                // it removes stay until those went out; `end_cycle` then removes them.
                let hold_removals = ty == ResourceType::Cluster
                    && ads
                    && self.proto.would_send(ty, &snap, view, &self.params.diffs)
                    && [
                        ResourceType::Listener,
                        ResourceType::Route,
                        ResourceType::VirtualHost,
                    ]
                    .iter()
                    .any(|t| self.proto.would_send(*t, &snap, view, &self.params.diffs));
                let started = Instant::now();
                let (full_sets, diffs) = (&self.params.full_sets, &self.params.diffs);
                let Some(mut built) =
                    self.proto
                        .build(ty, &snap, view, hold_removals, full_sets, diffs)
                else {
                    continue;
                };
                let nonce = P::shared_nonce(&built).unwrap_or_else(|| self.next_nonce());
                // Spelled out once, for the response and for client status.
                let version = record::version_text(ty, P::version(&built));
                let full_sets = &self.params.full_sets;
                let (framed, len) = match P::frame(
                    ty,
                    self.urls[ty.index()],
                    &mut built,
                    &nonce,
                    &version,
                    view,
                    full_sets,
                ) {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::error!(conn = %self.registration.id(), error = %e, "cannot send response");
                        metrics::internal_error(ty.short());
                        continue;
                    }
                };
                let change_driven = P::change_driven(&built);
                if ty == ResourceType::Cluster {
                    let added = self.proto.after_cds(&built, &snap, view, ads);
                    let now = Instant::now();
                    let clusters = snap.resources_for(ResourceType::Cluster, view);
                    let present = |c: &str| clusters.get(c).is_some();
                    self.gate
                        .added(added, present, now, self.params.eds_warm_wait);
                } else if ty == ResourceType::Endpoint {
                    self.gate.answered(P::carried(&built));
                }
                self.proto.sent(ty, nonce, version, built);
                metrics::pushed(ty, len, started.elapsed());
                if change_driven {
                    self.unconverged.get_or_insert(snap.triggered_at);
                }
                let more = ResourceType::ALL[ty.index() + 1..]
                    .iter()
                    .any(|t| self.proto.has_work(*t, snap.seq));
                if !more {
                    self.end_cycle();
                }
                return Some(framed);
            }
            self.end_cycle();
            match self.params.store.load() {
                Some(newer) if newer.seq > snap.seq => continue,
                // What the cycle held back is owed now, from the same snapshot.
                _ if self.has_work(snap.seq) => continue,
                _ => return None,
            }
        }
    }

    /// The push is complete: held-back removals are owed, and the next push starts from the newest
    /// snapshot.
    fn end_cycle(&mut self) {
        self.cycle = None;
        if let Some(t) = self.unconverged.take() {
            metrics::converged(t.elapsed());
        }
        self.proto.end_cycle();
    }

    fn next_nonce(&mut self) -> Arc<str> {
        self.nonces += 1;
        nonce(&self.nonce_prefix, self.nonces)
    }
}

/// `prefix` (the stream's serial and its protocol's mark), then `n` in hex; written by hand:
/// `format!` was ~2 % of the server's CPU in an endpoint change.
fn nonce(prefix: &str, n: u64) -> Arc<str> {
    let digits = (u64::BITS - n.leading_zeros()).div_ceil(4).max(1);
    let mut nonce = String::with_capacity(prefix.len() + digits as usize);
    nonce.push_str(prefix);
    for i in (0..digits).rev() {
        let digit = (n >> (4 * i)) & 0xf;
        nonce.extend(char::from_digit(digit as u32, 16));
    }
    Arc::from(nonce)
}

#[cfg(test)]
mod tests {
    #[test]
    fn nonces_are_the_prefix_then_the_counter_in_hex() {
        for n in [0, 1, 15, 16, 255, 0xdead_beef, u64::MAX] {
            assert_eq!(*super::nonce("3f-d", n), format!("3f-d{n:x}"));
        }
    }
}
