//! Conversion as istiod does it: protocols, service kinds, slice conditions, dedupe, locality.

use std::collections::HashMap;

use k8s_openapi::api::discovery::v1::EndpointConditions;

use super::endpoints::{SliceHealth, slice_health};
use super::*;
use crate::kubernetes::fake::objects::{self, SliceEndpoint};
use crate::model::{ClusterId, Health, Locality, RegistryId};

#[derive(Default)]
struct Objects {
    pods: HashMap<(String, String), Arc<Pod>>,
    nodes: HashMap<String, Arc<Node>>,
}

impl Lookup for Objects {
    fn pod(&self, ns: &str, name: &str) -> Option<Arc<Pod>> {
        self.pods.get(&(ns.into(), name.into())).cloned()
    }
    fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(name).cloned()
    }
}

fn ctx() -> Context {
    Context {
        origin: Origin {
            registry: RegistryId::new("kube"),
            cluster: ClusterId::new("east"),
        },
        domain: "cluster.local".into(),
        trust_domain: "example.org".into(),
    }
}

#[test]
fn protocol_from_app_protocol_then_port_name() {
    let cases = [
        ("http", None, Protocol::Http),
        ("http-web", None, Protocol::Http),
        ("HTTP2-x", None, Protocol::Http2),
        ("grpc", None, Protocol::Grpc),
        ("grpc-web", None, Protocol::Http),
        ("grpc-web-ui", None, Protocol::Http),
        ("tcp-db", None, Protocol::Tcp),
        ("https-api", None, Protocol::Tcp),
        ("mongo", None, Protocol::Tcp),
        ("web", None, Protocol::Tcp),
        ("", None, Protocol::Tcp),
        ("tcp", Some("kubernetes.io/h2c"), Protocol::Http2),
        ("tcp", Some("kubernetes.io/ws"), Protocol::Http),
        ("http", Some("kubernetes.io/wss"), Protocol::Tcp),
        ("tcp", Some("grpc"), Protocol::Grpc),
        ("http", Some("tcp"), Protocol::Tcp),
    ];
    for (name, app, want) in cases {
        assert_eq!(
            protocol(name, app),
            want,
            "name {name:?} appProtocol {app:?}"
        );
    }
}

#[test]
fn slice_conditions_map_like_istiod() {
    // REG-4: the documented policy, row by row (ready, serving, terminating, persistent).
    let c = |ready, serving, terminating| EndpointConditions {
        ready,
        serving,
        terminating,
    };
    use SliceHealth::*;
    let rows = [
        (None, false, Healthy),
        (Some(c(None, None, None)), false, Healthy),
        (Some(c(Some(true), Some(true), Some(false))), false, Healthy),
        (
            Some(c(Some(false), Some(true), Some(true))),
            false,
            Terminating,
        ),
        (Some(c(Some(false), Some(true), Some(true))), true, Draining),
        (
            Some(c(Some(false), Some(false), Some(true))),
            true,
            Terminating,
        ),
        (Some(c(Some(false), None, None)), false, Terminating),
        (
            Some(c(Some(false), Some(false), Some(false))),
            false,
            Unhealthy,
        ),
        (
            Some(c(Some(false), Some(true), Some(false))),
            true,
            Unhealthy,
        ),
    ];
    for (cond, persistent, want) in rows {
        assert_eq!(
            slice_health(cond.as_ref(), persistent),
            want,
            "{cond:?} persistent={persistent}"
        );
    }
}

#[test]
fn cluster_ip_headless_and_external_name_services() {
    let lookup = Objects::default();
    let svc = objects::service("ns", "web", "10.96.0.1", &[("http", 80), ("", 81)]);
    let c = convert(&svc, &[], &lookup, &ctx()).unwrap();
    let s = &c.state.service;
    assert_eq!(s.hostname.as_str(), "web.ns.svc.cluster.local");
    assert_eq!(s.resolution, Resolution::Static);
    assert_eq!(
        s.vips[&ClusterId::new("east")],
        ["10.96.0.1".parse::<IpAddr>().unwrap()]
    );
    assert_eq!(s.ports[1].name, "port-81", "an unnamed port gets a name");
    assert_eq!(s.origin, ctx().origin);

    let headless = objects::service("ns", "db", "None", &[("tcp", 5432)]);
    let c = convert(&headless, &[], &lookup, &ctx()).unwrap();
    assert_eq!(c.state.service.resolution, Resolution::Passthrough);
    assert!(c.state.service.vips.is_empty());

    let mut ext = objects::service("ns", "api", "", &[("https", 443)]);
    let spec = ext.spec.as_mut().unwrap();
    spec.type_ = Some("ExternalName".into());
    spec.external_name = Some("api.example.com.".into());
    spec.cluster_ip = None;
    spec.cluster_ips = None;
    let c = convert(&ext, &[], &lookup, &ctx()).unwrap();
    assert_eq!(c.state.service.resolution, Resolution::Dns);
    assert_eq!(c.state.service.location, MeshLocation::MeshExternal);
    assert_eq!(c.state.endpoints.len(), 1);
    assert_eq!(c.state.endpoints[0].address, "api.example.com");
    assert_eq!(c.state.endpoints[0].ports["https"], 443);

    let mut udp = objects::service("ns", "dns", "10.96.0.10", &[("dns", 53), ("dns-tcp", 53)]);
    udp.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].protocol = Some("UDP".into());
    let c = convert(&udp, &[], &lookup, &ctx()).unwrap();
    let names: Vec<&str> = c
        .state
        .service
        .ports
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["dns-tcp"], "UDP ports are left out");
}

