//! A test MCP-over-xDS server: tonic + envoy-types' ADS service, serving Istio config objects
//! as `istio.mcp.v1alpha1.Resource`s on loopback, state-of-the-world and delta, so the `xds://`
//! config source can be tested against a real gRPC peer (in this crate and by the binary's
//! end-to-end tests).
//!
//! Objects are given as the YAML a user writes (`apiVersion`, `kind`, `metadata`, `spec`); the
//! spec becomes the body through `istio_api::spec_to_body`. The server records every request it
//! reads (ACKs, NACKs and their `error_detail`), can refuse delta (`UNIMPLEMENTED`, as a server
//! older than delta xDS does), and can stop and start again on the same port.
//!
//! Each stream is one task. A collection's version changes only when its contents do; a SotW
//! response carries the whole collection, a delta response what changed since the stream's last.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse, Resource,
};
use envoy_types::pb::google::protobuf::Any;
use parking_lot::Mutex;
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tonic::{Request, Response, Status, Streaming};

use crate::istio_api::proto::istio::mcp::v1alpha1 as mcp;
use crate::istio_api::{COLLECTIONS, Collection, spec_to_body};

/// Responses waiting for a slow client, per stream (the server never needs more than one per
/// collection in flight).
const RESPONSE_CAPACITY: usize = 16;

/// How long [`McpServer::stop`] waits for the server task after asking streams to end.
const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// What the server serves: per collection type URL, a version and its resources by name.
#[derive(Debug, Clone, Default, PartialEq)]
struct Served {
    collections: BTreeMap<String, Contents>,
}

#[derive(Debug, Clone, Default, PartialEq)]
struct Contents {
    version: u64,
    /// name → (resource version, the `Any` on the wire).
    resources: BTreeMap<String, (String, Any)>,
}

/// One request the server read.
#[derive(Debug, Clone, PartialEq)]
pub struct SeenRequest {
    /// Whether it came on a delta stream.
    pub delta: bool,
    /// Its type URL.
    pub type_url: String,
    /// The nonce it answers (empty for a subscription).
    pub response_nonce: String,
    /// SotW only: the version it ACKs (or the last good one, for a NACK).
    pub version_info: String,
    /// `error_detail.message` of a NACK.
    pub error: Option<String>,
    /// The node id it carried.
    pub node_id: String,
}

#[derive(Debug)]
struct Shared {
    served: watch::Sender<Served>,
    requests: Mutex<Vec<SeenRequest>>,
    delta: bool,
    nonce: Mutex<u64>,
}

/// The running server. Dropping it stops it.
#[derive(Debug)]
pub struct McpServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
    task: Option<AbortOnDropHandle<()>>,
}

/// A YAML object (`kind`, `metadata`, `spec`) as the server serves it: its collection, its
/// `namespace/name` and the wire `Any`; or why the text is not one.
pub fn resource_of(doc: &str) -> Result<(&'static Collection, String, Any), String> {
    let v: serde_json::Value = serde_yaml::from_str(doc).map_err(|e| e.to_string())?;
    let kind = v["kind"].as_str().unwrap_or_default();
    let collection = COLLECTIONS
        .iter()
        .find(|c| c.kind == kind)
        .ok_or_else(|| format!("kind {kind:?} is not an MCP collection"))?;
    let meta = &v["metadata"];
    let name = format!(
        "{}/{}",
        meta["namespace"].as_str().unwrap_or("default"),
        meta["name"].as_str().unwrap_or_default()
    );
    let strings = |field: &str| -> BTreeMap<String, String> {
        serde_json::from_value(meta[field].clone()).unwrap_or_default()
    };
    let body = spec_to_body(collection, &v["spec"]).map_err(|e| e.to_string())?;
    let resource = mcp::Resource {
        metadata: Some(mcp::Metadata {
            name: name.clone(),
            labels: strings("labels"),
            annotations: strings("annotations"),
            ..mcp::Metadata::default()
        }),
        body: Some(prost_types::Any {
            type_url: collection.body_type_url(),
            value: body,
        }),
    };
    Ok((collection, name, wire(collection, &resource)))
}

/// A resource as it goes on the wire: an `Any` whose type URL is the collection.
pub fn wire(collection: &Collection, resource: &mcp::Resource) -> Any {
    Any {
        type_url: collection.type_url.into(),
        value: resource.encode_to_vec(),
    }
}

impl McpServer {
    /// Starts on a free loopback port; `delta: false` answers delta streams `UNIMPLEMENTED`.
    pub async fn start(delta: bool) -> std::io::Result<Self> {
        Self::start_on(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            delta,
            Served::default(),
        )
        .await
    }

