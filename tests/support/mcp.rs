//! A test MCP client: istiod's side of MCP over xDS, built from Istio's generated types
//! (`tributary_registries::istio_api::proto`), over ADS in SotW or delta. It subscribes to every
//! collection with no names (wildcard, as istiod does), ACKs every response and keeps what it
//! holds per collection, so tests compare holdings against the registries' services.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tributary_registries::istio_api::COLLECTIONS;
use tributary_registries::istio_api::proto::istio::mcp::v1alpha1 as mcp;
use tributary_registries::istio_api::proto::istio::networking::v1alpha3 as net;

use super::raw_ads::{connect, node};

/// The `Any` type of every MCP resource, spelled out (istiod's `mcp.Resource`).
pub const RESOURCE_TYPE_URL: &str = "type.googleapis.com/istio.mcp.v1alpha1.Resource";
/// The ServiceEntry collection.
pub const SE: &str = "networking.istio.io/v1alpha3/ServiceEntry";
/// The WorkloadEntry collection.
pub const WE: &str = "networking.istio.io/v1alpha3/WorkloadEntry";

/// Requests buffered before `send` waits.
const REQUEST_BUFFER: usize = 16;

/// One held resource: its version and the decoded wrapper.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    /// The wrapper's `metadata.version` (SotW carries no per-resource xDS version).
    pub version: String,
    /// The MCP wrapper.
    pub resource: mcp::Resource,
}

impl Held {
    /// The body as a ServiceEntry (panics on any other body: the test is wrong then).
    pub fn service_entry(&self) -> net::ServiceEntry {
        net::ServiceEntry::decode(self.body("istio.networking.v1alpha3.ServiceEntry"))
            .expect("a ServiceEntry body decodes")
    }

    /// The body as a WorkloadEntry.
    pub fn workload_entry(&self) -> net::WorkloadEntry {
        net::WorkloadEntry::decode(self.body("istio.networking.v1alpha3.WorkloadEntry"))
            .expect("a WorkloadEntry body decodes")
    }

    fn body(&self, message: &str) -> &[u8] {
        let body = self
            .resource
            .body
            .as_ref()
            .expect("every resource has a body");
        assert_eq!(body.type_url, format!("type.googleapis.com/{message}"));
        &body.value
    }
}

/// Decodes one resource `Any` of a response: `(metadata.name, held)`.
pub fn decode(any: &Any) -> (String, Held) {
    assert_eq!(
        any.type_url, RESOURCE_TYPE_URL,
        "istiod unpacks mcp.Resource"
    );
    let resource = mcp::Resource::decode(any.value.as_slice()).expect("an mcp.Resource");
    let meta = resource.metadata.as_ref().expect("metadata");
    let (name, version) = (meta.name.clone(), meta.version.clone());
    (name, Held { version, resource })
}

/// What a client holds: collection → name → resource.
pub type Holdings = BTreeMap<String, BTreeMap<String, Held>>;

/// A first request for a collection: its type URL and no names (a wildcard), as istiod sends.
trait Wildcard {
    fn wildcard(type_url: String, node: Option<Node>) -> Self;
}

macro_rules! wildcard {
    ($request:ty) => {
        impl Wildcard for $request {
            fn wildcard(type_url: String, node: Option<Node>) -> Self {
                Self {
                    node,
                    type_url,
                    ..Default::default()
                }
            }
        }
    };
}
wildcard!(DiscoveryRequest);
wildcard!(DeltaDiscoveryRequest);

/// A request channel holding one wildcard request per collection, the node on the first, as
/// istiod opens its stream.
async fn subscribe_all<R: Wildcard>(node_id: &str) -> (mpsc::Sender<R>, mpsc::Receiver<R>) {
    let (tx, rx) = mpsc::channel(REQUEST_BUFFER);
    for (i, c) in COLLECTIONS.iter().enumerate() {
        let node = (i == 0).then(|| node(node_id));
        let req = R::wildcard(c.type_url.to_string(), node);
        tx.send(req).await.expect("buffer has room");
    }
    (tx, rx)
}

/// Which protocol a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Sotw,
    Delta,
}

