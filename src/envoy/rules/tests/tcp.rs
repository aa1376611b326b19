//! `tcp` and `tls` routes and the TCP idle timeout → the TCP proxies of a TCP port's listener.

use envoy_types::pb::envoy::config::listener::v3::{Listener, filter};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{TcpProxy, tcp_proxy};

use super::*;
use crate::envoy::listener_with_l4;

const DB: &str = "db.default.svc.cluster.local";

fn db() -> MergedService {
    merged(
        DB,
        vec![port("pg", 5432, Protocol::Tcp)],
        vec![labelled("10.0.0.1", "v1"), labelled("10.0.0.2", "v2")],
    )
}

const DB_SUBSETS: &str = r#"
host: db
trafficPolicy: {connectionPool: {tcp: {idleTimeout: 90s}}}
subsets:
- {name: v1, labels: {version: v1}}
- name: v2
  labels: {version: v2}
  trafficPolicy: {connectionPool: {tcp: {idleTimeout: 5m}}}
"#;

/// The listener of port 5432 under `rules`, decoded, with the issues.
fn listener(
    rule: Option<Arc<Rule<VirtualService>>>,
    drs: Vec<Arc<Rule<DestinationRule>>>,
) -> (Listener, Vec<ConfigIssue>) {
    let rules = RuleSet {
        destination_rules: drs,
        virtual_services: rule.into_iter().collect(),
    };
    in_context(db(), rules, 5432, |ctx, svc| {
        let mut issues = Vec::new();
        let l4 = l4_routes_for_port(5432, &[svc], ctx, &mut issues);
        let ip = "0.0.0.0".parse().unwrap();
        let r = listener_with_l4(5432, &[svc], ip, l4.as_ref(), &mut issues).expect("a listener");
        (decode(&r), issues)
    })
}

fn proxies(l: &Listener) -> Vec<(Vec<String>, TcpProxy)> {
    l.filter_chains
        .iter()
        .map(|c| {
            let names = c
                .filter_chain_match
                .as_ref()
                .map(|m| m.server_names.clone())
                .unwrap_or_default();
            let Some(filter::ConfigType::TypedConfig(a)) = &c.filters[0].config_type else {
                panic!("no typed config")
            };
            (names, TcpProxy::decode(a.value.as_slice()).unwrap())
        })
        .collect()
}

/// A proxy's clusters and weights (0 for a single cluster).
type Weights = Vec<(String, u32)>;

fn weights(p: &TcpProxy) -> Weights {
    match &p.cluster_specifier {
        Some(tcp_proxy::ClusterSpecifier::WeightedClusters(w)) => w
            .clusters
            .iter()
            .map(|c| (c.name.clone(), c.weight))
            .collect(),
        Some(tcp_proxy::ClusterSpecifier::Cluster(c)) => vec![(c.clone(), 0)],
        None => vec![],
    }
}

#[test]
fn a_tcp_route_becomes_a_weighted_tcp_proxy_with_the_longest_idle_timeout() {
    let (l, issues) = listener(
        Some(vs(r#"
hosts: [db]
tcp:
- match: [{port: 9999}]
  route: [{destination: {host: db, subset: v2}}]
- match: [{port: 5432}]
  route:
  - {destination: {host: db, subset: v1}, weight: 70}
  - {destination: {host: db, subset: v2}, weight: 30}
  - {destination: {host: db}, weight: 0}
"#)),
        vec![dr(DB_SUBSETS)],
    );
    assert!(issues.is_empty(), "{issues:?}");
    assert!(
        l.listener_filters.is_empty(),
        "no SNI chain, no TLS inspector"
    );
    let p = proxies(&l);
    assert_eq!(p.len(), 1);
    assert_eq!(
        weights(&p[0].1),
        [
            (format!("outbound|5432|v1|{DB}"), 70),
            (format!("outbound|5432|v2|{DB}"), 30)
        ],
        "the match for another port is skipped, weight 0 left out"
    );
    assert_eq!(
        p[0].1.idle_timeout.as_ref().map(|d| d.seconds),
        Some(300),
        "v2's 5m beats the rule's 90s"
    );
}

#[test]
fn tls_routes_get_sni_chains_and_the_rest_keeps_the_plain_proxy() {
    let (l, issues) = listener(
        Some(vs(r#"
hosts: [db]
tls:
- match: [{sniHosts: [a.example.com, "*.b.example.com"], port: 5432}]
  route: [{destination: {host: db, subset: v1}}]
- match: [{sniHosts: [a.example.com, c.example.com]}]
  route: [{destination: {host: db, subset: v2}}]
"#)),
        vec![],
    );
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(
        l.listener_filters[0].name,
        "envoy.filters.listener.tls_inspector"
    );
    assert!(l.continue_on_listener_filters_timeout);
    let p = proxies(&l);
    let chains: Vec<(Vec<String>, Weights)> =
        p.iter().map(|(n, p)| (n.clone(), weights(p))).collect();
    assert_eq!(
        chains,
        [
            (
                vec!["a.example.com".to_string(), "*.b.example.com".to_string()],
                vec![(format!("outbound|5432|v1|{DB}"), 0)]
            ),
            (
                vec!["c.example.com".to_string()],
                vec![(format!("outbound|5432|v2|{DB}"), 0)]
            ),
            (vec![], vec![(format!("outbound|5432||{DB}"), 0)]),
        ],
        "a name already taken stays with the first route; the last chain has no match"
    );
}

#[test]
fn an_idle_timeout_alone_changes_the_plain_proxy() {
    let (l, _) = listener(None, vec![dr(DB_SUBSETS)]);
    let p = proxies(&l);
    assert_eq!(weights(&p[0].1), [(format!("outbound|5432||{DB}"), 0)]);
    assert_eq!(p[0].1.idle_timeout.as_ref().map(|d| d.seconds), Some(90));
    let (plain, _) = listener(None, vec![]);
    assert_eq!(proxies(&plain)[0].1.idle_timeout, None);
}
