use super::*;
use crate::envoy::fixtures::{decode, ep, merged, port, with_resolution};
use crate::envoy::load_assignments_for;
use envoy_types::pb::envoy::config::core::v3::{address, socket_address::PortSpecifier};
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use prost::Message;
use tributary_registries::Protocol;

fn clusters(svc: &MergedService) -> (Vec<Cluster>, Vec<ConfigIssue>) {
    let mut issues = Vec::new();
    let out = clusters_for(svc, &GenerateOptions::default(), &mut issues);
    (out.iter().map(decode::<Cluster>).collect(), issues)
}

fn discovery_type(c: &Cluster) -> DiscoveryType {
    let Some(ClusterDiscoveryType::Type(t)) = c.cluster_discovery_type else {
        panic!("no discovery type")
    };
    DiscoveryType::try_from(t).unwrap()
}

/// `host:port` of every inline endpoint, in order.
fn inline_hosts(c: &Cluster) -> Vec<String> {
    let cla = c.load_assignment.as_ref().unwrap();
    cla.endpoints
        .iter()
        .flat_map(|l| &l.lb_endpoints)
        .map(|lb| {
            let Some(HostIdentifier::Endpoint(e)) = &lb.host_identifier else {
                panic!()
            };
            let Some(address::Address::SocketAddress(sa)) = &e.address.as_ref().unwrap().address
            else {
                panic!()
            };
            let Some(PortSpecifier::PortValue(p)) = sa.port_specifier else {
                panic!()
            };
            format!("{}:{p}", sa.address)
        })
        .collect()
}

#[test]
fn static_service_gets_one_eds_cluster_per_port_over_ads() {
    let svc = merged(
        "echo.demo.svc.cluster.local",
        vec![
            port("http", 80, Protocol::Http),
            port("tcp", 9000, Protocol::Tcp),
        ],
        vec![ep("10.0.0.1")],
    );
    let (cs, issues) = clusters(&svc);
    assert!(issues.is_empty());
    let names: Vec<&str> = cs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "outbound|80||echo.demo.svc.cluster.local",
            "outbound|9000||echo.demo.svc.cluster.local"
        ]
    );
    let c = &cs[0];
    assert_eq!(discovery_type(c), DiscoveryType::Eds);
    let eds = c.eds_cluster_config.as_ref().unwrap();
    assert_eq!(eds.service_name, c.name);
    assert_eq!(eds.eds_config, Some(ads()));
    assert!(c.load_assignment.is_none());
    assert_eq!(
        c.connect_timeout,
        Some(duration(std::time::Duration::from_secs(10)))
    );
    assert!(c.typed_extension_protocol_options.is_empty());
}

#[test]
fn http2_and_grpc_ports_speak_http2_upstream() {
    let svc = merged(
        "g.demo",
        vec![
            port("grpc", 9090, Protocol::Grpc),
            port("h2", 9091, Protocol::Http2),
            port("http", 80, Protocol::Http),
        ],
        vec![],
    );
    let (cs, _) = clusters(&svc);
    for c in &cs[..2] {
        let opts = &c.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS_KEY];
        assert_eq!(
            opts.type_url,
            "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
        );
        let decoded = HttpProtocolOptions::decode(opts.value.as_slice()).unwrap();
        assert_eq!(decoded, http2_options());
    }
    assert!(cs[2].typed_extension_protocol_options.is_empty());
}

#[test]
fn dns_service_is_strict_dns_with_inline_endpoints_on_their_ports() {
    // REG-17: DNS resolution means no EDS.
    let mut named = ep("api.example.com");
    named.ports.insert("https".to_string(), 8443);
    let svc = with_resolution(
        merged(
            "api.example.com",
            vec![port("https", 443, Protocol::Tcp)],
            vec![named, ep("10.0.0.9"), ep("unix:///sock")],
        ),
        Resolution::Dns,
    );
    let (cs, issues) = clusters(&svc);
    assert_eq!(discovery_type(&cs[0]), DiscoveryType::StrictDns);
    assert!(cs[0].eds_cluster_config.is_none());
    assert_eq!(
        inline_hosts(&cs[0]),
        ["10.0.0.9:443", "api.example.com:8443"]
    );
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].field, "endpoints[2].address");
    let mut no_eds = Vec::new();
    assert!(load_assignments_for(&svc, &GenerateOptions::default(), &mut no_eds).is_empty());
}

#[test]
fn dns_service_without_endpoints_is_an_empty_strict_dns_cluster() {
    let svc = with_resolution(
        merged(
            "gone.example.com",
            vec![port("http", 80, Protocol::Http)],
            vec![],
        ),
        Resolution::Dns,
    );
    let (cs, issues) = clusters(&svc);
    assert_eq!(discovery_type(&cs[0]), DiscoveryType::StrictDns);
    assert!(inline_hosts(&cs[0]).is_empty());
    assert!(issues.is_empty());
}

