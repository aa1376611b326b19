//! `localityLbSetting` conversions against istiod's behaviour (docs/traffic-rules.md, "Locality
//! load balancing").

use std::collections::BTreeMap;
use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::common_lb_config::LocalityConfigSpecifier;
use envoy_types::pb::envoy::config::core::v3::address;
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use tributary_registries::{Endpoint, Protocol};

use super::*;
use crate::aggregate::MergedService;
use crate::envoy::fixtures::{decode, ep, merged, port};
use crate::envoy::rules::tests::dr;
use crate::envoy::rules::{clusters_with_rule, load_assignments_with_rule};
use crate::envoy::{EncodedResource, GenerateOptions};

const HOST: &str = "reviews.default.svc.cluster.local";
const OUTLIER: &str = "  outlierDetection: {consecutive5xxErrors: 5}\n";

fn at(ip: &str, locality: &str, version: &str) -> Endpoint {
    let mut e = ep(ip);
    e.locality = Locality::parse(locality);
    e.labels = BTreeMap::from([("version".to_string(), version.to_string())]);
    e
}

fn svc(endpoints: Vec<Endpoint>) -> MergedService {
    merged(HOST, vec![port("http", 9080, Protocol::Http)], endpoints)
}

/// The default load assignment of `svc` under a rule with `policy` (YAML under `trafficPolicy`).
fn assignment(svc: &MergedService, policy: &str) -> EncodedResource {
    let rule = dr(&format!("host: {HOST}\ntrafficPolicy:\n{policy}"));
    let mut out = load_assignments_with_rule(
        svc,
        Some(&rule),
        &GenerateOptions::default(),
        &mut Vec::new(),
    );
    assert_eq!(out.len(), 1);
    out.remove(0)
}

fn located(svc: &MergedService, policy: &str) -> Arc<LocalityInput> {
    assignment(svc, policy)
        .located
        .expect("the setting applies: the assignment differs by proxy locality")
}

