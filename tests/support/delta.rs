//! H-RAW for delta xDS: a scripted delta client that checks INV-1..5 on every response and keeps
//! the resources it holds, as a client would, so tests can compare holdings.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::cluster::v3::cluster_discovery_service_client::ClusterDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use envoy_types::pb::envoy::service::endpoint::v3::endpoint_discovery_service_client::EndpointDiscoveryServiceClient;
use envoy_types::pb::envoy::service::listener::v3::listener_discovery_service_client::ListenerDiscoveryServiceClient;
use envoy_types::pb::envoy::service::route::v3::route_discovery_service_client::RouteDiscoveryServiceClient;
use envoy_types::pb::google::rpc::Status as RpcStatus;
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};
use tributary::envoy::ResourceType;
use tributary::xds::WILDCARD;

use super::{CDS, EDS, LDS, QUIET, RDS, RESPONSE_TIMEOUT, TestServer};

/// One resource as a client holds it: its version and the exact `Any` bytes received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub version: String,
    pub any: Vec<u8>,
}

impl TestServer {
    /// A delta ADS client with node id `node`.
    pub async fn delta_ads(&self, node: &str) -> DeltaClient {
        self.try_delta_ads(node)
            .await
            .expect("delta ADS stream opens")
    }

    pub async fn try_delta_ads(&self, node: &str) -> Result<DeltaClient, Status> {
        Self::delta_ads_on(node, self.channel().await).await
    }

    /// A delta ADS client whose HTTP/2 receive windows are `window` bytes, so a client that stops
    /// reading stalls the server after that much (TRANS-1, SOTW-35).
    pub async fn delta_ads_with_window(&self, node: &str, window: u32) -> DeltaClient {
        Self::delta_ads_on(node, self.channel_with_window(window).await)
            .await
            .expect("delta ADS stream opens")
    }

    async fn delta_ads_on(
        node: &str,
        ch: tonic::transport::Channel,
    ) -> Result<DeltaClient, Status> {
        let (tx, rx) = mpsc::channel(64);
        let mut client =
            AggregatedDiscoveryServiceClient::new(ch).max_decoding_message_size(64 * 1024 * 1024);
        let resp = client
            .delta_aggregated_resources(ReceiverStream::new(rx))
            .await?;
        Ok(DeltaClient::new(node, tx, resp.into_inner(), None))
    }

    /// A delta client of the per-type service for `ty`.
    pub async fn delta_per_type(
        &self,
        ty: ResourceType,
        node: &str,
    ) -> Result<DeltaClient, Status> {
        let (tx, rx) = mpsc::channel(64);
        let ch = self.channel().await;
        let rx = ReceiverStream::new(rx);
        let stream = match ty {
            CDS => {
                ClusterDiscoveryServiceClient::new(ch)
                    .delta_clusters(rx)
                    .await?
            }
            EDS => {
                EndpointDiscoveryServiceClient::new(ch)
                    .delta_endpoints(rx)
                    .await?
            }
            LDS => {
                ListenerDiscoveryServiceClient::new(ch)
                    .delta_listeners(rx)
                    .await?
            }
            RDS => {
                RouteDiscoveryServiceClient::new(ch)
                    .delta_routes(rx)
                    .await?
            }
            other => panic!("{other} has no per-type service"),
        };
        Ok(DeltaClient::new(node, tx, stream.into_inner(), Some(ty)))
    }
}

/// A scripted delta client.
pub struct DeltaClient {
    pub node: Node,
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    rx: Streaming<DeltaDiscoveryResponse>,
    fixed: Option<ResourceType>,
    nonces: HashSet<String>,
    /// Per type: wildcard and names, as the client believes (for INV-5).
    wildcard: [bool; ResourceType::COUNT],
    names: [BTreeSet<String>; ResourceType::COUNT],
    requested: [bool; ResourceType::COUNT],
    node_sent: bool,
    /// What the client holds, per type.
    pub held: [BTreeMap<String, Held>; ResourceType::COUNT],
    /// Accept (and ignore) resources of names or types this client unsubscribed from: a response
    /// already on the wire when the unsubscription was sent cannot be taken back, so a client that
    /// changes subscriptions while responses flow may see one. Strict (INV-5) by default.
    pub late_responses_ok: bool,
}

