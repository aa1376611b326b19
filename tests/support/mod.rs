//! The one support module every test binary of `tests/` shares (tests/README.md lists the tiers).
//!
//! This file is H-RAW: an in-process xDS server on `127.0.0.1:0`, hand-made Envoy resources
//! published through a `SnapshotStore`, and a scripted raw gRPC client that checks INV-1/2/3/5 on
//! every response. The parts:
//!
//! - [`delta`]: the incremental (delta xDS) twin of the scripted client;
//! - [`recorder`]: a global `metrics` recorder tests read counters from;
//! - [`resources`]: hand-made Envoy resources and their names;
//! - [`harness`]: real processes (the tributary binary, Envoy, HTTP backends) and waits;
//! - [`mcp`]: a test MCP client (istiod's side) built from Istio's generated types;
//! - [`pki`]: test CAs, certificates and TLS clients;
//! - [`proxyless`]: proxyless gRPC clients and servers (the scripts in `tests/proxyless/`);
//! - [`raw_ads`]: plain ADS streams for tests of the whole pipeline or the real binary;
//! - [`type_url`]: the wire type URLs, spelled out independently of the crate's own constants.

#![allow(dead_code)]

pub mod delta;
pub mod harness;
pub mod mcp;
pub mod pki;
pub mod proxyless;
pub mod raw_ads;
pub mod recorder;
pub mod resources;
pub mod type_url;

use std::collections::{BTreeSet, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::envoy::service::endpoint::v3::endpoint_discovery_service_client::EndpointDiscoveryServiceClient;
use envoy_types::pb::envoy::service::listener::v3::listener_discovery_service_client::ListenerDiscoveryServiceClient;
use envoy_types::pb::envoy::service::route::v3::route_discovery_service_client::RouteDiscoveryServiceClient;
use envoy_types::pb::google::rpc::Status as RpcStatus;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};
use tributary::config::Config;
use tributary::envoy::{EncodedResource, ResourceType};
use tributary::runtime::{self, Running};
use tributary::snapshot::{BuildInput, SnapshotBuilder, SnapshotStore};
use tributary::xds::{Subscription, XdsOptions, XdsServer};

pub use ResourceType::{Cluster as CDS, Endpoint as EDS, Listener as LDS, Route as RDS};

/// How long `expect_response` waits by default: generous for a loaded CI box, but only paid when a
/// test is about to fail.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `expect_no_response` listens: long enough for a loopback push to arrive, short enough
/// that the suite stays fast.
pub const QUIET: Duration = Duration::from_millis(300);

/// The whole pipeline in process, started from `config`. The test [`recorder`] goes in first: the
/// `metrics` crate has one recorder per process, and the tests of the binary that read counters
/// need theirs, not the Prometheus one the runtime would install.
pub async fn start_runtime(config: Config) -> Running {
    recorder::install();
    runtime::start(config).await.expect("tributary starts")
}

