use super::*;
use crate::model::{Health, Locality, MeshLocation, Protocol};
use crate::serviceentry::fixtures::service_entry;
use crate::serviceentry::tests::{ctx, valid_se};

fn convert(spec: &str, selected: &[&Workload]) -> Vec<ServiceState> {
    services_of(
        &valid_se(&service_entry("e", "shop", spec)),
        selected,
        &ctx(),
    )
}

fn addresses(s: &ServiceState) -> Vec<(String, u16)> {
    let port = &s.service.ports[0];
    s.endpoints
        .iter()
        .map(|e| (e.address.clone(), e.port_for(port)))
        .collect()
}

fn workload(address: &str, labels: &[(&str, &str)]) -> Workload {
    Workload {
        address: address.into(),
        ports: BTreeMap::new(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        network: String::new(),
        locality: Locality::default(),
        weight: 0,
        service_account: String::new(),
        health: Health::Healthy,
    }
}

#[test]
fn one_service_per_host_with_the_entrys_attributes() {
    let out = convert(
        "hosts: [a.example.com, b.example.com]
addresses: [192.0.2.10]
ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]
location: MESH_INTERNAL
resolution: STATIC
endpoints: [{address: 10.0.0.1}]
exportTo: [.]
subjectAltNames: [spiffe://example.org/ns/shop/sa/a]",
        &[],
    );
    let hosts: Vec<&str> = out.iter().map(|s| s.service.hostname.as_str()).collect();
    assert_eq!(hosts, ["a.example.com", "b.example.com"]);
    let svc = &out[0].service;
    assert_eq!(svc.resolution, Resolution::Static);
    assert_eq!(svc.location, MeshLocation::MeshInternal);
    assert_eq!(
        svc.vips[&ClusterId::new("c1")],
        ["192.0.2.10".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(
        (svc.namespace.as_str(), svc.export_to.as_slice()),
        ("shop", &[".".to_string()][..])
    );
    assert_eq!(svc.service_accounts, ["spiffe://example.org/ns/shop/sa/a"]);
    assert_eq!(svc.ports[0].target_port, Some(8080));
    assert_eq!(svc.origin, ctx().origin);
    assert_eq!(
        addresses(&out[0]),
        [("10.0.0.1".into(), 8080)],
        "targetPort is the endpoint port"
    );
    assert_eq!(out[0].endpoints, out[1].endpoints);
}

use crate::model::ClusterId;

#[test]
fn each_resolution_maps_to_the_model() {
    // REG-17 (the Envoy cluster type per resolution is checked in tributary's tests).
    let spec = |r: &str, eps: &str| {
        format!(
            "hosts: [a.example.com]\nports: [{{number: 443, name: tls, protocol: TLS}}]\nresolution: {r}\n{eps}"
        )
    };
    let res = |r: &str, eps: &str| convert(&spec(r, eps), &[])[0].service.resolution;
    assert_eq!(res("NONE", ""), Resolution::Passthrough);
    assert_eq!(
        res("STATIC", "endpoints: [{address: 10.0.0.1}]"),
        Resolution::Static
    );
    assert_eq!(res("DNS", ""), Resolution::Dns);
    assert_eq!(res("DNS_ROUND_ROBIN", ""), Resolution::DnsRoundRobin);
    assert_eq!(
        convert(&spec("NONE", ""), &[])[0].endpoints,
        [],
        "NONE has no endpoints"
    );
    assert_eq!(
        convert(&spec("STATIC", ""), &[])[0].endpoints,
        [],
        "STATIC without endpoints"
    );
}

#[test]
fn dns_entries_without_endpoints_resolve_their_hosts() {
    let out = convert(
        "hosts: [a.example.com, b.example.com]\nports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]\nresolution: DNS",
        &[],
    );
    assert_eq!(addresses(&out[0]), [("a.example.com".into(), 8080)]);
    assert_eq!(addresses(&out[1]), [("b.example.com".into(), 8080)]);
    let rr = convert(
        "hosts: [a.example.com]\nports: [{number: 80, name: http, protocol: HTTP}]\nresolution: DNS_ROUND_ROBIN",
        &[],
    );
    assert_eq!(addresses(&rr[0]), [("a.example.com".into(), 80)]);
    // With endpoints, the endpoints are resolved instead.
    let eps = convert(
        "hosts: [a.example.com]\nports: [{number: 80, name: http, protocol: HTTP}]\nresolution: DNS\nendpoints: [{address: backend.example.com, ports: {http: 9090}}, {address: 10.0.0.2}]",
        &[],
    );
    assert_eq!(
        addresses(&eps[0]),
        [
            ("10.0.0.2".into(), 80),
            ("backend.example.com".into(), 9090)
        ],
        "sorted by address"
    );
}

#[test]
fn endpoints_carry_identity_weight_locality_and_network() {
    let out = convert(
        "hosts: [a.example.com]
ports: [{number: 80, name: http, protocol: HTTP}, {number: 9000, name: grpc, protocol: GRPC}]
resolution: STATIC
endpoints:
- {address: 10.0.0.1, ports: {grpc: 19000}, labels: {version: v1}, locality: us/east/a, weight: 5, network: n1, serviceAccount: api}
- {address: 10.0.0.2}",
        &[],
    );
    let e = &out[0].endpoints[0];
    assert_eq!(e.service_account, "spiffe://example.org/ns/shop/sa/api");
    assert_eq!((e.weight, e.network.as_str()), (5, "n1"));
    assert_eq!(e.locality, Locality::parse("us/east/a"));
    assert_eq!(e.labels["version"], "v1");
    assert_eq!(e.ports.get("grpc"), Some(&19000));
    assert_eq!(e.origin, ctx().origin);
    let d = &out[0].endpoints[1];
    assert_eq!(
        (d.weight, d.service_account.as_str()),
        (1, ""),
        "weight 0 means 1"
    );
    assert_eq!(out[0].service.ports[1].protocol, Protocol::Grpc);
}

#[test]
fn unix_endpoints_have_no_ports() {
    let out = convert(
        "hosts: [a.example.com]\nports: [{number: 80, name: http, protocol: HTTP}]\nresolution: STATIC\nendpoints: [{address: 'unix:///var/run/a.sock'}]",
        &[],
    );
    assert_eq!(out[0].endpoints[0].address, "unix:///var/run/a.sock");
    assert!(out[0].endpoints[0].ports.is_empty());
}

#[test]
fn a_selector_picks_matching_workloads_and_named_ones_only_for_dns() {
    let spec = |r: &str| {
        valid_se(&service_entry(
            "e",
            "shop",
            &format!(
                "hosts: [a.example.com]\nports: [{{number: 80, name: http, protocol: HTTP}}]\nlocation: MESH_INTERNAL\nresolution: {r}\nworkloadSelector: {{labels: {{app: api}}}}"
            ),
        ))
    };
    let ip = workload("10.0.0.1", &[("app", "api"), ("version", "v1")]);
    let other = workload("10.0.0.2", &[("app", "web")]);
    let named = workload("vm.example.com", &[("app", "api")]);
    let stat = spec("STATIC");
    assert!(selects(&stat, &ip));
    assert!(!selects(&stat, &other), "labels must match");
    assert!(
        !selects(&stat, &named),
        "a named workload is DNS-only (REG-17)"
    );
    let dns = spec("DNS");
    assert!(selects(&dns, &named));
    let out = services_of(&stat, &[&ip], &ctx());
    assert_eq!(addresses(&out[0]), [("10.0.0.1".into(), 80)]);
    assert_eq!(out[0].endpoints[0].labels["version"], "v1");
    // With a selector, a DNS entry does not fall back to resolving its host.
    assert_eq!(services_of(&dns, &[], &ctx())[0].endpoints, []);
    let no_selector = valid_se(&service_entry(
        "e",
        "shop",
        "hosts: [a.example.com]\nports: [{number: 80, name: http}]\nresolution: STATIC",
    ));
    assert!(!selects(&no_selector, &ip));
}
