//! Each conversion against Istio's documented behaviour (docs/traffic-rules.md).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, LbConfig, LbPolicy,
};
use envoy_types::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, lb_endpoint};
use envoy_types::pb::envoy::config::route::v3::{
    Route, route, route_action, route_action::hash_policy, route_match,
};
use envoy_types::pb::envoy::extensions::filters::http::cors::v3::CorsPolicy;
use envoy_types::pb::envoy::extensions::filters::http::fault::v3::{HttpFault, fault_abort};
use prost::Message;
use tributary_registries::rules::{DestinationRule, Rule, RuleSet, VirtualService};
use tributary_registries::{Endpoint, Hostname, Protocol};

use super::*;
use crate::envoy::fixtures::{decode, ep, merged, port, rule_meta as meta};
use crate::envoy::{ConfigIssue, GenerateOptions};

pub(super) fn dr(yaml: &str) -> Arc<Rule<DestinationRule>> {
    Arc::new(Rule {
        meta: meta("dr"),
        spec: serde_yaml::from_str(yaml).expect("destination rule"),
    })
}

fn vs(yaml: &str) -> Arc<Rule<VirtualService>> {
    Arc::new(Rule {
        meta: meta("vs"),
        spec: serde_yaml::from_str(yaml).expect("virtual service"),
    })
}

fn labelled(ip: &str, version: &str) -> Endpoint {
    let mut e = ep(ip);
    e.labels = BTreeMap::from([("version".to_string(), version.to_string())]);
    e
}

fn reviews() -> MergedService {
    merged(
        "reviews.default.svc.cluster.local",
        vec![port("http", 9080, Protocol::Http)],
        vec![
            labelled("10.0.0.1", "v1"),
            labelled("10.0.0.2", "v2"),
            labelled("10.0.0.3", "v2"),
        ],
    )
}

fn clusters(svc: &MergedService, rule: &Arc<Rule<DestinationRule>>) -> BTreeMap<String, Cluster> {
    clusters_with_rule(
        svc,
        Some(rule),
        &GenerateOptions::default(),
        &mut Vec::new(),
    )
    .iter()
    .map(|r| (r.name.to_string(), decode::<Cluster>(r)))
    .collect()
}

fn addresses(cla: &ClusterLoadAssignment) -> Vec<String> {
    cla.endpoints
        .iter()
        .flat_map(|l| &l.lb_endpoints)
        .filter_map(|e| match &e.host_identifier {
            Some(lb_endpoint::HostIdentifier::Endpoint(e)) => e.address.as_ref(),
            _ => None,
        })
        .filter_map(|a| match &a.address {
            Some(envoy_types::pb::envoy::config::core::v3::address::Address::SocketAddress(s)) => {
                Some(s.address.clone())
            }
            _ => None,
        })
        .collect()
}

const SUBSETS: &str = r#"
host: reviews
trafficPolicy:
  loadBalancer: {simple: LEAST_REQUEST}
  connectionPool:
    tcp: {maxConnections: 100, connectTimeout: 250ms}
    http: {http1MaxPendingRequests: 10, http2MaxRequests: 1000, maxRetries: 3, idleTimeout: 30s, maxRequestsPerConnection: 5}
  outlierDetection: {consecutive5xxErrors: 1, interval: 1s, baseEjectionTime: 30s, maxEjectionPercent: 100}
subsets:
- name: v1
  labels: {version: v1}
- name: v2
  labels: {version: v2}
  trafficPolicy:
    loadBalancer:
      consistentHash: {httpHeaderName: x-user, ringHash: {minimumRingSize: 1024}}
"#;

