//! What an operator reaches for first, against the real binary and a real Envoy (issue 19):
//! the Istio Control Plane dashboard's queries have series in `/metrics`, and
//! `/debug/config_dump` is an `envoy.admin.v3.ConfigDump` that matches Envoy's own dump of the
//! same proxy resource by resource. Run: `cargo test --test e2e operability::` (needs `envoy` on PATH
//! or `ENVOY_BIN`).

#![allow(clippy::unwrap_used)] // test setup: a failure is the test failing

use std::collections::BTreeMap;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use serde_json::Value;
use tributary::envoy::json::from_json;
use tributary_registries::kubernetes::fake::FakeApiServer;
use tributary_registries::kubernetes::fake::objects::{self, SliceEndpoint};

use crate::support::harness;
use crate::support::harness::{
    Backend, Envoy, Tributary, eventually, free_port, loopback, mesh, tls_service_entry,
};

/// A sidecar-style node id, so `pod.namespace` lookups are exercised on a real proxy.
const NODE: &str = "sidecar~127.0.0.1~web-1.shop~shop.svc.cluster.local";

/// The Istio Control Plane dashboard's (`pilot-dashboard.gen.json`) Prometheus queries that
/// concern the control plane process, each as the series selector `/metrics` must answer.
/// Left out: `container_*` (cAdvisor, per container, not exported by the process itself),
/// `go_*` (Go runtime; the `process_*` family below stands for them), `galley_validation_*` and
/// `sidecar_injection_*` (istiod's webhooks, which tributary does not run). The Envoy-side query,
/// `envoy_cluster_upstream_cx_active{cluster_name="xds-grpc"}`, is checked on Envoy below.
const DASHBOARD_SERIES: &[(&str, &str)] = &[
    (
        "sum by (tag) (istio_build{component=\"pilot\"})",
        "istio_build{component=\"pilot\",tag=\"",
    ),
    (
        "sum by (type) (irate(pilot_xds_pushes[$__rate_interval]))",
        "pilot_xds_pushes{type=\"",
    ),
    (
        "sum by (type,event) (rate(pilot_k8s_reg_events[$__rate_interval]))",
        "pilot_k8s_reg_events{",
    ),
    (
        "sum by (type,event) (rate(pilot_k8s_cfg_events[$__rate_interval]))",
        "pilot_k8s_cfg_events{",
    ),
    (
        "sum by (type) (rate(pilot_push_triggers[$__rate_interval]))",
        "pilot_push_triggers{type=\"",
    ),
    ("sum (pilot_xds)", "pilot_xds "),
    (
        "sum by (type) (pilot_total_xds_rejects)",
        "pilot_total_xds_rejects{type=\"",
    ),
    (
        "pilot_total_xds_internal_errors",
        "pilot_total_xds_internal_errors{",
    ),
    (
        "sum(rate(pilot_xds_push_time_bucket{}[$__rate_interval])) by (le)",
        "pilot_xds_push_time_bucket{",
    ),
    (
        "sum(rate(pilot_xds_config_size_bytes_bucket{}[$__rate_interval])) by (le)",
        "pilot_xds_config_size_bytes_bucket{",
    ),
];

/// What the issue adds beyond the dashboard: process metrics, convergence, inbound updates.
const EXTRA_SERIES: &[&str] = &[
    "process_cpu_seconds_total ",
    "process_resident_memory_bytes ",
    "process_open_fds ",
    "process_threads ",
    "pilot_proxy_convergence_time_bucket{",
    "pilot_inbound_updates{type=\"eds\"}",
    "pilot_inbound_updates{type=\"svc\"}",
    "pilot_push_triggers{type=\"endpoint\"}",
    "tributary_registry_changes{",
];

struct Mesh {
    _dir: tempfile::TempDir,
    _api: FakeApiServer,
    _backends: Vec<Backend>,
    mock: std::path::PathBuf,
    web_port: u16,
    tributary: Tributary,
    envoy: Envoy,
}