enum Stream {
    Sotw(mpsc::Sender<DiscoveryRequest>, Streaming<DiscoveryResponse>),
    Delta(
        mpsc::Sender<DeltaDiscoveryRequest>,
        Streaming<DeltaDiscoveryResponse>,
    ),
}

/// An MCP client on one ADS stream.
pub struct McpClient {
    stream: Stream,
    /// What it holds now.
    pub held: Holdings,
    /// The last `version_info` per collection (SotW only).
    pub versions: BTreeMap<String, String>,
}

impl McpClient {
    /// Opens ADS to `addr` in `mode` and subscribes to every collection with no names.
    pub async fn open(addr: SocketAddr, mode: Mode, node_id: &str) -> McpClient {
        let ch = connect(addr)
            .await
            .expect("tributary accepts the connection");
        let mut client = AggregatedDiscoveryServiceClient::new(ch);
        let stream = match mode {
            Mode::Sotw => {
                let (tx, rx) = subscribe_all::<DiscoveryRequest>(node_id).await;
                let rx = client.stream_aggregated_resources(ReceiverStream::new(rx));
                Stream::Sotw(tx, rx.await.expect("ADS opens").into_inner())
            }
            Mode::Delta => {
                let (tx, rx) = subscribe_all::<DeltaDiscoveryRequest>(node_id).await;
                let rx = client.delta_aggregated_resources(ReceiverStream::new(rx));
                Stream::Delta(tx, rx.await.expect("delta ADS opens").into_inner())
            }
        };
        McpClient {
            stream,
            held: Holdings::new(),
            versions: BTreeMap::new(),
        }
    }

    /// Reads, applies and ACKs one response within `limit`; its collection, or `None` on timeout.
    pub async fn next(&mut self, limit: Duration) -> Option<String> {
        match &mut self.stream {
            Stream::Sotw(tx, rx) => {
                let resp = tokio::time::timeout(limit, rx.message()).await.ok()?;
                let resp = resp.expect("stream healthy").expect("stream open");
                let mut set = BTreeMap::new();
                for any in &resp.resources {
                    let (name, held) = decode(any);
                    set.insert(name, held);
                }
                self.held.insert(resp.type_url.clone(), set);
                self.versions
                    .insert(resp.type_url.clone(), resp.version_info.clone());
                let ack = DiscoveryRequest {
                    type_url: resp.type_url.clone(),
                    version_info: resp.version_info,
                    response_nonce: resp.nonce,
                    ..Default::default()
                };
                tx.send(ack).await.expect("buffer has room");
                Some(resp.type_url)
            }
            Stream::Delta(tx, rx) => {
                let resp = tokio::time::timeout(limit, rx.message()).await.ok()?;
                let resp = resp.expect("stream healthy").expect("stream open");
                let set = self.held.entry(resp.type_url.clone()).or_default();
                for r in &resp.resources {
                    let (name, held) = decode(r.resource.as_ref().expect("a resource"));
                    assert_eq!(name, r.name, "the xDS name is the metadata name");
                    assert!(!r.version.is_empty(), "delta resources carry a version");
                    set.insert(name, held);
                }
                for gone in &resp.removed_resources {
                    set.remove(gone);
                }
                let ack = DeltaDiscoveryRequest {
                    type_url: resp.type_url.clone(),
                    response_nonce: resp.nonce,
                    ..Default::default()
                };
                tx.send(ack).await.expect("buffer has room");
                Some(resp.type_url)
            }
        }
    }

    /// Reads responses until `done(held)` holds, within `limit` (panics with `what` otherwise).
    pub async fn until(&mut self, limit: Duration, what: &str, done: impl Fn(&Holdings) -> bool) {
        let deadline = Instant::now() + limit;
        while !done(&self.held) {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.next(left).await.is_none() {
                panic!(
                    "no {what} within {limit:?}; holding {:#?}",
                    self.held.keys()
                );
            }
        }
    }

    /// Reads until every collection has been answered at least once.
    pub async fn until_all_answered(&mut self, limit: Duration) {
        self.until(limit, "answer for every collection", |held| {
            COLLECTIONS.iter().all(|c| held.contains_key(c.type_url))
        })
        .await;
    }
}
