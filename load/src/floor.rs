//! The floor: a server that does nothing but fan out prebuilt, pre-framed responses as shared
//! `Bytes` (the pre-framed `raw` shape of `docs/floor.md`), and the sink clients that read it.
//!
//! Every stream gets, when it opens, the storm replayed, and on each trigger the next change of the
//! run replayed (`replay.rs`): responses of the same types, count and sizes tributary sent each
//! client for the storm or that change. No generation, no per-stream state beyond the body: no
//! control plane can serve the same bytes faster here, so tributary's figures are reported as
//! ratios to these, measured in the same run.
//!
//! The floor is fair to the requests too (`docs/floor.md`): a sink answers each replayed response
//! with the very requests tributary's traced proxy sent after it (a SotW proxy's EDS ACKs repeat
//! every cluster name), and the server reads every request frame to its end without decoding it,
//! so what tributary spends on top of reading those bytes is what the ratio shows. It serves on the
//! transport tributary serves on: connections gather their small writes (`coalesce.rs`).

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::StreamExt;
use http::uri::PathAndQuery;
use http_body::Frame;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::{BroadcastStream, ReceiverStream};
use tonic::server::NamedService;
use tonic::transport::Channel;
use tonic::transport::server::Connected;

use crate::probe::Probe;
use crate::replay::{self, Push};
use crate::wire::{self, EDS, RawCodec};
use coalesce::Coalesced;

#[path = "../../src/runtime/coalesce.rs"]
mod coalesce;
mod measure;

pub(crate) use measure::{FloorSetup, measure};

/// Pushes a slow stream may lag behind before it misses one; the run waits for each push to reach
/// every client before the next, so one would do.
const PUSH_BACKLOG: usize = 64;
const TRIGGER_PATH: &str = "/load.Floor/Push";

/// The storm and every replayed change as the pre-framed responses each stream receives, built
/// once and shared.
fn batches(delta: bool, pushes: &[Push]) -> Vec<Arc<[Bytes]>> {
    pushes
        .iter()
        .enumerate()
        .map(|(k, p)| {
            p.responses
                .iter()
                .enumerate()
                .map(|(j, s)| replay::response(delta, *s, &Push::nonce(k, j)))
                .collect()
        })
        .collect()
}

struct Shared {
    /// `batches[0]`: the storm, sent when a stream opens; then the changes, one per trigger.
    batches: Vec<Arc<[Bytes]>>,
    pushes: broadcast::Sender<Arc<[Bytes]>>,
    /// The next change to send.
    next: AtomicUsize,
}

#[derive(Clone)]
struct FloorService(Arc<Shared>);

impl NamedService for FloorService {
    const NAME: &'static str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
}

#[derive(Clone)]
struct TriggerService(Arc<Shared>);

impl NamedService for TriggerService {
    const NAME: &'static str = "load.Floor";
}

impl Connected for Coalesced<tokio::net::TcpStream> {
    type ConnectInfo = ();

    fn connect_info(&self) {}
}

type Req = http::Request<tonic::body::Body>;
type Resp = http::Response<tonic::body::Body>;

fn grpc_response(body: tonic::body::Body) -> Resp {
    let mut resp = http::Response::new(body);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    resp
}

impl tower::Service<Req> for FloorService {
    type Response = Resp;
    type Error = Infallible;
    type Future = Ready<Result<Resp, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        // Read every request frame to its end and drop it undecoded: the floor pays for receiving
        // the ACKs (as large as tributary's) but not for parsing them.
        let mut body = req.into_body();
        tokio::spawn(async move {
            use http_body_util::BodyExt;
            while let Some(Ok(_)) = body.frame().await {}
        });
        let storm = self
            .0
            .batches
            .first()
            .map(|b| b.to_vec())
            .unwrap_or_default();
        let first = futures::stream::iter(storm);
        let pushes = BroadcastStream::new(self.0.pushes.subscribe())
            .filter_map(|r| async move { r.ok() })
            .flat_map(|batch| futures::stream::iter(batch.to_vec()));
        let frames = first
            .chain(pushes)
            .map(|b| Ok::<_, tonic::Status>(Frame::data(b)));
        let body = tonic::body::Body::new(http_body_util::StreamBody::new(frames));
        ready(Ok(grpc_response(body)))
    }
}