    /// Starts again on the same port, serving what it served when it stopped.
    pub async fn restart(&mut self) -> std::io::Result<()> {
        let served = self.shared.served.borrow().clone();
        *self = Self::start_on(self.addr, self.shared.delta, served).await?;
        Ok(())
    }

    async fn start_on(addr: SocketAddr, delta: bool, served: Served) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            served: watch::Sender::new(served),
            requests: Mutex::new(Vec::new()),
            delta,
            nonce: Mutex::new(0),
        });
        let stop = CancellationToken::new();
        let service = Service {
            shared: shared.clone(),
            stop: stop.clone(),
        };
        let server = tonic::transport::Server::builder()
            .add_service(AggregatedDiscoveryServiceServer::new(service))
            .serve_with_incoming_shutdown(
                TcpListenerStream::new(listener),
                stop.clone().cancelled_owned(),
            );
        let task = tokio::spawn(async move {
            if let Err(e) = server.await {
                tracing::warn!(error = %e, "test MCP server failed");
            }
        });
        Ok(Self {
            addr,
            shared,
            stop,
            task: Some(AbortOnDropHandle::new(task)),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves exactly these objects (YAML documents of the four kinds), replacing all.
    pub fn set_objects(&self, docs: &[&str]) -> Result<(), String> {
        let mut by_type: BTreeMap<String, BTreeMap<String, Any>> = COLLECTIONS
            .iter()
            .map(|c| (c.type_url.to_string(), BTreeMap::new()))
            .collect();
        for doc in docs {
            let (c, name, any) = resource_of(doc)?;
            by_type
                .entry(c.type_url.into())
                .or_default()
                .insert(name, any);
        }
        for (type_url, resources) in by_type {
            self.set_raw(&type_url, resources.into_iter().collect());
        }
        Ok(())
    }

    /// Serves `resources` (name, `Any`) as collection `type_url`, as they are: for responses
    /// that a client must refuse.
    pub fn set_raw(&self, type_url: &str, resources: Vec<(String, Any)>) {
        self.shared.served.send_if_modified(|served| {
            let contents = served.collections.entry(type_url.into()).or_default();
            let new: BTreeMap<String, (String, Any)> = resources
                .into_iter()
                .map(|(name, any)| {
                    let version = format!("{:016x}", fnv(&any.value));
                    (name, (version, any))
                })
                .collect();
            let changed = contents.resources != new || contents.version == 0;
            if changed {
                contents.resources = new;
                contents.version += 1;
            }
            changed
        });
    }

    /// Every request read so far.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.shared.requests.lock().clone()
    }

    /// Ends every stream with `UNAVAILABLE` and closes the port.
    pub async fn stop(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(STOP_TIMEOUT, task).await;
        }
    }
}

