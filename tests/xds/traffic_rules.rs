//! Make-before-break for traffic rules over a real ADS stream, SotW and delta (SOTW-30, SOTW-31,
//! SOTW-32): the snapshots a rule change produces, served by the real xDS server to a client that
//! behaves like Envoy (it asks EDS for every cluster CDS gives it, after reading CDS). A route never
//! references a cluster the client lacks or whose endpoints have not arrived, and a subset cluster
//! is removed only after no route references it; the server's wait for EDS is bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::{Locality as PbLocality, Node, address};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, lb_endpoint::HostIdentifier,
};
use envoy_types::pb::envoy::config::route::v3::{
    RouteConfiguration, route::Action, route_action::ClusterSpecifier,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use tributary::aggregate::MergedService;
use tributary::envoy::{GenerateOptions, ResourceType};
use tributary::snapshot::MeshBuilder;
use tributary::xds::XdsOptions;
use tributary_registries::rules::{Rule, RuleMeta, RuleSet};
use tributary_registries::{
    ClusterId, Endpoint, Hostname, Locality, Origin, Protocol, RegistryId, Service, ServicePort,
};

use crate::support::delta::{DeltaClient, delta_names};
use crate::support::*;

const HOST: &str = "reviews.default.svc.cluster.local";

fn origin() -> Origin {
    Origin {
        registry: RegistryId::new("mock"),
        cluster: ClusterId::new("c1"),
    }
}

fn endpoint(ip: &str, version: &str) -> Endpoint {
    Endpoint {
        labels: BTreeMap::from([("version".into(), version.into())]),
        ..Endpoint::new(ip, origin())
    }
}

fn reviews() -> (Hostname, Option<Arc<MergedService>>) {
    let hostname = Hostname::new(HOST).unwrap();
    let svc = MergedService {
        service: Service {
            ports: vec![ServicePort {
                name: "http".into(),
                port: 9080,
                protocol: Protocol::Http,
                target_port: None,
            }],
            namespace: "default".into(),
            ..Service::new(hostname.clone(), origin())
        },
        endpoints: vec![endpoint("10.0.0.1", "v1"), endpoint("10.0.0.2", "v2")],
        registries: vec![RegistryId::new("mock")],
        conflicts: Vec::new(),
        unmapped: Vec::new(),
    };
    (hostname, Some(Arc::new(svc)))
}

fn rules(dr: &str, vs: &str) -> Arc<RuleSet> {
    let meta = |name: &str| RuleMeta {
        namespace: "default".into(),
        name: name.into(),
        source: "test".into(),
        ..RuleMeta::default()
    };
    Arc::new(RuleSet {
        destination_rules: vec![Arc::new(Rule {
            meta: meta("dr"),
            spec: serde_yaml::from_str(dr).unwrap(),
        })],
        virtual_services: vec![Arc::new(Rule {
            meta: meta("vs"),
            spec: serde_yaml::from_str(vs).unwrap(),
        })],
    })
}

/// Every cluster a route configuration sends to, weighted or not.
fn routed(any: &Any) -> BTreeSet<String> {
    let r = RouteConfiguration::decode(any.value.as_slice()).unwrap();
    r.virtual_hosts
        .iter()
        .flat_map(|vh| &vh.routes)
        .filter_map(|rt| match &rt.action {
            Some(Action::Route(a)) => a.cluster_specifier.as_ref(),
            _ => None,
        })
        .flat_map(|c| match c {
            ClusterSpecifier::Cluster(c) => vec![c.clone()],
            ClusterSpecifier::WeightedClusters(w) => {
                w.clusters.iter().map(|c| c.name.clone()).collect()
            }
            _ => vec![],
        })
        .collect()
}

/// What a proxy holds, checked on every update as Envoy would feel it: a route to a cluster it
/// lacks, or to one whose endpoints have not arrived (still warming), answers 503.
#[derive(Default)]
struct Held {
    clusters: BTreeSet<String>,
    with_endpoints: BTreeSet<String>,
    routed: BTreeSet<String>,
}

impl Held {
    /// CDS: the clusters are now `now`; returns those added and removed.
    fn clusters(&mut self, now: BTreeSet<String>) -> (Vec<String>, Vec<String>) {
        let gone: Vec<String> = self.clusters.difference(&now).cloned().collect();
        for g in &gone {
            assert!(
                !self.routed.contains(g),
                "SOTW-31: {g} removed while a route still uses it"
            );
        }
        let added = now.difference(&self.clusters).cloned().collect();
        self.with_endpoints.retain(|c| now.contains(c));
        self.clusters = now;
        (added, gone)
    }

    /// RDS: the route now sends to `routed`.
    fn routes(&mut self, routed: BTreeSet<String>) {
        for cl in &routed {
            assert!(
                self.clusters.contains(cl),
                "SOTW-30/31: the route references {cl} before CDS sent it"
            );
            assert!(
                self.with_endpoints.contains(cl),
                "SOTW-31: the route references {cl} before its EDS arrived (it is still warming)"
            );
        }
        self.routed = routed;
    }
}

/// A client that acts as Envoy does over ADS: it asks EDS for every cluster CDS gives it, only
/// after reading that CDS response, and RDS for the route.
trait Proxy {
    async fn ask(&mut self, ty: ResourceType, names: &[&str]);
    /// Handles responses until the stream is quiet, checking each against `held`.
    async fn settle(&mut self, held: &mut Held);
}

fn strs(v: &BTreeSet<String>) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

impl Proxy for XdsClient {
    async fn ask(&mut self, ty: ResourceType, names: &[&str]) {
        self.subscribe(ty, names).await;
    }

    async fn settle(&mut self, held: &mut Held) {
        while let Ok(r) = tokio::time::timeout(QUIET, self.expect_response()).await {
            if r.type_url == CDS.type_url() {
                held.clusters(r.resources.iter().map(|a| cluster_name(&a.value)).collect());
                self.ack(&r, &[]).await;
                self.subscribe(EDS, &strs(&held.clusters)).await;
            } else if r.type_url == EDS.type_url() {
                held.with_endpoints.extend(resource_names(&r));
                self.ack(&r, &strs(&held.clusters)).await;
            } else if r.type_url == RDS.type_url() {
                held.routes(routed(&r.resources[0]));
                self.ack(&r, &["9080"]).await;
            } else {
                self.ack(&r, &[]).await;
            }
        }
    }
}

impl Proxy for DeltaClient {
    async fn ask(&mut self, ty: ResourceType, names: &[&str]) {
        self.subscribe(ty, names).await;
    }

    async fn settle(&mut self, held: &mut Held) {
        while let Ok(r) = tokio::time::timeout(QUIET, self.expect_response()).await {
            let ty = ResourceType::from_type_url(&r.type_url).expect("a known type");
            self.ack(&r).await;
            match ty {
                CDS => {
                    let (added, gone) =
                        held.clusters(self.held[CDS.index()].keys().cloned().collect());
                    let (added, gone) = (strs_of(&added), strs_of(&gone));
                    if !added.is_empty() || !gone.is_empty() {
                        self.request(EDS, &added, &gone, "").await;
                    }
                }
                EDS => held.with_endpoints.extend(delta_names(&r)),
                RDS => {
                    let any = &self.held[RDS.index()]["9080"].any;
                    held.routes(routed(&Any::decode(any.as_slice()).unwrap()));
                }
                _ => {}
            }
        }
    }
}

fn strs_of(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn cluster_name(bytes: &[u8]) -> String {
    Cluster::decode(bytes).unwrap().name
}

const DR: &str = "host: reviews\nsubsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]\n";
const SPLIT: &str = "hosts: [reviews]\nhttp:\n- route: [{destination: {host: reviews, subset: v1}, weight: 50}, {destination: {host: reviews, subset: v2}, weight: 50}]\n";
const DR_V2: &str = "host: reviews\nsubsets: [{name: v2, labels: {version: v2}}]\n";
const ALL_V2: &str =
    "hosts: [reviews]\nhttp:\n- route: [{destination: {host: reviews, subset: v2}}]\n";

/// One push adds subset clusters and the route that uses them, then another moves the route off
/// one subset and removes it: the client never holds a route to a cluster it lacks or that is
/// still warming (SOTW-30, SOTW-31, SOTW-32).
async fn rule_changes_are_make_before_break<P: Proxy>(
    s: &TestServer,
    mut mesh: MeshBuilder,
    mut p: P,
) {
    let mut held = Held::default();
    p.ask(CDS, &[]).await;
    p.settle(&mut held).await;
    p.ask(RDS, &["9080"]).await;
    p.settle(&mut held).await;
    assert_eq!(
        held.routed,
        BTreeSet::from([format!("outbound|9080||{HOST}")])
    );

    // Subsets and the split that uses them arrive in one rule change: the route waits for the
    // clusters' EDS, which the client asks for only after reading CDS.
    s.store
        .publish(mesh.set_rules(rules(DR, SPLIT), Instant::now()).unwrap());
    p.settle(&mut held).await;
    let v1 = format!("outbound|9080|v1|{HOST}");
    let v2 = format!("outbound|9080|v2|{HOST}");
    assert_eq!(held.routed, BTreeSet::from([v1.clone(), v2.clone()]));

    // v1 goes away while the route moves off it, in one rule change: the cluster outlives the
    // route that used it.
    s.store.publish(
        mesh.set_rules(rules(DR_V2, ALL_V2), Instant::now())
            .unwrap(),
    );
    p.settle(&mut held).await;
    assert_eq!(held.routed, BTreeSet::from([v2.clone()]));
    assert!(
        !held.clusters.contains(&v1),
        "the unused subset cluster is removed in the end"
    );
}

/// A server with `options` serving the reviews service without rules.
async fn serve_reviews(options: XdsOptions) -> (TestServer, MeshBuilder) {
    let s = TestServer::start_with(options).await;
    let mut mesh = MeshBuilder::new(GenerateOptions::default());
    s.store
        .publish(mesh.apply(vec![reviews()], Instant::now()).unwrap());
    (s, mesh)
}

#[tokio::test]
async fn sotw_rule_changes_are_make_before_break() {
    let (s, mesh) = serve_reviews(XdsOptions::default()).await;
    let c = s.ads("envoy").await;
    rule_changes_are_make_before_break(&s, mesh, c).await;
}

#[tokio::test]
async fn delta_rule_changes_are_make_before_break() {
    let (s, mesh) = serve_reviews(XdsOptions::default()).await;
    let c = s.delta_ads("envoy").await;
    rule_changes_are_make_before_break(&s, mesh, c).await;
}

/// The wait is bounded: a client that never asks for the EDS of added clusters still gets the
/// route, once the server's wait has run out (and not before: it is held meanwhile).
#[tokio::test]
async fn routes_held_for_eds_go_out_when_the_wait_runs_out() {
    const WAIT: Duration = Duration::from_secs(2);
    let (s, mut mesh) = serve_reviews(XdsOptions {
        eds_warm_wait: WAIT,
        ..XdsOptions::default()
    })
    .await;
    let mut c = s.ads("lazy").await;
    let default = format!("outbound|9080||{HOST}");
    c.subscribe(CDS, &[]).await;
    let cds = c.expect(CDS, &[&default]).await;
    c.ack(&cds, &[]).await;
    c.subscribe(EDS, &[&default]).await;
    let eds = c.expect(EDS, &[&default]).await;
    c.ack(&eds, &[&default]).await;
    c.subscribe(RDS, &["9080"]).await;
    let rds = c.expect(RDS, &["9080"]).await;
    c.ack(&rds, &["9080"]).await;

    s.store
        .publish(mesh.set_rules(rules(DR, SPLIT), Instant::now()).unwrap());
    let cds = c.expect_response().await;
    assert_eq!(cds.type_url, CDS.type_url());
    c.ack(&cds, &[]).await;
    // The client never asks for the subsets' EDS: the route is held ...
    c.expect_no_response().await;
    // ... then sent, well before the client's own 15 s give-up.
    let rds = c.expect_response_within(WAIT + RESPONSE_TIMEOUT).await;
    assert_eq!(rds.type_url, RDS.type_url());
    let v2 = format!("outbound|9080|v2|{HOST}");
    assert!(routed(&rds.resources[0]).contains(&v2));
}

/// The same with a client that does not even acknowledge the CDS response: no request reaches
/// the server after the push, and the route still goes out when the wait runs out.
#[tokio::test]
async fn routes_held_for_eds_go_out_without_any_further_request() {
    const WAIT: Duration = Duration::from_secs(1);
    let (s, mut mesh) = serve_reviews(XdsOptions {
        eds_warm_wait: WAIT,
        ..XdsOptions::default()
    })
    .await;
    let mut c = s.delta_ads("silent").await;
    let default = format!("outbound|9080||{HOST}");
    c.subscribe(CDS, &[]).await;
    let cds = c.expect(CDS, &[&default], &[]).await;
    c.ack(&cds).await;
    c.subscribe(EDS, &[&default]).await;
    let eds = c.expect(EDS, &[&default], &[]).await;
    c.ack(&eds).await;
    c.subscribe(RDS, &["9080"]).await;
    let rds = c.expect(RDS, &["9080"], &[]).await;
    c.ack(&rds).await;

    let pushed = Instant::now();
    s.store
        .publish(mesh.set_rules(rules(DR, SPLIT), Instant::now()).unwrap());
    let cds = c.expect_response().await;
    assert_eq!(cds.type_url, CDS.type_url());
    let rds = c.expect_response_within(WAIT + RESPONSE_TIMEOUT).await;
    assert_eq!(rds.type_url, RDS.type_url());
    assert!(pushed.elapsed() >= WAIT, "held until the wait ran out");
    let v2 = format!("outbound|9080|v2|{HOST}");
    assert!(routed(rds.resources[0].resource.as_ref().unwrap()).contains(&v2));
}

/// `reviews` with v1 in us-east/zone-a and v2 in us-west/zone-b.
fn reviews_in_two_zones() -> (Hostname, Option<Arc<MergedService>>) {
    let (host, svc) = reviews();
    let mut svc = (*svc.expect("a service")).clone();
    svc.endpoints[0].locality = Locality::parse("us-east/zone-a");
    svc.endpoints[1].locality = Locality::parse("us-west/zone-b");
    (host, Some(Arc::new(svc)))
}

fn with_locality(node: &mut Node, region: &str, zone: &str) {
    node.locality = Some(PbLocality {
        region: region.into(),
        zone: zone.into(),
        ..Default::default()
    });
}

/// Endpoint address → priority, from an EDS resource.
fn priorities(any: &[u8]) -> BTreeMap<String, u32> {
    let cla = ClusterLoadAssignment::decode(any).unwrap();
    cla.endpoints
        .iter()
        .flat_map(|g| {
            g.lb_endpoints
                .iter()
                .filter_map(move |e| match &e.host_identifier {
                    Some(HostIdentifier::Endpoint(ep)) => {
                        match ep.address.as_ref()?.address.as_ref()? {
                            address::Address::SocketAddress(s) => {
                                Some((s.address.clone(), g.priority))
                            }
                            _ => None,
                        }
                    }
                    _ => None,
                })
        })
        .collect()
}

const DR_FAILOVER: &str = "host: reviews
trafficPolicy:
  loadBalancer:
    localityLbSetting:
      failover: [{from: us-east, to: us-west}]
  outlierDetection: {consecutive5xxErrors: 5}
";
const TO_REVIEWS: &str = "hosts: [reviews]\nhttp:\n- route: [{destination: {host: reviews}}]\n";

#[tokio::test]
async fn eds_priorities_follow_each_proxy_locality_encoded_once_per_locality() {
    let s = TestServer::start_unready().await;
    let mut mesh = MeshBuilder::new(GenerateOptions::default());
    mesh.apply(vec![reviews_in_two_zones()], Instant::now());
    s.store.publish(
        mesh.set_rules(rules(DR_FAILOVER, TO_REVIEWS), Instant::now())
            .unwrap(),
    );
    let cla = format!("outbound|9080||{HOST}");
    let (v1, v2) = ("10.0.0.1".to_string(), "10.0.0.2".to_string());
    // Two SotW proxies in us-east/zone-a, one delta proxy in us-west/zone-b, one with no locality.
    let mut sotw = Vec::new();
    for id in ["east-1", "east-2"] {
        let mut c = s.ads(id).await;
        with_locality(&mut c.node, "us-east", "zone-a");
        c.subscribe(EDS, &[&cla]).await;
        let r = c.expect(EDS, &[&cla]).await;
        sotw.push(r.resources[0].value.clone());
    }
    let mut west = s.delta_ads("west").await;
    with_locality(&mut west.node, "us-west", "zone-b");
    west.subscribe(EDS, &[&cla]).await;
    let r = west.expect(EDS, &[&cla], &[]).await;
    let west_any = r.resources[0].resource.as_ref().unwrap().value.clone();
    let mut plain = s.ads("nowhere").await;
    plain.subscribe(EDS, &[&cla]).await;
    let plain_any = plain.expect(EDS, &[&cla]).await.resources[0].value.clone();

    // The proxy's own zone first, the failover region next.
    let want_east = BTreeMap::from([(v1.clone(), 0), (v2.clone(), 1)]);
    assert_eq!(priorities(&sotw[0]), want_east);
    assert_eq!(sotw[0], sotw[1], "same locality, same bytes");
    // us-west has no failover entry: us-east is simply another region.
    assert_eq!(
        priorities(&west_any),
        BTreeMap::from([(v1.clone(), 1), (v2.clone(), 0)])
    );
    // No locality: today's assignment, no priorities.
    assert_eq!(priorities(&plain_any), BTreeMap::from([(v1, 0), (v2, 0)]));
    let snap = s.store.load().expect("published");
    assert_eq!(
        snap.locality_variants_built(),
        2,
        "one encoding per distinct proxy locality, however many proxies share it"
    );
}