#[test]
fn subsets_become_clusters_whose_eds_holds_only_matching_endpoints() {
    let svc = reviews();
    let rule = dr(SUBSETS);
    let c = clusters(&svc, &rule);
    let names: Vec<&str> = c.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "outbound|9080|v1|reviews.default.svc.cluster.local",
            "outbound|9080|v2|reviews.default.svc.cluster.local",
            "outbound|9080||reviews.default.svc.cluster.local",
        ]
    );
    let v2 = &c["outbound|9080|v2|reviews.default.svc.cluster.local"];
    assert_eq!(
        v2.eds_cluster_config
            .as_ref()
            .map(|e| e.service_name.as_str()),
        Some("outbound|9080|v2|reviews.default.svc.cluster.local"),
        "a subset cluster asks EDS for its own assignment"
    );
    let clas: BTreeMap<String, ClusterLoadAssignment> = load_assignments_with_rule(
        &svc,
        Some(&rule),
        &GenerateOptions::default(),
        &mut Vec::new(),
    )
    .iter()
    .map(|r| (r.name.to_string(), decode::<ClusterLoadAssignment>(r)))
    .collect();
    assert_eq!(
        addresses(&clas["outbound|9080|v1|reviews.default.svc.cluster.local"]),
        ["10.0.0.1"]
    );
    assert_eq!(
        addresses(&clas["outbound|9080|v2|reviews.default.svc.cluster.local"]),
        ["10.0.0.2", "10.0.0.3"]
    );
    assert_eq!(
        addresses(&clas["outbound|9080||reviews.default.svc.cluster.local"]).len(),
        3,
        "the default cluster keeps every endpoint"
    );
}

#[test]
fn traffic_policy_maps_to_cluster_settings_and_subsets_override_it() {
    let c = clusters(&reviews(), &dr(SUBSETS));
    let default = &c["outbound|9080||reviews.default.svc.cluster.local"];
    assert_eq!(default.lb_policy, LbPolicy::LeastRequest as i32);
    let t = &default
        .circuit_breakers
        .as_ref()
        .expect("circuit breakers")
        .thresholds[0];
    assert_eq!(t.max_connections.as_ref().map(|v| v.value), Some(100));
    assert_eq!(t.max_pending_requests.as_ref().map(|v| v.value), Some(10));
    assert_eq!(t.max_requests.as_ref().map(|v| v.value), Some(1000));
    assert_eq!(t.max_retries.as_ref().map(|v| v.value), Some(3));
    let timeout = default.connect_timeout.as_ref().expect("connect timeout");
    assert_eq!((timeout.seconds, timeout.nanos), (0, 250_000_000));
    let o = default
        .outlier_detection
        .as_ref()
        .expect("outlier detection");
    assert_eq!(o.consecutive_5xx.as_ref().map(|v| v.value), Some(1));
    assert_eq!(
        o.enforcing_consecutive_5xx.as_ref().map(|v| v.value),
        Some(100)
    );
    assert_eq!(o.max_ejection_percent.as_ref().map(|v| v.value), Some(100));
    assert!(
        default
            .typed_extension_protocol_options
            .contains_key("envoy.extensions.upstreams.http.v3.HttpProtocolOptions"),
        "idle timeout and max requests per connection"
    );
    // The v2 subset replaces the load balancer and inherits the rest.
    let v2 = &c["outbound|9080|v2|reviews.default.svc.cluster.local"];
    assert_eq!(v2.lb_policy, LbPolicy::RingHash as i32);
    let Some(LbConfig::RingHashLbConfig(ring)) = &v2.lb_config else {
        panic!("ring hash config: {:?}", v2.lb_config)
    };
    assert_eq!(ring.minimum_ring_size.as_ref().map(|v| v.value), Some(1024));
    assert_eq!(v2.circuit_breakers, default.circuit_breakers);
    assert_eq!(v2.outlier_detection, default.outlier_detection);
}

