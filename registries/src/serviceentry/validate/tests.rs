use super::*;
use crate::model::Protocol;
use crate::serviceentry::fixtures::{invalid_service_entries, service_entry, workload_entry};
use crate::serviceentry::parse::{Document, Parsed, parse_document};

fn parsed(yaml: &str) -> Parsed {
    match parse_document(yaml, Some(1), "default", true) {
        Ok(Document::Object(p)) => *p,
        other => panic!("not an object: {other:?}"),
    }
}

fn se(spec: &str) -> Result<ValidServiceEntry, Vec<(String, String)>> {
    match parsed(&service_entry("e", "shop", spec)).result {
        Ok(Valid::ServiceEntry(se)) => Ok(se),
        Ok(other) => panic!("not a ServiceEntry: {other:?}"),
        Err(p) => Err(p.into_iter().map(|p| (p.field, p.message)).collect()),
    }
}

#[test]
fn each_invalid_entry_gets_its_own_error_naming_the_field() {
    // REG-11: the table of Istio's ServiceEntry rules (and tributary's), one violation each.
    let cases = invalid_service_entries("shop");
    assert!(cases.len() >= 12);
    for case in cases {
        let p = parsed(&case.yaml);
        assert_eq!(
            p.key.to_string(),
            format!("ServiceEntry shop/{}", case.name)
        );
        let problems = p.result.expect_err(case.name);
        assert_eq!(
            problems.len(),
            1,
            "{}: exactly one problem: {problems:?}",
            case.name
        );
        assert_eq!(problems[0].field, case.field, "{}", case.name);
        assert!(
            problems[0].message.contains(case.message),
            "{}: {:?} should contain {:?}",
            case.name,
            problems[0].message,
            case.message
        );
        assert!(
            problems[0].line.is_some(),
            "{}: a line for the field",
            case.name
        );
    }
}

#[test]
fn every_problem_is_reported_not_only_the_first() {
    let e = se("hosts: []\nports: [{number: 0, name: Bad_Name, protocol: FOO}]\nresolution: DNS")
        .unwrap_err();
    let fields: Vec<&str> = e.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "spec.hosts",
            "spec.ports[0].name",
            "spec.ports[0].number",
            "spec.ports[0].protocol"
        ],
        "{e:?}"
    );
}