impl tower::Service<Req> for TriggerService {
    type Response = Resp;
    type Error = Infallible;
    type Future = Ready<Result<Resp, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Req) -> Self::Future {
        let k = self.0.next.fetch_add(1, Ordering::SeqCst);
        if let Some(batch) = self.0.batches.get(k) {
            let _ = self.0.pushes.send(Arc::clone(batch));
        }
        let mut ok = http::HeaderMap::new();
        ok.insert("grpc-status", http::HeaderValue::from_static("0"));
        let frames = futures::stream::iter([
            Ok::<_, tonic::Status>(Frame::data(replay::framed(&[]))),
            Ok(Frame::trailers(ok)),
        ]);
        let body = tonic::body::Body::new(http_body_util::StreamBody::new(frames));
        ready(Ok(grpc_response(body)))
    }
}

/// Serves the floor on `addr` until the process is killed; prints the bound address first. A
/// stream gets `pushes[0]` (the storm) when it opens; each trigger sends the next of `pushes` (the
/// changes of the run, in order) to every stream.
pub(crate) async fn serve(addr: SocketAddr, delta: bool, pushes: &[Push]) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening {}", listener.local_addr()?);
    serve_on(listener, delta, pushes).await
}

/// [`serve`] on a bound listener, printing nothing.
pub(crate) async fn serve_on(
    listener: tokio::net::TcpListener,
    delta: bool,
    pushes: &[Push],
) -> anyhow::Result<()> {
    let (tx, _) = broadcast::channel(PUSH_BACKLOG);
    let shared = Arc::new(Shared {
        batches: batches(delta, pushes),
        pushes: tx,
        next: AtomicUsize::new(1),
    });
    // The transport tributary serves on (`src/runtime/coalesce.rs`): a floor that wrote every
    // response in a system call of its own would not be the floor.
    let incoming = tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .map(|conn| conn.map(Coalesced::new));
    tonic::transport::Server::builder()
        .add_service(FloorService(Arc::clone(&shared)))
        .add_service(TriggerService(shared))
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}

/// Asks the floor server at `channel` to send the next change.
pub(crate) async fn trigger(channel: Channel) -> anyhow::Result<()> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await?;
    grpc.unary(
        tonic::Request::new(Bytes::new()),
        PathAndQuery::from_static(TRIGGER_PATH),
        RawCodec { delta: false },
    )
    .await?;
    Ok(())
}

/// A client of the floor: answers every replayed response with the requests tributary's traced
/// proxy sent after it (`pushes[k].replies[j]`); reports the storm (`pushes[0]`) as "synced" once
/// its last response arrived, and the response carrying each change as seen.
pub(crate) async fn sink(
    channel: Channel,
    id: usize,
    delta: bool,
    pushes: Arc<[Push]>,
    probe: Arc<Probe>,
) {
    if let Err(e) = sink_inner(channel, id, delta, &pushes, &probe).await {
        probe.fail(format!("floor client {id}: {e}"));
    }
}

async fn sink_inner(
    channel: Channel,
    id: usize,
    delta: bool,
    pushes: &[Push],
    probe: &Probe,
) -> anyhow::Result<()> {
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(usize::MAX);
    grpc.ready().await?;
    let (tx, rx) = mpsc::channel(8);
    let node = wire::node(&format!("floor-{id}"));
    let empty = Bytes::new();
    let first = if delta {
        wire::delta_request(EDS, "", &empty, &empty, Some(&node))
    } else {
        wire::sotw_request(EDS, "", "", &empty, Some(&node))
    };
    tx.send(first).await?;
    let path = PathAndQuery::from_static(if delta {
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
    } else {
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
    });
    let mut stream = grpc
        .streaming(
            tonic::Request::new(ReceiverStream::new(rx)),
            path,
            RawCodec { delta },
        )
        .await?
        .into_inner();
    let mut epoch_seen = 0;
    while let Some(r) = stream.message().await? {
        let (k, j) = Push::parse_nonce(&r.nonce)
            .ok_or_else(|| anyhow::anyhow!("unexpected nonce {:?}", r.nonce))?;
        let push = pushes
            .get(k)
            .ok_or_else(|| anyhow::anyhow!("no change {k} in the replay"))?;
        for req in push.replies.get(j).into_iter().flatten() {
            tx.send(req.clone()).await?;
        }
        if k == 0 {
            if j == push.marker {
                probe.synced(push.response_bytes());
            }
            continue;
        }
        if let Some(s) = push.responses.get(j) {
            probe.response(s.type_index);
        }
        // epoch k is change k (`pushes[0]` is the storm; see `measure`)
        if j == push.marker
            && let Some((epoch, _)) = probe.marker()
            && epoch == k as u64
            && epoch > epoch_seen
        {
            epoch_seen = epoch;
            probe.saw(r.len);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