/// A content hash for resource versions (FNV-1a: no dependency, stable across runs).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[derive(Debug, Clone)]
struct Service {
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Shared {
    fn nonce(&self) -> String {
        let mut n = self.nonce.lock();
        *n += 1;
        n.to_string()
    }

    fn record(
        &self,
        delta: bool,
        type_url: &str,
        nonce: &str,
        version: &str,
        error: Option<String>,
        node: Option<&envoy_types::pb::envoy::config::core::v3::Node>,
    ) {
        self.requests.lock().push(SeenRequest {
            delta,
            type_url: type_url.into(),
            response_nonce: nonce.into(),
            version_info: version.into(),
            error,
            node_id: node.map(|n| n.id.clone()).unwrap_or_default(),
        });
    }
}

type Out<T> = mpsc::Sender<Result<T, Status>>;

#[tonic::async_trait]
impl AggregatedDiscoveryService for Service {
    type StreamAggregatedResourcesStream = ReceiverStream<Result<DiscoveryResponse, Status>>;
    type DeltaAggregatedResourcesStream = ReceiverStream<Result<DeltaDiscoveryResponse, Status>>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let (tx, rx) = mpsc::channel(RESPONSE_CAPACITY);
        let (shared, stop) = (self.shared.clone(), self.stop.clone());
        tokio::spawn(sotw(shared, request.into_inner(), tx, stop));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn delta_aggregated_resources(
        &self,
        request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        if !self.shared.delta {
            return Err(Status::unimplemented("this test server serves SotW only"));
        }
        let (tx, rx) = mpsc::channel(RESPONSE_CAPACITY);
        let (shared, stop) = (self.shared.clone(), self.stop.clone());
        tokio::spawn(delta(shared, request.into_inner(), tx, stop));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// Waits for a request (`Some(Some)`) or a change of what is served (`Some(None)`); `None` when
/// the stream is over (a stopping server ends it with `UNAVAILABLE`).
async fn wake<R, T>(
    stop: &CancellationToken,
    requests: &mut Streaming<R>,
    served: &mut watch::Receiver<Served>,
    out: &Out<T>,
) -> Option<Option<R>> {
    tokio::select! {
        () = stop.cancelled() => {
            let _ = out.send(Err(Status::unavailable("test MCP server stopping"))).await;
            None
        }
        r = requests.message() => r.ok().flatten().map(Some),
        changed = served.changed() => changed.ok().map(|()| None),
    }
}

/// One SotW stream: each subscribed collection is sent whole, again whenever its version moves.
async fn sotw(
    shared: Arc<Shared>,
    mut requests: Streaming<DiscoveryRequest>,
    out: Out<DiscoveryResponse>,
    stop: CancellationToken,
) {
    let mut served = shared.served.subscribe();
    // type URL → the version last sent (0: nothing yet).
    let mut sent: BTreeMap<String, u64> = BTreeMap::new();
    loop {
        let Some(request) = wake(&stop, &mut requests, &mut served, &out).await else {
            return;
        };
        if let Some(r) = request {
            let error = r.error_detail.as_ref().map(|s| s.message.clone());
            let (nonce, version) = (&r.response_nonce, &r.version_info);
            shared.record(false, &r.type_url, nonce, version, error, r.node.as_ref());
            sent.entry(r.type_url).or_insert(0);
        }
        let now = served.borrow_and_update().clone();
        for (type_url, version) in &mut sent {
            let contents = now.collections.get(type_url).cloned().unwrap_or_default();
            let current = contents.version.max(1);
            if *version == current {
                continue;
            }
            *version = current;
            let response = DiscoveryResponse {
                version_info: current.to_string(),
                resources: contents
                    .resources
                    .into_values()
                    .map(|(_, any)| any)
                    .collect(),
                type_url: type_url.clone(),
                nonce: shared.nonce(),
                ..DiscoveryResponse::default()
            };
            if out.send(Ok(response)).await.is_err() {
                return;
            }
        }
    }
}

/// One delta stream: the first response of a collection holds all of it, later ones what changed.
async fn delta(
    shared: Arc<Shared>,
    mut requests: Streaming<DeltaDiscoveryRequest>,
    out: Out<DeltaDiscoveryResponse>,
    stop: CancellationToken,
) {
    let mut served = shared.served.subscribe();
    // type URL → (name → version) as last sent; `None` until the first response.
    let mut sent: BTreeMap<String, Option<BTreeMap<String, String>>> = BTreeMap::new();
    loop {
        let Some(request) = wake(&stop, &mut requests, &mut served, &out).await else {
            return;
        };
        if let Some(r) = request {
            let error = r.error_detail.as_ref().map(|s| s.message.clone());
            shared.record(
                true,
                &r.type_url,
                &r.response_nonce,
                "",
                error,
                r.node.as_ref(),
            );
            sent.entry(r.type_url).or_insert(None);
        }
        let now = served.borrow_and_update().clone();
        for (type_url, known) in &mut sent {
            let contents = now.collections.get(type_url).cloned().unwrap_or_default();
            let first = known.is_none();
            let before = known.take().unwrap_or_default();
            let resources: Vec<Resource> = contents
                .resources
                .iter()
                .filter(|(name, (version, _))| before.get(*name) != Some(version))
                .map(|(name, (version, any))| Resource {
                    name: name.clone(),
                    version: version.clone(),
                    resource: Some(any.clone()),
                    ..Resource::default()
                })
                .collect();
            let removed: Vec<String> = before
                .keys()
                .filter(|name| !contents.resources.contains_key(*name))
                .cloned()
                .collect();
            *known = Some(
                contents
                    .resources
                    .iter()
                    .map(|(name, (version, _))| (name.clone(), version.clone()))
                    .collect(),
            );
            if !first && resources.is_empty() && removed.is_empty() {
                continue;
            }
            let response = DeltaDiscoveryResponse {
                system_version_info: contents.version.to_string(),
                resources,
                type_url: type_url.clone(),
                removed_resources: removed,
                nonce: shared.nonce(),
                ..DeltaDiscoveryResponse::default()
            };
            if out.send(Ok(response)).await.is_err() {
                return;
            }
        }
    }
}