/// An entry setting every field, up to its first endpoint; more endpoints may follow.
const FULL_HEAD: &str = "hosts: [api.example.com, www.example.com]
addresses: [10.9.0.1, 10.9.0.2/32, 10.10.0.0/16]
ports:
- {number: 443, name: https, protocol: HTTPS}
- {number: 80, name: http, protocol: http, targetPort: 8080}
- {number: 9000, name: grpc, protocol: GRPC}
location: MESH_INTERNAL
resolution: STATIC
endpoints:
- {address: 10.0.0.1, ports: {http: 8081}, labels: {version: v1}, locality: us/east/a, weight: 3, network: n1, serviceAccount: api}
";
/// The fields after the endpoints of [`FULL_HEAD`].
const FULL_TAIL: &str = "exportTo: [., other]
subjectAltNames: [spiffe://b, spiffe://a]";

#[test]
fn a_valid_entry_keeps_what_envoy_needs() {
    let v = se(&format!(
        "{FULL_HEAD}- {{address: 'unix:///var/run/api.sock'}}\n{FULL_TAIL}"
    ))
    .expect_err("a unix endpoint needs exactly one port");
    assert_eq!(v[0].0, "spec.endpoints[1].address");

    let v = se(&format!("{FULL_HEAD}{FULL_TAIL}")).unwrap();
    assert_eq!(v.hosts.len(), 2);
    assert_eq!(
        v.vips,
        [
            "10.9.0.1".parse::<IpAddr>().unwrap(),
            "10.9.0.2".parse().unwrap()
        ]
    );
    let ports: Vec<(&str, u16, Protocol, Option<u16>)> = v
        .ports
        .iter()
        .map(|p| (p.name.as_str(), p.port, p.protocol, p.target_port))
        .collect();
    assert_eq!(
        ports,
        [
            ("https", 443, Protocol::Tcp, None),
            ("http", 80, Protocol::Http, Some(8080)),
            ("grpc", 9000, Protocol::Grpc, None),
        ],
        "HTTPS is passed through as TCP"
    );
    let udp = se("hosts: [dns.example.com]\nports: [{number: 53, name: dns, protocol: UDP}, {number: 853, name: dot, protocol: TLS}]")
        .unwrap();
    assert_eq!(
        udp.ports.len(),
        1,
        "UDP has no listener here: {:?}",
        udp.ports
    );
    assert_eq!(
        (v.location, v.resolution),
        (MeshLocation::MeshInternal, Resolution::Static)
    );
    let ep = &v.endpoints[0];
    assert_eq!(ep.ports["http"], 8081);
    assert_eq!((ep.weight, ep.network.as_str()), (3, "n1"));
    assert_eq!(ep.locality, Locality::parse("us/east/a"));
    assert_eq!(v.subject_alt_names, ["spiffe://a", "spiffe://b"]);
    assert_eq!(v.export_to, [".", "other"]);
}

#[test]
fn defaults_are_istios() {
    let v = se("hosts: [a.example.com]\nports: [{number: 80, name: http}]").unwrap();
    assert_eq!(
        v.resolution,
        Resolution::Passthrough,
        "NONE is the default resolution"
    );
    assert_eq!(
        v.location,
        MeshLocation::MeshExternal,
        "MESH_EXTERNAL is the default"
    );
    assert_eq!(
        v.ports[0].protocol,
        crate::model::Protocol::Tcp,
        "unset protocol is opaque"
    );
}

#[test]
fn tributary_rejects_what_it_cannot_serve() {
    let e = se("hosts: ['*.example.com']\nports: [{number: 443, name: tls, protocol: TLS}]")
        .unwrap_err();
    assert!(e[0].1.contains("not supported by tributary"), "{e:?}");
    let e = se("hosts: ['*.example.com']\nports: [{number: 80, name: http, protocol: HTTP}]\nresolution: DYNAMIC_DNS")
        .unwrap_err();
    assert!(
        e.iter()
            .any(|(f, m)| f == "spec.resolution" && m.contains("DYNAMIC_DNS")),
        "{e:?}"
    );
    let e = se("hosts: [a.example.com]\nports: [{number: 80, name: http}]\nresolution: DNS\nendpoints: [{address: 'unix:///var/run/a.sock'}]")
        .unwrap_err();
    assert!(
        e[0].1.contains("not a valid FQDN"),
        "a DNS entry cannot resolve a socket: {e:?}"
    );
    let e = se("hosts: [a.example.com]\nports: [{number: 80, name: http}]\nresolution: STATIC\nendpoints: [{network: remote}]")
        .unwrap_err();
    assert!(e[0].1.contains("network gateways"), "{e:?}");
}

#[test]
fn export_to_follows_istio() {
    for bad in ["['.', shop]", "[a, a]", "['~', a]", "['Not_A_Namespace']"] {
        let spec =
            format!("hosts: [a.example.com]\nports: [{{number: 80, name: http}}]\nexportTo: {bad}");
        assert!(se(&spec).is_err(), "{bad} must be rejected");
    }
    for good in ["['~']", "['*']", "['.', other]", "[]"] {
        let spec = format!(
            "hosts: [a.example.com]\nports: [{{number: 80, name: http}}]\nexportTo: {good}"
        );
        assert!(se(&spec).is_ok(), "{good} is valid");
    }
}

#[test]
fn workload_entries_merge_labels_and_follow_istio_health_checks() {
    let we = |extra_meta: &str, status: &str| {
        let text = workload_entry(
            "vm-1",
            "shop",
            &[("app", "api"), ("version", "v2")],
            "address: 10.0.0.7\nlabels: {version: v1, zone: a}\nlocality: ''",
        )
        .replace("  labels:\n", &format!("{extra_meta}  labels:\n"))
            + status;
        match parsed(&text).result {
            Ok(Valid::WorkloadEntry(we)) => we,
            other => panic!("{other:?}"),
        }
    };
    let plain = we("", "");
    assert_eq!(
        plain.workload.labels["version"], "v2",
        "metadata labels win"
    );
    assert_eq!(plain.workload.labels["zone"], "a");
    assert_eq!(plain.workload.health, Health::Healthy);
    let checked = "  annotations: {proxy.istio.io/health-checks-enabled: 'true'}\n";
    assert_eq!(
        we(checked, "").workload.health,
        Health::Unhealthy,
        "unhealthy until probed"
    );
    let healthy = "status:\n  conditions: [{type: Healthy, status: 'True'}]\n";
    assert_eq!(we(checked, healthy).workload.health, Health::Healthy);

    let located = workload_entry(
        "vm-2",
        "shop",
        &[("topology.istio.io/locality", "us.east.b")],
        "address: vm2.example.com",
    );
    let Ok(Valid::WorkloadEntry(we)) = parsed(&located).result else {
        panic!()
    };
    assert_eq!(we.workload.locality, Locality::parse("us/east/b"));
    assert!(
        we.workload.dns_only(),
        "a named workload only joins DNS entries"
    );

    let bad = workload_entry("vm-3", "shop", &[], "address: ''\nports: {http: 70000}");
    let problems = parsed(&bad).result.unwrap_err();
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(fields, ["spec.address", "spec.ports.http"], "{problems:?}");
}

#[test]
fn metadata_must_be_what_kubernetes_accepts() {
    let text = service_entry(
        "Bad_Name",
        "shop",
        "hosts: [a.example.com]\nports: [{number: 80, name: http}]",
    )
    .replace(
        "  namespace: shop\n",
        "  namespace: shop\n  creationTimestamp: yesterday\n",
    );
    let problems = parsed(&text).result.unwrap_err();
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        ["metadata.name", "metadata.creationTimestamp"],
        "{problems:?}"
    );
}