#[test]
fn endpoints_dedupe_across_slices_and_skip_fqdn_slices() {
    let mut lookup = Objects::default();
    let mut node = objects::node("n1", "", "");
    node.metadata.labels = Some(
        [
            (
                "failure-domain.beta.kubernetes.io/region".to_string(),
                "old-r".to_string(),
            ),
            (
                "failure-domain.beta.kubernetes.io/zone".to_string(),
                "old-z".to_string(),
            ),
            ("topology.istio.io/subzone".to_string(), "rack1".to_string()),
        ]
        .into(),
    );
    lookup.nodes.insert("n1".into(), Arc::new(node));
    let svc = objects::service("ns", "web", "10.96.0.1", &[("http", 80), ("grpc", 90)]);
    let a = objects::endpoint_slice(
        "ns",
        "web-a",
        "web",
        &[("http", 8080)],
        &[SliceEndpoint::ready("10.0.0.1").terminating().node("n1")],
    );
    let b = objects::endpoint_slice(
        "ns",
        "web-b",
        "web",
        &[("grpc", 9090)],
        &[
            SliceEndpoint::ready("10.0.0.1").node("n1"),
            SliceEndpoint::ready("10.0.0.2"),
        ],
    );
    let mut fqdn = objects::endpoint_slice(
        "ns",
        "web-c",
        "web",
        &[("http", 8080)],
        &[SliceEndpoint::ready("x.example")],
    );
    fqdn.address_type = "FQDN".into();
    let slices = [Arc::new(a), Arc::new(b), Arc::new(fqdn)];
    let mut persistent = svc.clone();
    persistent.metadata.labels = Some(
        [(
            endpoints::PERSISTENT_SESSION_LABEL.to_string(),
            "x".to_string(),
        )]
        .into(),
    );
    let c = convert(&persistent, &slices, &lookup, &ctx()).unwrap();
    let eps = &c.state.endpoints;
    assert_eq!(eps.len(), 2, "{eps:?}");
    assert_eq!(eps[0].address, "10.0.0.1");
    assert_eq!(
        eps[0].health,
        Health::Healthy,
        "the healthiest copy of an address wins"
    );
    assert_eq!(
        eps[0].ports.len(),
        2,
        "ports from both slices: {:?}",
        eps[0].ports
    );
    assert_eq!(
        eps[0].locality,
        Locality::parse("old-r/old-z/rack1"),
        "beta labels and subzone"
    );
    assert_eq!(c.nodes.iter().collect::<Vec<_>>(), ["n1"]);
    // Without the persistent-session label the terminating copy is dropped, the other kept.
    let c = convert(&svc, &slices[..1], &lookup, &ctx()).unwrap();
    assert!(
        c.state.endpoints.is_empty(),
        "terminating endpoints leave at once (BUG-1)"
    );
    let c = convert(&persistent, &slices[..1], &lookup, &ctx()).unwrap();
    assert_eq!(c.state.endpoints[0].health, Health::Draining);
}

#[test]
fn an_endpoint_of_an_unknown_pod_is_held_and_counted() {
    let mut lookup = Objects::default();
    let svc = objects::service("ns", "web", "10.96.0.1", &[("http", 80)]);
    let slice = Arc::new(objects::endpoint_slice(
        "ns",
        "web-a",
        "web",
        &[("http", 8080)],
        &[
            SliceEndpoint::ready("10.0.0.1").pod("p1"),
            SliceEndpoint::ready("10.0.0.2"),
        ],
    ));
    let c = convert(&svc, std::slice::from_ref(&slice), &lookup, &ctx()).unwrap();
    assert_eq!(c.pending_pods, 1);
    assert_eq!(
        c.state.endpoints.len(),
        1,
        "the endpoint without a targetRef is served"
    );
    assert!(
        c.pods.contains(&("ns".to_string(), "p1".to_string())),
        "the pod is watched for"
    );
    lookup.pods.insert(
        ("ns".into(), "p1".into()),
        Arc::new(objects::pod("ns", "p1", &[("v", "1")], "sa1", "n9")),
    );
    let c = convert(&svc, &[slice], &lookup, &ctx()).unwrap();
    assert_eq!(c.pending_pods, 0);
    assert_eq!(c.state.endpoints.len(), 2);
    assert_eq!(
        c.state.service.service_accounts,
        ["spiffe://example.org/ns/ns/sa/sa1"]
    );
    assert_eq!(c.state.endpoints[0].labels["kubernetes.io/hostname"], "n9");
}