#[test]
fn port_level_settings_win_for_their_port_only() {
    let svc = merged(
        "a.default.svc.cluster.local",
        vec![
            port("http", 80, Protocol::Http),
            port("tcp", 9000, Protocol::Tcp),
        ],
        vec![ep("10.0.0.1")],
    );
    let rule = dr(r#"
host: a
trafficPolicy:
  loadBalancer: {simple: RANDOM}
  portLevelSettings:
  - port: {number: 9000}
    loadBalancer: {consistentHash: {maglev: {tableSize: 65537}, useSourceIp: true}}
"#);
    let c = clusters(&svc, &rule);
    assert_eq!(
        c["outbound|80||a.default.svc.cluster.local"].lb_policy,
        LbPolicy::Random as i32
    );
    let tcp = &c["outbound|9000||a.default.svc.cluster.local"];
    assert_eq!(tcp.lb_policy, LbPolicy::Maglev as i32);
    assert!(
        tcp.typed_extension_protocol_options.is_empty(),
        "no HTTP options on TCP"
    );
}

#[test]
fn passthrough_and_tls_follow_istio() {
    let svc = reviews();
    let rule = dr(r#"
host: reviews.default.svc.cluster.local
trafficPolicy:
  loadBalancer: {simple: PASSTHROUGH}
  tls: {mode: MUTUAL, clientCertificate: /certs/c.pem, privateKey: /certs/k.pem, caCertificates: /certs/ca.pem, subjectAltNames: [reviews.example]}
"#);
    let c = clusters(&svc, &rule);
    let d = &c["outbound|9080||reviews.default.svc.cluster.local"];
    assert_eq!(
        d.cluster_discovery_type,
        Some(ClusterDiscoveryType::Type(
            DiscoveryType::OriginalDst as i32
        ))
    );
    assert!(d.eds_cluster_config.is_none());
    let ts = d.transport_socket.as_ref().expect("tls transport socket");
    assert_eq!(ts.name, "envoy.transport_sockets.tls");
    let Some(envoy_types::pb::envoy::config::core::v3::transport_socket::ConfigType::TypedConfig(
        a,
    )) = &ts.config_type
    else {
        panic!("typed config")
    };
    let ctx =
        envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::UpstreamTlsContext::decode(
            a.value.as_slice(),
        )
        .expect("tls context");
    assert_eq!(
        ctx.sni, "reviews.default.svc.cluster.local",
        "SNI defaults to the host"
    );
    let common = ctx.common_tls_context.expect("common context");
    assert_eq!(common.tls_certificates.len(), 1);
    assert!(common.validation_context_type.is_some());
}

#[test]
fn host_matching_prefers_exact_then_the_most_specific_wildcard() {
    let mut exact = (*dr("host: reviews\nsubsets: [{name: exact, labels: {a: b}}]")).clone();
    exact.meta.name = "exact".into();
    let mut wide =
        (*dr("host: \"*.svc.cluster.local\"\nsubsets: [{name: wide, labels: {a: b}}]")).clone();
    wide.meta.name = "wide".into();
    let mut narrow =
        (*dr("host: \"*.default.svc.cluster.local\"\nsubsets: [{name: narrow, labels: {a: b}}]"))
            .clone();
    narrow.meta.name = "narrow".into();
    let index = RuleIndex::new(&RuleSet {
        destination_rules: vec![Arc::new(wide), Arc::new(narrow), Arc::new(exact)],
        virtual_services: Vec::new(),
    });
    let name = |h: &str| {
        index
            .destination_rule(&Hostname::new(h).expect("host"))
            .map(|r| r.meta.name.clone())
    };
    assert_eq!(
        name("reviews.default.svc.cluster.local").as_deref(),
        Some("exact")
    );
    assert_eq!(
        name("ratings.default.svc.cluster.local").as_deref(),
        Some("narrow")
    );
    assert_eq!(
        name("ratings.prod.svc.cluster.local").as_deref(),
        Some("wide")
    );
    assert_eq!(name("example.com"), None);
}

/// Runs `f` in the context of port `port` of a mesh of `svc` alone, under `rules`.
fn in_context<R>(
    svc: MergedService,
    rules: RuleSet,
    port: u16,
    f: impl FnOnce(&RouteContext<'_>, &MergedService) -> R,
) -> R {
    let svc = Arc::new(svc);
    let services = HashMap::from([(svc.service.hostname.clone(), Arc::clone(&svc))]);
    let index = RuleIndex::new(&rules);
    let options = TrafficOptions::default();
    let ctx = RouteContext {
        port,
        services: &services,
        rules: &index,
        options: &options,
    };
    f(&ctx, &svc)
}

fn routes(
    rule: &Arc<Rule<VirtualService>>,
    drs: Vec<Arc<Rule<DestinationRule>>>,
) -> (Vec<Route>, Vec<ConfigIssue>) {
    let rules = RuleSet {
        destination_rules: drs,
        virtual_services: vec![Arc::clone(rule)],
    };
    in_context(reviews(), rules, 9080, |ctx, _| {
        let mut issues = Vec::new();
        let r = virtual_service_routes(rule, ctx, &mut issues);
        (r, issues)
    })
}

fn action(r: &Route) -> &envoy_types::pb::envoy::config::route::v3::RouteAction {
    match &r.action {
        Some(route::Action::Route(a)) => a,
        other => panic!("not a route action: {other:?}"),
    }
}

#[test]
fn weighted_destinations_become_weighted_clusters_and_the_catch_all_ends_the_list() {
    let (r, issues) = routes(
        &vs(r#"
hosts: [reviews]
http:
- match: [{headers: {x-canary: {exact: "true"}}}]
  route: [{destination: {host: reviews, subset: v2}}]
- route:
  - {destination: {host: reviews, subset: v1}, weight: 90}
  - {destination: {host: reviews, subset: v2}, weight: 10}
- route: [{destination: {host: reviews}}]
"#),
        vec![dr(SUBSETS)],
    );
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(r.len(), 2, "nothing after the catch-all");
    let m = r[0].r#match.as_ref().expect("match");
    assert_eq!(m.headers[0].name, "x-canary");
    assert_eq!(
        action(&r[0]).cluster_specifier,
        Some(route_action::ClusterSpecifier::Cluster(
            "outbound|9080|v2|reviews.default.svc.cluster.local".into()
        ))
    );
    let Some(route_action::ClusterSpecifier::WeightedClusters(w)) =
        &action(&r[1]).cluster_specifier
    else {
        panic!("weighted clusters")
    };
    let split: Vec<(&str, u32)> = w
        .clusters
        .iter()
        .map(|c| (c.name.as_str(), c.weight.as_ref().map_or(0, |w| w.value)))
        .collect();
    assert_eq!(
        split,
        [
            ("outbound|9080|v1|reviews.default.svc.cluster.local", 90),
            ("outbound|9080|v2|reviews.default.svc.cluster.local", 10)
        ]
    );
}

#[test]
fn routes_without_retries_get_istiods_default_policy() {
    let (r, _) = routes(
        &vs("hosts: [reviews]\nhttp:\n- route: [{destination: {host: reviews}}]\n"),
        vec![],
    );
    let p = action(&r[0])
        .retry_policy
        .as_ref()
        .expect("default retry policy");
    assert_eq!(p.retry_on, DEFAULT_RETRY_ON);
    assert_eq!(p.num_retries.as_ref().map(|n| n.value), Some(2));
    assert_eq!(p.retriable_status_codes, [503]);
    let (r, _) = routes(
        &vs(r#"
hosts: [reviews]
http:
- route: [{destination: {host: reviews}}]
  retries: {attempts: 3, perTryTimeout: 100ms, retryOn: "5xx,500"}
  timeout: 200ms
"#),
        vec![],
    );
    let a = action(&r[0]);
    let p = a.retry_policy.as_ref().expect("retry policy");
    assert_eq!(p.retry_on, "5xx,retriable-status-codes");
    assert_eq!(p.retriable_status_codes, [500]);
    assert_eq!(p.num_retries.as_ref().map(|n| n.value), Some(3));
    assert_eq!(a.timeout.as_ref().map(|t| t.nanos), Some(200_000_000));
    let (r, _) = routes(
        &vs(
            "hosts: [reviews]\nhttp:\n- route: [{destination: {host: reviews}}]\n  retries: {attempts: 0}\n",
        ),
        vec![],
    );
    assert!(
        action(&r[0]).retry_policy.is_none(),
        "attempts 0 turns retries off"
    );
}

#[test]
fn matches_rewrite_fault_mirror_and_headers_translate() {
    let (r, issues) = routes(
        &vs(r#"
hosts: [reviews]
http:
- match:
  - uri: {prefix: /api}
    ignoreUriCase: true
    method: {exact: GET}
    queryParams: {debug: {}}
    withoutHeaders: {x-internal: {}}
  rewrite: {uri: /v2/api, authority: internal}
  fault: {abort: {httpStatus: 503, percentage: {value: 50}}}
  corsPolicy: {allowOrigins: [{exact: "https://a.test"}], allowMethods: [GET]}
  mirror: {host: reviews, subset: v2}
  mirrorPercentage: {value: 12.5}
  headers: {request: {set: {x-a: "1"}, remove: [x-b]}, response: {add: {x-c: "2"}}}
  route: [{destination: {host: reviews}}]
- match: [{uri: {exact: /old}, port: 8080}]
  redirect: {uri: /new}
"#),
        vec![],
    );
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(r.len(), 1, "a match for another port is left out");
    let m = r[0].r#match.as_ref().expect("match");
    assert_eq!(
        m.path_specifier,
        Some(route_match::PathSpecifier::Prefix("/api".into()))
    );
    assert_eq!(m.case_sensitive.as_ref().map(|b| b.value), Some(false));
    let names: Vec<(&str, bool)> = m
        .headers
        .iter()
        .map(|h| (h.name.as_str(), h.invert_match))
        .collect();
    assert_eq!(names, [(":method", false), ("x-internal", true)]);
    assert_eq!(m.query_parameters[0].name, "debug");
    let a = action(&r[0]);
    assert_eq!(a.prefix_rewrite, "/v2/api");
    let mirror = &a.request_mirror_policies[0];
    assert_eq!(
        mirror.cluster,
        "outbound|9080|v2|reviews.default.svc.cluster.local"
    );
    assert_eq!(
        mirror
            .runtime_fraction
            .as_ref()
            .and_then(|f| f.default_value.as_ref())
            .map(|f| f.numerator),
        Some(125_000)
    );
    let fault = HttpFault::decode(r[0].typed_per_filter_config[FAULT_FILTER].value.as_slice())
        .expect("fault config");
    let abort = fault.abort.expect("abort");
    assert_eq!(
        abort.error_type,
        Some(fault_abort::ErrorType::HttpStatus(503))
    );
    assert_eq!(abort.percentage.map(|p| p.numerator), Some(500_000));
    // CORS and fault on one route: both applied (the map is encoded in key order).
    let cors = CorsPolicy::decode(r[0].typed_per_filter_config[CORS_FILTER].value.as_slice())
        .expect("cors config");
    assert_eq!(cors.allow_methods, "GET");
    assert_eq!(r[0].request_headers_to_add.len(), 1);
    assert_eq!(r[0].request_headers_to_remove, ["x-b"]);
    assert_eq!(r[0].response_headers_to_add.len(), 1);
}

#[test]
fn a_consistent_hash_rule_puts_a_hash_policy_on_routes_to_its_host() {
    let rule = dr(
        "host: reviews\ntrafficPolicy: {loadBalancer: {consistentHash: {httpCookie: {name: user, ttl: 10s}}}}\n",
    );
    let (r, _) = routes(
        &vs("hosts: [reviews]\nhttp:\n- route: [{destination: {host: reviews}}]\n"),
        vec![Arc::clone(&rule)],
    );
    let hash = &action(&r[0]).hash_policy;
    assert!(
        matches!(&hash[0].policy_specifier, Some(hash_policy::PolicySpecifier::Cookie(c)) if c.name == "user"),
        "{hash:?}"
    );
    // Without a VirtualService, the default route hashes too.
    let svc = reviews();
    let services = HashMap::new();
    let index = RuleIndex::new(&RuleSet {
        destination_rules: vec![rule],
        virtual_services: Vec::new(),
    });
    let options = TrafficOptions::default();
    let ctx = RouteContext {
        port: 9080,
        services: &services,
        rules: &index,
        options: &options,
    };
    let r = routes_for(&svc, &svc.service.ports[0], &ctx, &mut Vec::new()).expect("hashed default");
    assert_eq!(action(&r[0]).hash_policy.len(), 1);
}

#[test]
fn a_route_to_an_undefined_subset_is_reported() {
    let rule =
        vs("hosts: [reviews]\nhttp:\n- route: [{destination: {host: reviews, subset: v3}}]\n");
    let (r, issues) = routes(&rule, vec![dr(SUBSETS)]);
    assert_eq!(r.len(), 1, "still routed, as istiod does");
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].field, "spec.http[0].route[0].destination.subset");
    assert!(
        issues[0]
            .message
            .contains("no DestinationRule defines subset v3")
    );
    let (_, issues) = routes(
        &vs(r#"
hosts: [reviews]
http:
- route: [{destination: {host: reviews, subset: v2}}]
"#),
        vec![dr(SUBSETS)],
    );
    assert!(issues.is_empty(), "{issues:?}");
}

mod merge;
mod tcp;