fn address(e: &LbEndpoint) -> String {
    match &e.host_identifier {
        Some(HostIdentifier::Endpoint(e)) => {
            match e.address.as_ref().and_then(|a| a.address.as_ref()) {
                Some(address::Address::SocketAddress(s)) => s.address.clone(),
                other => panic!("{other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }
}

/// Endpoint address → its priority.
fn priorities(cla: &ClusterLoadAssignment) -> BTreeMap<String, u32> {
    cla.endpoints
        .iter()
        .flat_map(|g| g.lb_endpoints.iter().map(move |e| (address(e), g.priority)))
        .collect()
}

/// Locality (`region/zone/`) → (locality weight, endpoints).
fn weights(cla: &ClusterLoadAssignment) -> BTreeMap<String, (u32, usize)> {
    cla.endpoints
        .iter()
        .map(|g| {
            let l = from_pb(&g.locality.clone().unwrap_or_default());
            let w = g.load_balancing_weight.as_ref().map_or(0, |w| w.value);
            (l.to_string(), (w, g.lb_endpoints.len()))
        })
        .collect()
}

fn four_localities() -> MergedService {
    svc(vec![
        at("10.0.0.1", "us-east/zone-a", "v1"),
        at("10.0.0.2", "us-east/zone-b", "v1"),
        at("10.0.0.3", "us-west/zone-a", "v1"),
        at("10.0.0.4", "eu/zone-a", "v1"),
    ])
}

/// The priorities of the four endpoints of [`four_localities`], in address order.
fn four(p: [u32; 4]) -> BTreeMap<String, u32> {
    (1..=4).map(|i| format!("10.0.0.{i}")).zip(p).collect()
}

fn prio(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
    pairs.iter().map(|(a, p)| (a.to_string(), *p)).collect()
}

#[test]
fn failover_orders_priorities_by_proximity_then_the_named_region() {
    let input = located(
        &four_localities(),
        &format!(
            "  loadBalancer:\n    localityLbSetting:\n      failover: [{{from: us-east, to: us-west}}]\n{OUTLIER}"
        ),
    );
    // Same zone 0, same region 2, the failover region 3, any other region 4: renumbered 0..3.
    let east = input.apply(&Locality::parse("us-east/zone-a"));
    assert_eq!(priorities(&east), four([0, 1, 2, 3]));
    // A region with no failover entry: every other region is one priority below its own.
    let eu = input.apply(&Locality::parse("eu/zone-a"));
    assert_eq!(priorities(&eu), four([1, 1, 1, 0]));
    assert!(
        input.cla.endpoints.iter().all(|g| g.priority == 0),
        "default: no priorities"
    );
}

#[test]
fn failover_needs_outlier_detection_and_can_be_disabled() {
    let s = four_localities();
    let failover =
        "  loadBalancer:\n    localityLbSetting:\n      failover: [{from: us-east, to: us-west}]\n";
    assert!(
        assignment(&s, failover).located.is_none(),
        "no outlier detection: no failover"
    );
    let disabled = format!("  loadBalancer:\n    localityLbSetting: {{enabled: false}}\n{OUTLIER}");
    assert!(assignment(&s, &disabled).located.is_none());
    // No mesh-wide default: outlier detection alone changes nothing.
    assert!(assignment(&s, OUTLIER).located.is_none());
    // `enabled` with outlier detection: istiod's default failover by proximity.
    let default = format!("  loadBalancer:\n    localityLbSetting: {{enabled: true}}\n{OUTLIER}");
    let east = located(&s, &default).apply(&Locality::parse("us-east/zone-a"));
    assert_eq!(priorities(&east), four([0, 1, 2, 2]));
}

#[test]
fn distribute_weighs_the_localities_of_the_matching_source() {
    let s = four_localities();
    let policy = "  loadBalancer:
    localityLbSetting:
      distribute:
      - from: us-east/zone-a/*
        to: {\"us-east/*\": 80, \"us-west/*\": 20}
";
    let input = located(&s, policy);
    let east = input.apply(&Locality::parse("us-east/zone-a/rack-1"));
    let want: BTreeMap<String, (u32, usize)> = [
        ("eu/zone-a/", (1, 0)),
        ("us-east/zone-a/", (40, 1)),
        ("us-east/zone-b/", (40, 1)),
        ("us-west/zone-a/", (20, 1)),
    ]
    .into_iter()
    .map(|(l, w)| (l.to_string(), w))
    .collect();
    // A `to` matching several groups shares its weight by theirs; unmatched groups are emptied.
    assert_eq!(weights(&east), want);
    // A proxy that no `from` matches gets the default.
    assert_eq!(input.apply(&Locality::parse("us-west/zone-a")), input.cla);
    // The cluster weighs localities (Envoy ignores locality weights otherwise).
    let rule = dr(&format!("host: {HOST}\ntrafficPolicy:\n{policy}"));
    let c: Cluster = decode(
        &clusters_with_rule(
            &s,
            Some(&rule),
            &GenerateOptions::default(),
            &mut Vec::new(),
        )[0],
    );
    let spec = c.common_lb_config.and_then(|l| l.locality_config_specifier);
    assert!(
        matches!(
            spec,
            Some(LocalityConfigSpecifier::LocalityWeightedLbConfig(_))
        ),
        "{spec:?}"
    );
}

#[test]
fn failover_priority_ranks_by_the_first_label_that_differs() {
    let s = svc(vec![
        at("10.0.0.1", "us-east/zone-a", "v1"),
        at("10.0.0.2", "us-east/zone-a", "v2"),
        at("10.0.0.3", "us-west/zone-a", "v2"),
    ]);
    let policy = format!(
        "  loadBalancer:
    localityLbSetting:
      failoverPriority: [topology.kubernetes.io/region, version=v2]
{OUTLIER}"
    );
    let input = located(&s, &policy);
    // Region and version equal 0; region only 1; nothing 2 (then proximity refines, renumbered).
    let east = input.apply(&Locality::parse("us-east/zone-a"));
    assert_eq!(
        priorities(&east),
        prio(&[("10.0.0.1", 1), ("10.0.0.2", 0), ("10.0.0.3", 2)])
    );
    // One locality group split by priority, each part weighing its endpoints.
    assert_eq!(east.endpoints.len(), 3);
    let west = input.apply(&Locality::parse("us-west/zone-a"));
    assert_eq!(
        priorities(&west),
        prio(&[("10.0.0.1", 1), ("10.0.0.2", 1), ("10.0.0.3", 0)])
    );
    // A label change the default bytes do not show is still a new version.
    let mut relabelled = s.clone();
    relabelled.endpoints[0]
        .labels
        .insert("version".into(), "v2".into());
    let (a, b) = (assignment(&s, &policy), assignment(&relabelled, &policy));
    assert_eq!(a.sotw_entry(), b.sotw_entry());
    assert_ne!(a.hash, b.hash);
}

#[test]
fn locality_rules_match_by_region_zone_and_wildcards() {
    let l = Locality::parse("us-east/zone-a/rack-1");
    for yes in [
        "us-east",
        "us-east/zone-a",
        "us-east/*",
        "*",
        "us-east/zone-a/rack-1",
        "us-east/zone-a/*",
    ] {
        assert!(locality_matches(&l, yes), "{yes}");
    }
    for no in ["us-west", "us-east/zone-b", "us-east/zone-a/rack-2", ""] {
        assert!(!locality_matches(&l, no), "{no}");
    }
}
