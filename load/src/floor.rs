//! The floor: a server that does nothing but fan out prebuilt, pre-framed responses as shared
//! `Bytes` (the pre-framed `raw` shape of `docs/floor.md`), and the sink clients that read it.
//!
//! Every stream gets one "storm" response of the size of a proxy's full config when it opens, and
//! one "push" response of the size of the measured change on each trigger. No generation, no
//! per-stream state beyond the body: no control plane can serve the same bytes faster here, so
//! tributary's figures are reported as ratios to these, measured in the same run.
//!
//! The floor is fair to the requests too (`docs/floor.md`): a SotW sink acknowledges each response
//! with the same `resource_names` list tributary's SotW proxies repeat in every EDS ACK, and the
//! server reads every request frame to its end without decoding it, so what tributary spends on
//! top of reading those bytes is what the ratio shows.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryResponse, DiscoveryResponse, Resource,
};
use envoy_types::pb::google::protobuf::Any;
use futures::StreamExt;
use http::uri::PathAndQuery;
use http_body::Frame;
use prost::Message;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::{BroadcastStream, ReceiverStream};
use tonic::server::NamedService;
use tonic::transport::Channel;

use crate::probe::Probe;
use crate::wire::{self, EDS, RawCodec};

/// Pushes a slow stream may lag behind before it misses one; the floor run sends a handful.
const PUSH_BACKLOG: usize = 64;
const TRIGGER_PATH: &str = "/load.Floor/Push";

/// A gRPC-framed message: 5-byte prefix then the message.
fn framed(msg: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(msg.len() + 5);
    buf.put_u8(0);
    buf.put_u32(msg.len() as u32);
    buf.put_slice(msg);
    buf.freeze()
}

/// A response of about `size` bytes with nonce `nonce`.
fn response(delta: bool, size: usize, nonce: &str) -> Bytes {
    let any = Any {
        type_url: EDS.into(),
        value: vec![0; size.saturating_sub(200)],
    };
    let msg = if delta {
        DeltaDiscoveryResponse {
            resources: vec![Resource {
                name: "floor".into(),
                version: "1".into(),
                resource: Some(any),
                ..Default::default()
            }],
            type_url: EDS.into(),
            nonce: nonce.into(),
            ..Default::default()
        }
        .encode_to_vec()
    } else {
        DiscoveryResponse {
            version_info: "1".into(),
            resources: vec![any],
            type_url: EDS.into(),
            nonce: nonce.into(),
            ..Default::default()
        }
        .encode_to_vec()
    };
    framed(&msg)
}

struct Shared {
    delta: bool,
    storm: Bytes,
    push_bytes: usize,
    pushes: broadcast::Sender<Bytes>,
    epoch: AtomicU64,
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
        let first = futures::stream::once(futures::future::ready(self.0.storm.clone()));
        let pushes =
            BroadcastStream::new(self.0.pushes.subscribe()).filter_map(|r| async move { r.ok() });
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
        let epoch = self.0.epoch.fetch_add(1, Ordering::SeqCst) + 1;
        let push = response(self.0.delta, self.0.push_bytes, &format!("push-{epoch}"));
        let _ = self.0.pushes.send(push);
        let mut ok = http::HeaderMap::new();
        ok.insert("grpc-status", http::HeaderValue::from_static("0"));
        let frames = futures::stream::iter([
            Ok::<_, tonic::Status>(Frame::data(framed(&[]))),
            Ok(Frame::trailers(ok)),
        ]);
        let body = tonic::body::Body::new(http_body_util::StreamBody::new(frames));
        ready(Ok(grpc_response(body)))
    }
}

/// Serves the floor on `addr` until the process is killed; prints the bound address first.
pub(crate) async fn serve(
    addr: SocketAddr,
    delta: bool,
    storm_bytes: usize,
    push_bytes: usize,
) -> anyhow::Result<()> {
    let (pushes, _) = broadcast::channel(PUSH_BACKLOG);
    let shared = Arc::new(Shared {
        delta,
        storm: response(delta, storm_bytes, "storm"),
        push_bytes,
        pushes,
        epoch: AtomicU64::new(0),
    });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("listening {}", listener.local_addr()?);
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(FloorService(Arc::clone(&shared)))
        .add_service(TriggerService(shared))
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}

/// Asks the floor server at `channel` to push once.
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

/// A client of the floor: reads every response and acknowledges it like a proxy would; reports the
/// storm response as "synced" and each push as seen. A SotW sink's ACKs carry `ack_names` (the
/// encoded `resource_names` a SotW proxy repeats in its EDS ACKs); delta ACKs name nothing, as a
/// delta proxy's do.
pub(crate) async fn sink(
    channel: Channel,
    id: usize,
    delta: bool,
    ack_names: Bytes,
    probe: Arc<Probe>,
) {
    if let Err(e) = sink_inner(channel, id, delta, &ack_names, &probe).await {
        probe.fail(format!("floor client {id}: {e}"));
    }
}

async fn sink_inner(
    channel: Channel,
    id: usize,
    delta: bool,
    ack_names: &Bytes,
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
        let ack = if delta {
            wire::delta_request(EDS, &r.nonce, &empty, &empty, None)
        } else {
            wire::sotw_request(EDS, &r.version, &r.nonce, ack_names, None)
        };
        tx.send(ack).await?;
        if r.nonce == "storm" {
            probe.synced(r.len);
        } else if let Some((epoch, _)) = probe.marker()
            && epoch > epoch_seen
            && r.nonce.starts_with("push-")
        {
            epoch_seen = epoch;
            probe.saw(r.len);
        }
    }
    Ok(())
}
