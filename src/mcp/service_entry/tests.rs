use std::collections::BTreeMap;
use std::net::IpAddr;

use tributary_registries::{ClusterId, Health, Locality, Protocol, RegistryId};

use super::*;
use crate::envoy::fixtures::{ep, merged, port};

fn enabled() -> McpSettings {
    McpSettings {
        enabled: true,
        ..Default::default()
    }
}

fn unwrap(r: &EncodedResource) -> (mcp::Resource, Vec<u8>) {
    let any = r.to_any();
    assert_eq!(any.type_url, crate::mcp::RESOURCE_TYPE_URL);
    let res = mcp::Resource::decode(any.value.as_slice()).expect("an MCP Resource");
    let body = res.body.clone().expect("a body").value;
    (res, body)
}

fn consul_service() -> MergedService {
    let mut a = ep("10.0.0.1");
    a.labels = BTreeMap::from([("version".to_string(), "v1".to_string())]);
    a.locality = Locality::parse("us-east/zone-a");
    a.network = "vpc-1".into();
    a.service_account = "spiffe://cluster.local/ns/shop/sa/api".into();
    a.weight = 3;
    a.ports = BTreeMap::from([("http".to_string(), 8080)]);
    let mut sick = ep("10.0.0.2");
    sick.health = Health::Unhealthy;
    let mut svc = merged(
        "api.service.consul",
        vec![
            port("http", 80, Protocol::Http),
            port("grpc", 9000, Protocol::Grpc),
        ],
        vec![a, sick],
    );
    svc.service.origin.registry = RegistryId::new("consul");
    svc.service.namespace = "shop".into();
    svc.service.labels = BTreeMap::from([("team".to_string(), "payments".to_string())]);
    let vip: IpAddr = "240.0.0.7".parse().unwrap();
    svc.service.vips = BTreeMap::from([(ClusterId::new("c1"), vec![vip])]);
    svc
}

#[test]
fn a_service_becomes_one_static_service_entry_with_healthy_endpoints_inline() {
    let out = resources_for(&consul_service(), &enabled());
    assert_eq!(out.len(), 1);
    let r = &out[0];
    assert_eq!(r.ty, ResourceType::ServiceEntry);
    assert_eq!(&*r.name, "shop/consul-api.service.consul");
    let (res, body) = unwrap(r);
    let meta = res.metadata.expect("metadata");
    assert_eq!(meta.name, "shop/consul-api.service.consul");
    assert_eq!(meta.labels["team"], "payments");
    assert_eq!(meta.annotations[REGISTRY_ANNOTATION], "consul");
    assert_eq!(
        res.body.unwrap().type_url,
        "type.googleapis.com/istio.networking.v1alpha3.ServiceEntry"
    );
    let se = net::ServiceEntry::decode(body.as_slice()).unwrap();
    assert_eq!(se.hosts, ["api.service.consul"]);
    assert_eq!(se.addresses, ["240.0.0.7"]);
    assert_eq!(se.resolution, net::service_entry::Resolution::Static as i32);
    assert_eq!(
        se.location,
        net::service_entry::Location::MeshInternal as i32
    );
    let ports: Vec<(u32, &str, &str)> = se
        .ports
        .iter()
        .map(|p| (p.number, p.name.as_str(), p.protocol.as_str()))
        .collect();
    assert_eq!(ports, [(80, "http", "HTTP"), (9000, "grpc", "GRPC")]);
    assert_eq!(se.endpoints.len(), 1, "only the healthy endpoint");
    let we = &se.endpoints[0];
    assert_eq!(we.address, "10.0.0.1");
    assert_eq!(we.ports["http"], 8080);
    assert_eq!(we.ports["grpc"], 9000);
    assert_eq!(we.labels["version"], "v1");
    assert_eq!(we.locality, "us-east/zone-a");
    assert_eq!(we.network, "vpc-1");
    assert_eq!(we.weight, 3);
    assert_eq!(we.service_account, "spiffe://cluster.local/ns/shop/sa/api");
}

#[test]
fn include_unhealthy_publishes_every_endpoint() {
    let settings = McpSettings {
        include_unhealthy: true,
        ..enabled()
    };
    let out = resources_for(&consul_service(), &settings);
    let se = net::ServiceEntry::decode(unwrap(&out[0]).1.as_slice()).unwrap();
    assert_eq!(se.endpoints.len(), 2);
}

#[test]
fn skipped_suffixes_and_registries_publish_nothing() {
    let kube = merged(
        "reviews.default.svc.cluster.local",
        vec![port("http", 80, Protocol::Http)],
        vec![ep("10.1.0.1")],
    );
    assert!(resources_for(&kube, &enabled()).is_empty());
    let all = McpSettings {
        skip_host_suffixes: Vec::new(),
        ..enabled()
    };
    assert_eq!(resources_for(&kube, &all).len(), 1);
    let skip_consul = McpSettings {
        skip_registries: vec!["consul".into()],
        ..enabled()
    };
    assert!(resources_for(&consul_service(), &skip_consul).is_empty());
}

#[test]
fn workload_entries_mode_publishes_one_selected_entry_per_endpoint() {
    let settings = McpSettings {
        endpoints: EndpointMode::WorkloadEntries,
        ..enabled()
    };
    let out = resources_for(&consul_service(), &settings);
    assert_eq!(out.len(), 2);
    let (we_res, we_body) = unwrap(&out[0]);
    assert_eq!(out[0].ty, ResourceType::WorkloadEntry);
    assert_eq!(&*out[0].name, "shop/consul-api.service.consul-10.0.0.1");
    let we = net::WorkloadEntry::decode(we_body.as_slice()).unwrap();
    let se = net::ServiceEntry::decode(unwrap(&out[1]).1.as_slice()).unwrap();
    assert!(se.endpoints.is_empty());
    let selector = se.workload_selector.expect("a selector").labels;
    assert_eq!(we.labels[SELECTOR_LABEL], selector[SELECTOR_LABEL]);
    assert_eq!(
        we_res.metadata.unwrap().labels[SELECTOR_LABEL],
        selector[SELECTOR_LABEL]
    );
    assert_eq!(we.ports["http"], 8080);
}

#[test]
fn versions_follow_content_only() {
    // TRANS-12: maps encode in key order, so many labels still give one encoding (a `HashMap`
    // would encode in its random per-instance order).
    let labelled = || {
        let mut svc = consul_service();
        svc.endpoints[0].labels = (0..16)
            .map(|i| (format!("k{i}"), format!("v{i}")))
            .collect();
        svc
    };
    let a = resources_for(&labelled(), &enabled());
    let b = resources_for(&labelled(), &enabled());
    assert_eq!(a[0].version, b[0].version);
    assert_eq!(a[0].any_bytes(), b[0].any_bytes());
    let a = resources_for(&consul_service(), &enabled());
    let mut changed = consul_service();
    changed.endpoints[0].weight = 4;
    assert_ne!(a[0].version, resources_for(&changed, &enabled())[0].version);
    assert_eq!(locality(&Locality::default()), "");
    assert_eq!(locality(&Locality::parse("r")), "r");
    assert_eq!(locality(&Locality::parse("r//s")), "r//s");
}