/// [`start_runtime`] with the xDS and admin ports on `127.0.0.1:0`, once its first snapshot is
/// published (within `limit`).
pub async fn start_ready(config: Config, limit: Duration) -> Running {
    let config = Config {
        xds_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        admin_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        ..config
    };
    let running = start_runtime(config).await;
    let deadline = std::time::Instant::now() + limit;
    while !running.store.is_ready() {
        assert!(std::time::Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    running
}

/// The server under test and the snapshot builder feeding it.
pub struct TestServer {
    pub store: SnapshotStore,
    pub xds: XdsServer,
    pub addr: SocketAddr,
    builder: Mutex<SnapshotBuilder>,
    task: JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    /// A server with an initial snapshot of `resources` published (ready).
    pub async fn start(resources: Vec<EncodedResource>) -> Self {
        let s = Self::start_unready().await;
        s.publish(resources, vec![]);
        s
    }

    /// A server whose CDS is ten 100 KiB clusters `c0`..`c9` (1 MiB: a client with a 64 KiB window
    /// that stops reading stalls the stream on it, SOTW-35), plus `extra`.
    pub async fn start_behind_big_cds(extra: Vec<EncodedResource>) -> Self {
        let big = (0..10).map(|i| resources::big_cluster(&format!("c{i}"), 100 * 1024));
        Self::start(big.chain(extra).collect()).await
    }

    /// On a server from [`Self::start_behind_big_cds`] with `cla("s", 1)` and `route("r", "c0")`,
    /// whose client `node` stopped reading during the 1 MiB CDS response: changes `r` and waits
    /// until its RDS response (after `rds_nonce`) is sent, which hyper holds, then changes `s`.
    /// h2 has no room for the EDS response that change owes, so the body does not build it until
    /// the client reads again (SOTW-35).
    pub async fn owe_eds_behind_stuck_cds(&self, node: &str, rds_nonce: &str) {
        self.wait_status(node, CDS, |st| st.sent_nonce.is_some())
            .await;
        self.publish(vec![resources::route("r", "c1")], vec![]);
        self.wait_status(node, RDS, |st| st.sent_nonce.as_deref() != Some(rds_nonce))
            .await;
        self.publish(vec![resources::cla("s", 2)], vec![]);
    }

    /// A server whose store has no snapshot yet (registries not synced).
    pub async fn start_unready() -> Self {
        Self::start_with(XdsOptions::default()).await
    }

    pub async fn start_with(options: XdsOptions) -> Self {
        recorder::install();
        let store = SnapshotStore::new();
        let xds = XdsServer::new(store.clone(), options);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let router = xds.router(&mut tonic::transport::Server::builder());
        let task = tokio::spawn(async move {
            router.serve_with_incoming(incoming).await.unwrap();
        });
        Self {
            store,
            xds,
            addr,
            builder: Mutex::new(SnapshotBuilder::new()),
            task,
        }
    }

    /// Builds and publishes the next snapshot. Returns its seq, or `None` if nothing changed.
    pub fn publish(
        &self,
        upserts: Vec<EncodedResource>,
        removes: Vec<(ResourceType, &str)>,
    ) -> Option<u64> {
        let input = BuildInput {
            upserts,
            removes: removes
                .into_iter()
                .map(|(t, n)| (t, Arc::from(n)))
                .collect(),
            ..Default::default()
        };
        let snap = self.builder.lock().unwrap().build(input)?;
        let seq = snap.seq;
        self.store.publish(snap);
        Some(seq)
    }

    pub fn version(&self, ty: ResourceType) -> String {
        self.store.load().unwrap().resources(ty).version.to_string()
    }

    async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    /// A channel whose HTTP/2 receive windows are `window` bytes.
    async fn channel_with_window(&self, window: u32) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .initial_stream_window_size(window)
            .initial_connection_window_size(window)
            .connect()
            .await
            .unwrap()
    }

    /// An ADS client whose HTTP/2 receive windows are `window` bytes, so a client that stops
    /// reading stalls the server after that much (TRANS-1, SOTW-35).
    pub async fn ads_with_window(&self, node: &str, window: u32) -> XdsClient {
        let ch = self.channel_with_window(window).await;
        let (tx, rx) = mpsc::channel(64);
        let mut client =
            AggregatedDiscoveryServiceClient::new(ch).max_decoding_message_size(64 * 1024 * 1024);
        let resp = client
            .stream_aggregated_resources(ReceiverStream::new(rx))
            .await
            .expect("ADS stream opens");
        XdsClient::new(node, tx, resp.into_inner(), None)
    }

    /// The registry's view of `node`'s connections.
    pub fn conns(&self, node: &str) -> Vec<tributary::xds::ConnectionInfo> {
        self.xds.connections().for_node(node)
    }

    /// The registry's status of `ty` on `node`'s only connection.
    pub fn type_status(&self, node: &str, ty: ResourceType) -> tributary::xds::TypeStatus {
        let conns = self.conns(node);
        assert_eq!(conns.len(), 1, "one connection for {node}");
        conns[0].types[ty.index()].1.clone()
    }

    /// Waits (bounded) until `f` holds for `node`'s `ty` status.
    pub async fn wait_status(
        &self,
        node: &str,
        ty: ResourceType,
        f: impl Fn(&tributary::xds::TypeStatus) -> bool,
    ) -> tributary::xds::TypeStatus {
        for _ in 0..300 {
            if let Some(c) = self.conns(node).first() {
                let st = &c.types[ty.index()].1;
                if f(st) {
                    return st.clone();
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "status of {ty} on {node} never matched: {:?}",
            self.conns(node)
        );
    }

    /// An ADS client with node id `node`.
    pub async fn ads(&self, node: &str) -> XdsClient {
        self.try_ads(node).await.expect("ADS stream opens")
    }

    pub async fn try_ads(&self, node: &str) -> Result<XdsClient, Status> {
        let (tx, rx) = mpsc::channel(64);
        let mut client = AggregatedDiscoveryServiceClient::new(self.channel().await)
            .max_decoding_message_size(64 * 1024 * 1024);
        let resp = client
            .stream_aggregated_resources(ReceiverStream::new(rx))
            .await?;
        Ok(XdsClient::new(node, tx, resp.into_inner(), None))
    }

    /// A client of the per-type service for `ty` (not ADS).
    pub async fn per_type(&self, ty: ResourceType, node: &str) -> Result<XdsClient, Status> {
        let (tx, rx) = mpsc::channel(64);
        let ch = self.channel().await;
        let rx = ReceiverStream::new(rx);
        let stream = match ty {
            CDS => {
                ClusterDiscoveryServiceClient::new(ch)
                    .stream_clusters(rx)
                    .await?
            }
            EDS => {
                EndpointDiscoveryServiceClient::new(ch)
                    .stream_endpoints(rx)
                    .await?
            }
            LDS => {
                ListenerDiscoveryServiceClient::new(ch)
                    .stream_listeners(rx)
                    .await?
            }
            RDS => {
                RouteDiscoveryServiceClient::new(ch)
                    .stream_routes(rx)
                    .await?
            }
            other => panic!("{other} has no per-type service"),
        };
        Ok(XdsClient::new(node, tx, stream.into_inner(), Some(ty)))
    }

    /// Waits until the connection registry has `n` entries.
    pub async fn wait_connections(&self, n: usize) {
        let conns = self.xds.connections();
        for _ in 0..200 {
            if conns.len() == n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("expected {n} connections, have {}", conns.len());
    }
}

/// A scripted xDS client. Every response it receives is checked for INV-1, INV-2, INV-3, INV-5.
pub struct XdsClient {
    pub node: Node,
    tx: mpsc::Sender<DiscoveryRequest>,
    rx: Streaming<DiscoveryResponse>,
    /// Per-type service: the implied type.
    fixed: Option<ResourceType>,
    nonces: HashSet<String>,
    /// The client's own view of its subscriptions, to check INV-5.
    subs: [Subscription; 4],
    requested: [bool; 4],
    /// Whether the node was sent already.
    node_sent: bool,
    /// Accept responses for types this client unsubscribed from (one may already be on the wire
    /// when the unsubscription is sent). Strict (INV-5) by default.
    pub late_responses_ok: bool,
}

impl XdsClient {
    fn new(
        node: &str,
        tx: mpsc::Sender<DiscoveryRequest>,
        rx: Streaming<DiscoveryResponse>,
        fixed: Option<ResourceType>,
    ) -> Self {
        Self {
            node: Node {
                id: node.into(),
                cluster: "test".into(),
                ..Default::default()
            },
            tx,
            rx,
            fixed,
            nonces: HashSet::new(),
            subs: Default::default(),
            requested: [false; 4],
            node_sent: false,
            late_responses_ok: false,
        }
    }

    /// Sends a raw request as is (no bookkeeping of node or subscription).
    pub async fn send_raw(&mut self, req: DiscoveryRequest) {
        self.node_sent |= req.node.is_some();
        if let Some(ty) = ResourceType::from_type_url(&req.type_url).or(self.fixed) {
            self.subs[ty.index()].apply_sotw(ty, &req.resource_names);
            self.requested[ty.index()] = true;
        }
        self.tx.send(req).await.expect("request stream open");
    }

    /// Sends a request for `ty` with `names`, acknowledging `nonce`/`version`. The node goes on the
    /// first request only (as Envoy with `set_node_on_first_message_only`).
    pub async fn request(&mut self, ty: ResourceType, names: &[&str], version: &str, nonce: &str) {
        let node = (!self.node_sent).then(|| self.node.clone());
        self.node_sent = true;
        let req = DiscoveryRequest {
            version_info: version.into(),
            node,
            resource_names: names.iter().map(|s| s.to_string()).collect(),
            type_url: ty.type_url().into(),
            response_nonce: nonce.into(),
            error_detail: None,
            ..Default::default()
        };
        self.send_raw(req).await;
    }

    /// A first-time subscription (empty version and nonce).
    pub async fn subscribe(&mut self, ty: ResourceType, names: &[&str]) {
        self.request(ty, names, "", "").await;
    }

    /// ACKs `resp`, keeping (or changing to) `names`.
    pub async fn ack(&mut self, resp: &DiscoveryResponse, names: &[&str]) {
        let ty = ResourceType::from_type_url(&resp.type_url).unwrap();
        self.request(ty, names, &resp.version_info, &resp.nonce)
            .await;
    }

    /// NACKs `resp` with `message`, asking for `names`. `version` is the last applied version.
    pub async fn nack(
        &mut self,
        resp: &DiscoveryResponse,
        names: &[&str],
        version: &str,
        message: &str,
    ) {
        let ty = ResourceType::from_type_url(&resp.type_url).unwrap();
        let req = DiscoveryRequest {
            version_info: version.into(),
            node: None,
            resource_names: names.iter().map(|s| s.to_string()).collect(),
            type_url: ty.type_url().into(),
            response_nonce: resp.nonce.clone(),
            error_detail: Some(RpcStatus {
                code: Code::InvalidArgument as i32,
                message: message.into(),
                details: vec![],
            }),
            ..Default::default()
        };
        self.send_raw(req).await;
    }

    /// The next response, checked against the invariants.
    pub async fn expect_response(&mut self) -> DiscoveryResponse {
        self.expect_response_within(RESPONSE_TIMEOUT).await
    }

    pub async fn expect_response_within(&mut self, t: Duration) -> DiscoveryResponse {
        let resp = match tokio::time::timeout(t, self.rx.message()).await {
            Err(_) => panic!("no response within {t:?}"),
            Ok(Err(status)) => panic!("stream failed: {status:?}"),
            Ok(Ok(None)) => panic!("stream ended without a response"),
            Ok(Ok(Some(resp))) => resp,
        };
        self.check_invariants(&resp);
        resp
    }

    /// The next response within `t`, checked against the invariants; `None` if none came.
    pub async fn next_within(&mut self, t: Duration) -> Option<DiscoveryResponse> {
        match tokio::time::timeout(t, self.rx.message()).await {
            Err(_) => None,
            Ok(Ok(Some(resp))) => {
                self.check_invariants(&resp);
                Some(resp)
            }
            Ok(other) => panic!("stream ended: {other:?}"),
        }
    }

    /// The next response, which must be of type `ty` and carry exactly `names` (sorted).
    pub async fn expect(&mut self, ty: ResourceType, names: &[&str]) -> DiscoveryResponse {
        let resp = self.expect_response().await;
        assert_eq!(resp.type_url, ty.type_url(), "response type");
        assert_eq!(resource_names(&resp), names, "names in {} response", ty);
        resp
    }

    /// No response arrives within [`QUIET`].
    pub async fn expect_no_response(&mut self) {
        self.expect_no_response_for(QUIET).await;
    }

    pub async fn expect_no_response_for(&mut self, t: Duration) {
        match tokio::time::timeout(t, self.rx.message()).await {
            Err(_) => {}
            Ok(Ok(Some(resp))) => panic!(
                "unexpected {} response with {:?}",
                resp.type_url,
                resource_names(&resp)
            ),
            Ok(other) => panic!("stream ended: {other:?}"),
        }
    }

    /// The stream ends with a status within [`RESPONSE_TIMEOUT`]; no response comes before it.
    pub async fn expect_status(&mut self) -> Status {
        self.expect_status_within(RESPONSE_TIMEOUT).await
    }

    /// [`Self::expect_status`] within `t`: for a request whose reading costs the server more than
    /// a loopback round trip.
    pub async fn expect_status_within(&mut self, t: Duration) -> Status {
        match tokio::time::timeout(t, self.rx.message()).await {
            Err(_) => panic!("stream did not end"),
            Ok(Ok(Some(resp))) => panic!(
                "expected the stream to end, got a {} response",
                resp.type_url
            ),
            Ok(Ok(None)) => Status::ok(""),
            Ok(Err(status)) => status,
        }
    }

    fn check_invariants(&mut self, resp: &DiscoveryResponse) {
        // INV-3: a non-empty nonce, never repeated on the stream.
        assert!(!resp.nonce.is_empty(), "INV-3: empty nonce");
        assert!(
            self.nonces.insert(resp.nonce.clone()),
            "INV-3: nonce {} repeated",
            resp.nonce
        );
        // INV-2: the type is one we asked for, and every resource is of that type.
        let ty = ResourceType::from_type_url(&resp.type_url)
            .unwrap_or_else(|| panic!("INV-2: unexpected type_url {}", resp.type_url));
        if let Some(fixed) = self.fixed {
            assert_eq!(ty, fixed, "INV-2: per-type service sent another type");
        }
        for any in &resp.resources {
            assert_eq!(
                any.type_url, resp.type_url,
                "INV-2: resource type differs from response type"
            );
        }
        // INV-1: no name twice.
        let names = resource_names(resp);
        let unique: BTreeSet<&String> = names.iter().collect();
        assert_eq!(
            unique.len(),
            names.len(),
            "INV-1: duplicate names in {names:?}"
        );
        // INV-5: only subscribed types.
        assert!(
            self.late_responses_ok
                || (self.requested[ty.index()] && !self.subs[ty.index()].is_empty()),
            "INV-5: {ty} response while not subscribed"
        );
    }
}

/// Names of the resources in a response, in order.
pub fn resource_names(resp: &DiscoveryResponse) -> Vec<String> {
    resp.resources.iter().map(resources::name_of).collect()
}