#[test]
fn dns_round_robin_keeps_exactly_one_endpoint() {
    let svc = with_resolution(
        merged(
            "one.example.com",
            vec![port("http", 80, Protocol::Http)],
            vec![ep("b.example.com"), ep("a.example.com")],
        ),
        Resolution::DnsRoundRobin,
    );
    let (cs, issues) = clusters(&svc);
    assert_eq!(discovery_type(&cs[0]), DiscoveryType::LogicalDns);
    // The first in registry order, not the first alphabetically.
    assert_eq!(inline_hosts(&cs[0]), ["b.example.com:80"]);
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0].object, "one.example.com");
}

#[test]
fn dns_round_robin_without_endpoints_falls_back_to_empty_strict_dns() {
    // Envoy rejects LOGICAL_DNS without exactly one host (tests/e2e/envoy_validate.rs checks it); INV-7.
    let svc = with_resolution(
        merged(
            "none.example.com",
            vec![port("http", 80, Protocol::Http)],
            vec![],
        ),
        Resolution::DnsRoundRobin,
    );
    let (cs, issues) = clusters(&svc);
    assert_eq!(discovery_type(&cs[0]), DiscoveryType::StrictDns);
    assert!(inline_hosts(&cs[0]).is_empty());
    assert!(
        issues[0]
            .message
            .contains("pilot_dns_cluster_without_endpoints")
    );
}

#[test]
fn passthrough_is_original_dst_with_cluster_provided_lb() {
    let svc = with_resolution(
        merged(
            "h.demo",
            vec![port("tcp", 3306, Protocol::Tcp)],
            vec![ep("10.0.0.1")],
        ),
        Resolution::Passthrough,
    );
    let (cs, _) = clusters(&svc);
    assert_eq!(discovery_type(&cs[0]), DiscoveryType::OriginalDst);
    assert_eq!(cs[0].lb_policy, LbPolicy::ClusterProvided as i32);
    assert!(cs[0].load_assignment.is_none() && cs[0].eds_cluster_config.is_none());
    assert!(cs[0].lb_config.is_none(), "no target port, no override");
}

#[test]
fn passthrough_target_port_becomes_the_upstream_port_override() {
    // REG-17 / docs/ecosystem.md §4: NONE resolution + targetPort → ORIGINAL_DST
    // upstream_port_override.
    let mut tcp = port("tcp", 3306, Protocol::Tcp);
    tcp.target_port = Some(13306);
    let mut same = port("tcp-same", 5432, Protocol::Tcp);
    same.target_port = Some(5432);
    let svc = with_resolution(
        merged("h.demo", vec![tcp, same], vec![]),
        Resolution::Passthrough,
    );
    let (cs, issues) = clusters(&svc);
    assert!(issues.is_empty(), "{issues:?}");
    let Some(LbConfig::OriginalDstLbConfig(o)) = &cs[0].lb_config else {
        panic!("ORIGINAL_DST config on port 3306: {:?}", cs[0].lb_config)
    };
    assert_eq!(
        o.upstream_port_override.as_ref().map(|v| v.value),
        Some(13306)
    );
    assert!(
        !o.use_http_header,
        "the destination is never taken from a header"
    );
    assert!(
        cs[1].lb_config.is_none(),
        "a target port equal to the port needs no override"
    );
}

#[test]
fn a_target_port_is_the_default_endpoint_port_of_eds_and_dns_clusters() {
    // Istio's order for a WorkloadEntry's port: its own port > targetPort > the port number.
    let mut http = port("http", 80, Protocol::Http);
    http.target_port = Some(8080);
    let mut named = ep("api.example.com");
    named.ports.insert("http".into(), 9090);
    let svc = with_resolution(
        merged(
            "dns.demo",
            vec![http],
            vec![ep("backend.example.com"), named],
        ),
        Resolution::Dns,
    );
    let (cs, _) = clusters(&svc);
    assert_eq!(discovery_type(&cs[0]), DiscoveryType::StrictDns);
    assert_eq!(
        inline_hosts(&cs[0]),
        ["api.example.com:9090", "backend.example.com:8080"]
    );
}

#[test]
fn connect_timeout_comes_from_options() {
    let svc = merged("a.demo", vec![port("http", 80, Protocol::Http)], vec![]);
    let opts = GenerateOptions {
        connect_timeout: std::time::Duration::from_millis(250),
        ..Default::default()
    };
    let c: Cluster = decode(&clusters_for(&svc, &opts, &mut Vec::new())[0]);
    let t = c.connect_timeout.unwrap();
    assert_eq!((t.seconds, t.nanos), (0, 250_000_000));
}

#[test]
fn encoding_is_byte_identical_across_runs() {
    // SOTW-7: versions are content hashes compared across replicas.
    let svc = merged(
        "g.demo",
        vec![port("grpc", 9090, Protocol::Grpc)],
        vec![ep("10.0.0.1")],
    );
    let opts = GenerateOptions::default();
    let a = clusters_for(&svc, &opts, &mut Vec::new());
    let b = clusters_for(&svc.clone(), &opts, &mut Vec::new());
    assert_eq!(a, b);
    assert_eq!(a[0].version, b[0].version);
}
