//! Rule changes regenerate only what they touch (the builder's `Owner` bookkeeping).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use tributary_registries::rules::{Rule, RuleSet};
use tributary_registries::{Hostname, Protocol};

use super::MeshBuilder;
use crate::aggregate::MergedService;
use crate::envoy::fixtures::{ep, merged, port, rule_meta as meta};
use crate::envoy::{GenerateOptions, ResourceType};
use crate::snapshot::Snapshot;

fn svc(host: &str, p: u16) -> (Hostname, Option<Arc<MergedService>>) {
    let mut a = ep("10.0.0.1");
    a.labels = BTreeMap::from([("version".into(), "v1".into())]);
    let mut b = ep("10.0.0.2");
    b.labels = BTreeMap::from([("version".into(), "v2".into())]);
    let s = merged(host, vec![port("http", p, Protocol::Http)], vec![a, b]);
    (s.service.hostname.clone(), Some(Arc::new(s)))
}

fn set(dr: Option<&str>, vs: Option<&str>) -> Arc<RuleSet> {
    Arc::new(RuleSet {
        destination_rules: dr
            .map(|y| {
                Arc::new(Rule {
                    meta: meta("dr"),
                    spec: serde_yaml::from_str(y).expect("destination rule"),
                })
            })
            .into_iter()
            .collect(),
        virtual_services: vs
            .map(|y| {
                Arc::new(Rule {
                    meta: meta("vs"),
                    spec: serde_yaml::from_str(y).expect("virtual service"),
                })
            })
            .into_iter()
            .collect(),
    })
}

fn touched(s: &Snapshot, ty: ResourceType) -> Vec<String> {
    let c = s.changes_since(ty, s.seq - 1).expect("history");
    c.changed
        .iter()
        .chain(&c.removed)
        .map(|n| n.to_string())
        .collect()
}

/// A builder that has built `a` (port 80) and `b` (port 81).
fn a_on_80_and_b_on_81() -> MeshBuilder {
    let mut m = MeshBuilder::new(GenerateOptions::default());
    m.apply(
        vec![
            svc("a.default.svc.cluster.local", 80),
            svc("b.default.svc.cluster.local", 81),
        ],
        Instant::now(),
    );
    m
}

const DR: &str =
    "host: a\nsubsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]\n";
const VS: &str = "hosts: [a]\nhttp:\n- route: [{destination: {host: a, subset: v1}, weight: 90}, {destination: {host: a, subset: v2}, weight: 10}]\n";

#[test]
fn rules_before_the_first_push_wait_for_it() {
    // Nothing is served before the registries synced (TRANS-11): rules alone build nothing.
    let mut m = MeshBuilder::new(GenerateOptions::default());
    assert!(m.set_rules(set(Some(DR), None), Instant::now()).is_none());
    let s = m
        .apply(vec![svc("a.default.svc.cluster.local", 80)], Instant::now())
        .expect("first snapshot");
    assert_eq!(
        s.resources(ResourceType::Cluster).len(),
        3,
        "default + two subsets"
    );
    assert_eq!(s.resources(ResourceType::Endpoint).len(), 3);
}

#[test]
fn a_destination_rule_change_regenerates_only_its_host() {
    let mut m = a_on_80_and_b_on_81();
    let s = m
        .set_rules(set(Some(DR), None), Instant::now())
        .expect("subsets added");
    assert_eq!(
        touched(&s, ResourceType::Cluster),
        [
            "outbound|80|v1|a.default.svc.cluster.local",
            "outbound|80|v2|a.default.svc.cluster.local"
        ]
    );
    assert_eq!(touched(&s, ResourceType::Endpoint).len(), 2);
    assert!(touched(&s, ResourceType::Listener).is_empty());
    assert!(
        touched(&s, ResourceType::Route).is_empty(),
        "the route configuration of port 80 came out the same"
    );
    // The same rules again, rebuilt by a source: no snapshot.
    assert!(m.set_rules(set(Some(DR), None), Instant::now()).is_none());
    // Removing the rule removes the subset clusters and nothing else.
    let s = m
        .set_rules(set(None, None), Instant::now())
        .expect("removed");
    assert_eq!(touched(&s, ResourceType::Cluster).len(), 2);
    assert_eq!(s.resources(ResourceType::Cluster).len(), 2);
}