impl DeltaClient {
    fn new(
        node: &str,
        tx: mpsc::Sender<DeltaDiscoveryRequest>,
        rx: Streaming<DeltaDiscoveryResponse>,
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
            wildcard: [false; ResourceType::COUNT],
            names: Default::default(),
            requested: [false; ResourceType::COUNT],
            node_sent: false,
            held: Default::default(),
            late_responses_ok: false,
        }
    }

    /// Sends `req` as is, tracking the subscription it makes (DELTA-4 rules, as the server reads
    /// them) for INV-5.
    pub async fn send_raw(&mut self, req: DeltaDiscoveryRequest) {
        self.node_sent |= req.node.is_some();
        if let Some(ty) = ResourceType::from_type_url(&req.type_url).or(self.fixed) {
            let i = ty.index();
            let first = !self.requested[i];
            if first
                && req.resource_names_subscribe.is_empty()
                && req.resource_names_unsubscribe.is_empty()
                && ty.legacy_wildcard()
            {
                self.wildcard[i] = true;
            }
            for n in &req.resource_names_subscribe {
                if n == WILDCARD {
                    self.wildcard[i] = true;
                } else {
                    self.names[i].insert(n.clone());
                }
            }
            for n in &req.resource_names_unsubscribe {
                if n == WILDCARD {
                    self.wildcard[i] = false;
                } else {
                    self.names[i].remove(n);
                }
            }
            self.requested[i] = true;
            // What the client no longer wants, it forgets (the server says nothing, DELTA-6).
            let (wildcard, names) = (self.wildcard[i], &self.names[i]);
            self.held[i].retain(|n, _| wildcard || names.contains(n));
        }
        self.tx.send(req).await.expect("request stream open");
    }

    /// Sends a request for `ty`: subscribe `sub`, unsubscribe `unsub`, acknowledging `nonce`.
    pub async fn request(&mut self, ty: ResourceType, sub: &[&str], unsub: &[&str], nonce: &str) {
        let node = (!self.node_sent).then(|| self.node.clone());
        let req = DeltaDiscoveryRequest {
            node,
            type_url: ty.type_url().into(),
            resource_names_subscribe: sub.iter().map(|s| s.to_string()).collect(),
            resource_names_unsubscribe: unsub.iter().map(|s| s.to_string()).collect(),
            response_nonce: nonce.into(),
            ..Default::default()
        };
        self.send_raw(req).await;
    }

    /// A first request for `ty` subscribing `sub` (empty: legacy wildcard for LDS/CDS).
    pub async fn subscribe(&mut self, ty: ResourceType, sub: &[&str]) {
        self.request(ty, sub, &[], "").await;
    }

    /// A first request for `ty` from a reconnecting client: `sub` and the versions it holds of
    /// that type (DELTA-11), which are also what it holds from now on.
    pub async fn reconnect(
        &mut self,
        ty: ResourceType,
        sub: &[&str],
        held: BTreeMap<String, Held>,
    ) {
        let node = (!self.node_sent).then(|| self.node.clone());
        let req = DeltaDiscoveryRequest {
            node,
            type_url: ty.type_url().into(),
            resource_names_subscribe: sub.iter().map(|s| s.to_string()).collect(),
            initial_resource_versions: held
                .iter()
                .map(|(n, h)| (n.clone(), h.version.clone()))
                .collect::<HashMap<_, _>>(),
            ..Default::default()
        };
        self.held[ty.index()] = held;
        self.send_raw(req).await;
    }

    /// ACKs `resp`.
    pub async fn ack(&mut self, resp: &DeltaDiscoveryResponse) {
        self.ack_with(resp, &[], &[]).await;
    }

    /// ACKs `resp` and changes the subscription in the same request (DELTA-2).
    pub async fn ack_with(&mut self, resp: &DeltaDiscoveryResponse, sub: &[&str], unsub: &[&str]) {
        let ty = ResourceType::from_type_url(&resp.type_url).expect("a known type");
        self.request(ty, sub, unsub, &resp.nonce).await;
    }

    /// NACKs `resp` with `message`.
    pub async fn nack(&mut self, resp: &DeltaDiscoveryResponse, message: &str) {
        let ty = ResourceType::from_type_url(&resp.type_url).expect("a known type");
        let req = DeltaDiscoveryRequest {
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

    /// The next response, checked against the invariants and applied to [`Self::held`].
    pub async fn expect_response(&mut self) -> DeltaDiscoveryResponse {
        self.expect_response_within(RESPONSE_TIMEOUT).await
    }

    pub async fn expect_response_within(&mut self, t: Duration) -> DeltaDiscoveryResponse {
        let resp = match tokio::time::timeout(t, self.rx.message()).await {
            Err(_) => panic!("no delta response within {t:?}"),
            Ok(Err(status)) => panic!("stream failed: {status:?}"),
            Ok(Ok(None)) => panic!("stream ended without a response"),
            Ok(Ok(Some(resp))) => resp,
        };
        self.check_invariants(&resp);
        self.apply(&resp);
        resp
    }

    /// The next response: of type `ty`, carrying exactly `names` and removing exactly `removed`.
    pub async fn expect(
        &mut self,
        ty: ResourceType,
        names: &[&str],
        removed: &[&str],
    ) -> DeltaDiscoveryResponse {
        let resp = self.expect_response().await;
        assert_eq!(resp.type_url, ty.type_url(), "response type");
        assert_eq!(delta_names(&resp), names, "resources in {ty} response");
        let mut got_removed = resp.removed_resources.clone();
        got_removed.sort();
        assert_eq!(got_removed, removed, "removed_resources in {ty} response");
        resp
    }

    /// No response arrives within [`QUIET`].
    pub async fn expect_no_response(&mut self) {
        match tokio::time::timeout(QUIET, self.rx.message()).await {
            Err(_) => {}
            Ok(Ok(Some(resp))) => panic!(
                "unexpected {} delta response with {:?} removing {:?}",
                resp.type_url,
                delta_names(&resp),
                resp.removed_resources
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
            Ok(Ok(Some(resp))) => panic!("expected the stream to end, got {}", resp.type_url),
            Ok(Ok(None)) => Status::ok(""),
            Ok(Err(status)) => status,
        }
    }

    /// Whether a response arrives within `t`; applied if so. For convergence loops.
    pub async fn next_within(&mut self, t: Duration) -> Option<DeltaDiscoveryResponse> {
        match tokio::time::timeout(t, self.rx.message()).await {
            Err(_) => None,
            Ok(Ok(Some(resp))) => {
                self.check_invariants(&resp);
                self.apply(&resp);
                Some(resp)
            }
            Ok(other) => panic!("stream ended: {other:?}"),
        }
    }

    /// The next response (applied, not checked for INV-5), or the status the stream ended with.
    pub async fn next_or_status(&mut self, t: Duration) -> Result<DeltaDiscoveryResponse, Status> {
        match tokio::time::timeout(t, self.rx.message()).await {
            Err(_) => panic!("nothing within {t:?}"),
            Ok(Ok(Some(resp))) => {
                self.apply(&resp);
                Ok(resp)
            }
            Ok(Ok(None)) => Err(Status::ok("")),
            Ok(Err(status)) => Err(status),
        }
    }

    fn apply(&mut self, resp: &DeltaDiscoveryResponse) {
        let ty = ResourceType::from_type_url(&resp.type_url).expect("checked");
        let i = ty.index();
        let held = &mut self.held[i];
        for r in &resp.resources {
            if !self.wildcard[i] && !self.names[i].contains(&r.name) {
                // only reachable with `late_responses_ok`: not wanted, not kept
                continue;
            }
            let any = r.resource.as_ref().expect("checked").encode_to_vec();
            held.insert(
                r.name.clone(),
                Held {
                    version: r.version.clone(),
                    any,
                },
            );
        }
        for n in &resp.removed_resources {
            held.remove(n);
        }
    }

    fn check_invariants(&mut self, resp: &DeltaDiscoveryResponse) {
        // INV-3 / DELTA-1: a non-empty nonce, never repeated on the stream.
        assert!(!resp.nonce.is_empty(), "INV-3: empty nonce");
        assert!(
            self.nonces.insert(resp.nonce.clone()),
            "INV-3: nonce {} repeated",
            resp.nonce
        );
        // INV-2
        let ty = ResourceType::from_type_url(&resp.type_url)
            .unwrap_or_else(|| panic!("INV-2: unexpected type_url {}", resp.type_url));
        if let Some(fixed) = self.fixed {
            assert_eq!(ty, fixed, "INV-2: per-type service sent another type");
        }
        let mut names = BTreeSet::new();
        for r in &resp.resources {
            // INV-4: exactly one of name / resource_name.
            assert!(
                !r.name.is_empty() && r.resource_name.is_none(),
                "INV-4: resource must set name only: {r:?}"
            );
            let any = r
                .resource
                .as_ref()
                .expect("every delta resource carries its body");
            assert_eq!(any.type_url, resp.type_url, "INV-2: resource type");
            assert!(!r.version.is_empty(), "DELTA-13: resource version set");
            // INV-1
            assert!(names.insert(&r.name), "INV-1: {} twice", r.name);
        }
        let removed: BTreeSet<&String> = resp.removed_resources.iter().collect();
        assert_eq!(
            removed.len(),
            resp.removed_resources.len(),
            "INV-1: duplicate removals"
        );
        // INV-4: disjoint.
        assert!(
            names.is_disjoint(&removed),
            "INV-4: {names:?} both sent and removed"
        );
        // DELTA-18: no hidden fields.
        assert!(resp.control_plane.is_none() && resp.resource_errors.is_empty());
        assert!(resp.removed_resource_names.is_empty());
        // INV-5: only subscribed types, only covered names.
        if self.late_responses_ok {
            return;
        }
        let i = ty.index();
        assert!(
            self.requested[i] && (self.wildcard[i] || !self.names[i].is_empty()),
            "INV-5: {ty} response while not subscribed"
        );
        if !self.wildcard[i] {
            for n in &names {
                assert!(
                    self.names[i].contains(*n),
                    "INV-5: {n} sent without a subscription"
                );
            }
        }
    }
}

/// Names of the resources in a delta response, sorted.
pub fn delta_names(resp: &DeltaDiscoveryResponse) -> Vec<String> {
    let mut v: Vec<String> = resp.resources.iter().map(|r| r.name.clone()).collect();
    v.sort();
    v
}