/// tributary with Kubernetes (fake API server), ServiceEntry files and a mock file, and an Envoy
/// that has taken its config.
async fn start() -> Mesh {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let api = FakeApiServer::start().await.expect("fake API server");
    let kubeconfig = root.join("kubeconfig.yaml");
    api.write_kubeconfig(&kubeconfig).unwrap();
    api.apply(&objects::service(
        "shop",
        "web",
        "10.96.0.10",
        &[("http", 80)],
    ))
    .unwrap();
    let pod = Backend::start("pod").await;
    api.apply(&objects::endpoint_slice(
        "shop",
        "web-a",
        "web",
        &[("http", pod.addr.port())],
        &[SliceEndpoint::ready(&pod.addr.ip().to_string())],
    ))
    .unwrap();
    let se_dir = root.join("istio");
    std::fs::create_dir(&se_dir).unwrap();
    std::fs::write(se_dir.join("ext.yaml"), tls_service_entry(443)).unwrap();
    let vm = Backend::start("vm").await;
    let web_port = free_port();
    let mock = root.join("mesh.yaml");
    std::fs::write(&mock, mesh(web_port, &[vm.addr])).unwrap();
    let config = root.join("tributary.yaml");
    std::fs::write(
        &config,
        format!(
            "registries:\n\
             - {{type: kubernetes, name: kube, cluster_id: c1, kubeconfig: {}}}\n\
             - {{type: service_entry, name: istio, directory: {}}}\n\
             - {{type: mock, name: vms, file: {}}}\n",
            kubeconfig.display(),
            se_dir.display(),
            mock.display()
        ),
    )
    .unwrap();
    let config_arg = config.display().to_string();
    let tributary = Tributary::start(
        root,
        loopback(free_port()),
        loopback(free_port()),
        &["--config", &config_arg],
    )
    .await;
    let mut envoy = Envoy::start(
        root,
        NODE,
        tributary.xds,
        &["--listener-address", "127.0.0.1"],
    )
    .await;
    envoy.wait_live().await;
    Mesh {
        _dir: dir,
        _api: api,
        _backends: vec![pod, vm],
        mock,
        web_port,
        tributary,
        envoy,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_dashboard_queries_have_series() {
    let m = start().await;
    // An endpoint-only change (a VM added) after Envoy is connected: an `eds` inbound update, an
    // `endpoint` push trigger, and a change-driven push that records convergence.
    let extra = Backend::start("vm2").await;
    let vm = m._backends[1].addr;
    harness::replace_file(&m.mock, &mesh(m.web_port, &[vm, extra.addr]));
    let metrics = eventually(
        Duration::from_secs(20),
        "the endpoint change's metrics",
        || async {
            let text = m.tributary.get("/metrics").await;
            (text.contains("pilot_inbound_updates{type=\"eds\"}")
                && text.contains("pilot_proxy_convergence_time_bucket{"))
            .then_some(text)
        },
    )
    .await;
    let missing: Vec<&str> = DASHBOARD_SERIES
        .iter()
        .filter(|(_, series)| !metrics.contains(series))
        .map(|(query, _)| *query)
        .chain(
            EXTRA_SERIES
                .iter()
                .copied()
                .filter(|s| !metrics.contains(s)),
        )
        .collect();
    assert!(
        missing.is_empty(),
        "no series for {missing:?} in:\n{metrics}"
    );
    // Every family is described.
    for line in metrics.lines().filter(|l| l.starts_with("# TYPE ")) {
        let family = line.split_whitespace().nth(2).unwrap();
        assert!(
            metrics.contains(&format!("# HELP {family} ")),
            "{family} has no HELP"
        );
    }
    // The Envoy side of the Connections panel: its xDS cluster is `xds-grpc`.
    assert_eq!(m.envoy.stat("cluster.xds-grpc.upstream_cx_active").await, 1);
}

/// `(name, resource JSON)` of one section of a ConfigDump, whichever dump printed it.
fn section(dump: &Value, dump_type: &str) -> BTreeMap<String, Value> {
    let Some(config) = dump["configs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["@type"] == format!("type.googleapis.com/envoy.admin.v3.{dump_type}"))
    else {
        return BTreeMap::new();
    };
    let (list, inner): (&str, &[&str]) = match dump_type {
        "ClustersConfigDump" => ("dynamic_active_clusters", &["cluster"]),
        "ListenersConfigDump" => ("dynamic_listeners", &["active_state", "listener"]),
        "RoutesConfigDump" => ("dynamic_route_configs", &["route_config"]),
        _ => ("dynamic_endpoint_configs", &["endpoint_config"]),
    };
    let camel = |s: &str| {
        let mut out = String::new();
        let mut up = false;
        for c in s.chars() {
            match (c, up) {
                ('_', _) => up = true,
                (c, true) => {
                    out.extend(c.to_uppercase());
                    up = false
                }
                (c, false) => out.push(c),
            }
        }
        out
    };
    // Envoy prints snake_case field names, tributary proto3 JSON camelCase; both are valid.
    let field = |v: &Value, f: &str| v.get(f).or_else(|| v.get(camel(f))).cloned();
    field(config, list)
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|item| inner.iter().try_fold(item, |v, f| field(&v, f)))
        .map(|r| {
            let name = r["name"]
                .as_str()
                .or(r["clusterName"].as_str())
                .or(r["cluster_name"].as_str())
                .unwrap_or_default()
                .to_string();
            (name, r)
        })
        .collect()
}

/// `ip:port` of an LbEndpoint.
fn socket_address(e: &envoy_types::pb::envoy::config::endpoint::v3::LbEndpoint) -> String {
    use envoy_types::pb::envoy::config::core::v3::address::Address;
    use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
    use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
    let Some(HostIdentifier::Endpoint(ep)) = &e.host_identifier else {
        return String::new();
    };
    match ep.address.as_ref().and_then(|a| a.address.as_ref()) {
        Some(Address::SocketAddress(s)) => match s.port_specifier {
            Some(PortSpecifier::PortValue(p)) => format!("{}:{p}", s.address),
            _ => s.address.clone(),
        },
        _ => String::new(),
    }
}

fn parse<M: prost::Message + prost::Name + Default>(v: &Value) -> M {
    let mut v = v.clone();
    if let Value::Object(m) = &mut v {
        m.remove("@type");
    }
    from_json::<M>(v.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("{} does not parse: {e}\n{v:#}", M::full_name()))
}

fn same<M: prost::Message + prost::Name + Default + PartialEq + std::fmt::Debug>(
    ours: &BTreeMap<String, Value>,
    envoys: &BTreeMap<String, Value>,
) {
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        envoys.keys().collect::<Vec<_>>(),
        "{} names",
        M::full_name()
    );
    for (name, ours) in ours {
        assert_eq!(
            parse::<M>(ours),
            parse::<M>(&envoys[name]),
            "{} {name}",
            M::full_name()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_dump_matches_envoys_own_resource_by_resource() {
    let m = start().await;
    let envoy_dump = m.envoy.config_dump().await;
    let path = "/debug/config_dump?proxyID=web-1.shop&include_eds";
    let ours: Value = serde_json::from_str(&m.tributary.get(path).await).expect("JSON");
    // The whole dump parses with Envoy's own types.
    let typed: envoy_types::pb::envoy::admin::v3::ConfigDump =
        from_json(ours.to_string().as_bytes()).expect("an envoy.admin.v3.ConfigDump");
    assert_eq!(typed.configs.len(), 4);
    same::<Cluster>(
        &section(&ours, "ClustersConfigDump"),
        &section(&envoy_dump, "ClustersConfigDump"),
    );
    same::<Listener>(
        &section(&ours, "ListenersConfigDump"),
        &section(&envoy_dump, "ListenersConfigDump"),
    );
    same::<RouteConfiguration>(
        &section(&ours, "RoutesConfigDump"),
        &section(&envoy_dump, "RoutesConfigDump"),
    );
    // Envoy rebuilds its endpoint dump from its host sets (adding defaults); compare what it
    // received: cluster names and endpoint addresses.
    let endpoints = |dump: &Value| -> BTreeMap<String, Vec<String>> {
        section(dump, "EndpointsConfigDump")
            .iter()
            .map(|(name, v)| {
                let cla: ClusterLoadAssignment = parse(v);
                let mut addrs: Vec<String> = cla
                    .endpoints
                    .iter()
                    .flat_map(|l| &l.lb_endpoints)
                    .map(socket_address)
                    .collect();
                addrs.sort();
                (name.clone(), addrs)
            })
            .collect()
    };
    // Envoy lists an endpoint section for every cluster, DNS ones included (resolved by itself,
    // not received); what it received over EDS is its EDS clusters' assignments.
    let eds_clusters: Vec<String> = section(&envoy_dump, "ClustersConfigDump")
        .into_iter()
        .filter(|(_, v)| {
            use envoy_types::pb::envoy::config::cluster::v3::cluster::{
                ClusterDiscoveryType, DiscoveryType,
            };
            parse::<Cluster>(v).cluster_discovery_type
                == Some(ClusterDiscoveryType::Type(DiscoveryType::Eds as i32))
        })
        .map(|(name, _)| name)
        .collect();
    let mut envoy_eds = endpoints(&envoy_dump);
    envoy_eds.retain(|name, _| eds_clusters.contains(name));
    let ours_eds = endpoints(&ours);
    assert!(!ours_eds.is_empty(), "{ours:#}");
    assert_eq!(ours_eds, envoy_eds);
    assert!(!section(&ours, "ClustersConfigDump").is_empty());
}