#[test]
fn a_virtual_service_change_regenerates_only_its_port_routes() {
    let mut m = a_on_80_and_b_on_81();
    m.set_rules(set(Some(DR), None), Instant::now());
    let s = m
        .set_rules(set(Some(DR), Some(VS)), Instant::now())
        .expect("routes changed");
    assert_eq!(touched(&s, ResourceType::Route), ["80"]);
    assert!(touched(&s, ResourceType::Cluster).is_empty());
    assert!(touched(&s, ResourceType::Endpoint).is_empty());
    assert!(touched(&s, ResourceType::Listener).is_empty());
    // An endpoint change with rules in force touches only EDS (default and subset assignments).
    let (host, svc_a) = svc("a.default.svc.cluster.local", 80);
    let mut changed = (*svc_a.expect("service")).clone();
    changed.endpoints[1].address = "10.0.0.3".into();
    let s = m
        .apply(vec![(host, Some(Arc::new(changed)))], Instant::now())
        .expect("endpoints changed");
    assert_eq!(
        touched(&s, ResourceType::Endpoint),
        [
            "outbound|80|v2|a.default.svc.cluster.local",
            "outbound|80||a.default.svc.cluster.local"
        ]
    );
    assert!(touched(&s, ResourceType::Route).is_empty());
    assert!(touched(&s, ResourceType::Cluster).is_empty());
}

/// The virtual hosts of route configuration `port`: (name, domains).
fn virtual_hosts(s: &Snapshot, port: &str) -> Vec<(String, Vec<String>)> {
    use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
    use prost::Message;
    let entry = &s.resources(ResourceType::Route).entries[port];
    let rc = RouteConfiguration::decode(entry.resource.to_any().value.as_slice()).expect("rds");
    rc.virtual_hosts
        .into_iter()
        .map(|vh| (vh.name, vh.domains))
        .collect()
}

const EXTERNAL_VS: &str = "hosts: [api.example.com]\nhttp:\n- route: [{destination: {host: a}}]\n";

#[test]
fn a_virtual_service_for_an_unknown_name_gets_its_own_virtual_host() {
    let mut m = a_on_80_and_b_on_81();
    let s = m
        .set_rules(set(None, Some(EXTERNAL_VS)), Instant::now())
        .expect("a virtual host added");
    assert_eq!(
        touched(&s, ResourceType::Route),
        ["80"],
        "only the port it routes on"
    );
    let vhs = virtual_hosts(&s, "80");
    assert_eq!(vhs.len(), 2);
    assert_eq!(
        vhs[1],
        (
            "api.example.com:80".to_string(),
            vec![
                "api.example.com".to_string(),
                "api.example.com:80".to_string()
            ]
        )
    );
    // Once a registry knows the name, the service's own virtual host answers to it.
    let s = m
        .apply(vec![svc("api.example.com", 80)], Instant::now())
        .expect("service added");
    let names: Vec<String> = virtual_hosts(&s, "80").into_iter().map(|v| v.0).collect();
    assert_eq!(
        names,
        ["a.default.svc.cluster.local:80", "api.example.com:80"]
    );
    assert!(s.issues.is_empty(), "{:?}", s.issues);
    // And when it is gone again, the VirtualService's virtual host comes back.
    let s = m
        .apply(
            vec![(Hostname::new("api.example.com").unwrap(), None)],
            Instant::now(),
        )
        .expect("service removed");
    assert_eq!(virtual_hosts(&s, "80").len(), 2);
    let s = m
        .set_rules(set(None, None), Instant::now())
        .expect("rule removed");
    assert_eq!(virtual_hosts(&s, "80").len(), 1);
}

#[test]
fn tcp_routes_reach_the_listener_and_its_bound_variants() {
    use envoy_types::pb::envoy::config::listener::v3::Listener;
    use prost::Message;
    let mut m = MeshBuilder::new(GenerateOptions::default());
    let db = merged(
        "db.default.svc.cluster.local",
        vec![port("pg", 5432, Protocol::Tcp)],
        vec![ep("10.0.0.1")],
    );
    m.apply(
        vec![(db.service.hostname.clone(), Some(Arc::new(db)))],
        Instant::now(),
    );
    let vs = "hosts: [db]\ntls:\n- match: [{sniHosts: [x.example.com]}]\n  route: [{destination: {host: db}}]\n";
    let s = m
        .set_rules(set(None, Some(vs)), Instant::now())
        .expect("listener changed");
    assert_eq!(touched(&s, ResourceType::Listener), ["0.0.0.0_5432"]);
    let ip = "127.0.0.2".parse().unwrap();
    let bound = s.resources_for(ResourceType::Listener, crate::snapshot::View::Bound(ip));
    let l = Listener::decode(
        bound.entries["0.0.0.0_5432"]
            .resource
            .to_any()
            .value
            .as_slice(),
    )
    .expect("lds");
    assert_eq!(
        l.filter_chains.len(),
        2,
        "the SNI chain is in the bound variant too"
    );
}
