//! tributary as an MCP config source for istiod, end to end: the real binary reads a mock file and
//! the fake Consul, and a test MCP client built from Istio's generated types (`support::mcp`)
//! reads every collection over ADS, SotW and delta, and decodes every ServiceEntry and
//! WorkloadEntry against what the registries hold (`docs/mcp.md`, "Serve"). No Envoy needed.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use tributary_registries::consul::fake::{FakeConsul, Instance};

use crate::support::harness::{Tributary, free_port, loopback};
use crate::support::mcp::{Holdings, McpClient, Mode, SE, WE};
use crate::support::raw_ads::{connect, node, open};
use crate::support::type_url::CDS;

/// Generous bound for one response on a loaded box; only paid when a test is about to fail.
const LIMIT: Duration = Duration::from_secs(10);
/// How long an Envoy-style client listens to be sure no collection comes.
const QUIET: Duration = Duration::from_millis(1500);

/// The ServiceEntries of the first test, whose `default_namespace` is `shop`.
const CONSUL_SE: &str = "shop/consul-web.service.consul";
const MOCK_SE: &str = "shop/mock-pay.mock.internal";

/// The mock file: a service with a healthy and an unhealthy endpoint, and one Kubernetes-style
/// hostname that the default `skip_host_suffixes` leaves out.
fn mock_yaml() -> &'static str {
    "services:\n\
     - hostname: pay.mock.internal\n\
     \x20 ports: [{name: http, port: 8080, protocol: HTTP}, {name: grpc, port: 9090, protocol: GRPC}]\n\
     \x20 labels: {team: payments}\n\
     \x20 endpoints:\n\
     \x20   - {address: 10.1.0.1, labels: {version: v1}, locality: eu/west-1, network: net-a, weight: 2, ports: {http: 18080}}\n\
     \x20   - {address: 10.1.0.2, health: unhealthy}\n\
     - hostname: reviews.default.svc.cluster.local\n\
     \x20 ports: [{name: http, port: 9080, protocol: HTTP}]\n\
     \x20 endpoints: [{address: 10.2.0.1}]\n"
}

fn write_config(dir: &Path, consul: &FakeConsul, mcp: &str) -> String {
    let mesh = dir.join("mesh.yaml");
    std::fs::write(&mesh, mock_yaml()).expect("write mesh");
    let config = dir.join("tributary.yaml");
    std::fs::write(
        &config,
        format!(
            "registries:\n  - {{type: mock, file: {}}}\n  - {{type: consul, address: {}}}\n{mcp}",
            mesh.display(),
            consul.url()
        ),
    )
    .expect("write config");
    config.display().to_string()
}

async fn start(dir: &Path, config: &str) -> Tributary {
    let args = ["--config", config];
    Tributary::start(dir, loopback(free_port()), loopback(free_port()), &args).await
}

fn web(id: &str, ip: &str) -> Instance {
    Instance::new("web", id, ip, 7000).meta("protocol", "http")
}

/// Neither the mock file nor Consul gives a namespace: services get `mcp.default_namespace`.
const MCP_ON: &str = "mcp: {enabled: true, default_namespace: shop}\n";

fn consul_endpoints(held: &Holdings) -> Vec<String> {
    held.get(SE)
        .and_then(|s| s.get(CONSUL_SE))
        .map(|h| {
            let mut ips: Vec<String> = h
                .service_entry()
                .endpoints
                .iter()
                .map(|e| e.address.clone())
                .collect();
            ips.sort();
            ips
        })
        .unwrap_or_default()
}

/// Checks the decoded ServiceEntries against the registries' services.
fn check_service_entries(held: &Holdings) {
    let ses = &held[SE];
    let names: Vec<&str> = ses.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [CONSUL_SE, MOCK_SE],
        "one per hostname, the .svc.cluster.local one left out"
    );
    let pay = &ses[MOCK_SE];
    let meta = pay.resource.metadata.as_ref().unwrap();
    assert_eq!(meta.labels["team"], "payments");
    assert_eq!(meta.annotations["tributary.io/registry"], "mock");
    let se = pay.service_entry();
    assert_eq!(se.hosts, ["pay.mock.internal"]);
    assert_eq!(se.resolution, 1, "STATIC");
    let ports: Vec<String> = (se.ports.iter())
        .map(|p| format!("{} {} {}", p.number, p.name, p.protocol))
        .collect();
    assert_eq!(ports, ["8080 http HTTP", "9090 grpc GRPC"]);
    assert_eq!(se.endpoints.len(), 1, "only the healthy endpoint");
    let e = &se.endpoints[0];
    assert_eq!(e.address, "10.1.0.1");
    assert_eq!(e.ports["http"], 18080);
    assert_eq!(e.ports["grpc"], 9090);
    assert_eq!(e.labels["version"], "v1");
    assert_eq!(e.locality, "eu/west-1");
    assert_eq!(e.network, "net-a");
    assert_eq!(e.weight, 2);
    let web = ses[CONSUL_SE].service_entry();
    assert_eq!(web.hosts, ["web.service.consul"]);
    assert_eq!(web.ports[0].number, 7000);
    assert_eq!(web.ports[0].protocol, "HTTP");
    assert!(held[WE].is_empty(), "inline mode: no WorkloadEntries");
    for empty in [
        "networking.istio.io/v1alpha3/DestinationRule",
        "networking.istio.io/v1alpha3/VirtualService",
    ] {
        assert!(held[empty].is_empty(), "{empty} is answered, empty");
    }
}

// Every collection is answered (SOTW-24: full state, even empty), SotW and delta hold the same
// resources at the same versions (DELTA-13), and a Consul instance added appears as a
// ServiceEntry update on both streams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_collections_carry_every_registry_service_in_sotw_and_delta() {
    let dir = tempfile::tempdir().unwrap();
    let consul = FakeConsul::start().await;
    consul.register(web("web-1", "10.3.0.1"));
    let t = start(dir.path(), &write_config(dir.path(), &consul, MCP_ON)).await;

    let mut sotw = McpClient::open(t.xds, Mode::Sotw, "istiod-sotw").await;
    sotw.until_all_answered(LIMIT).await;
    let mut delta = McpClient::open(t.xds, Mode::Delta, "istiod-delta").await;
    delta.until_all_answered(LIMIT).await;
    check_service_entries(&sotw.held);
    check_service_entries(&delta.held);
    assert_eq!(sotw.held, delta.held, "SotW and delta hold the same");
    assert_eq!(consul_endpoints(&sotw.held), ["10.3.0.1"]);

    let added = Instant::now();
    consul.register(web("web-2", "10.3.0.2"));
    let both = ["10.3.0.1".to_string(), "10.3.0.2".to_string()];
    sotw.until(LIMIT, "ServiceEntry update (SotW)", |h| {
        consul_endpoints(h) == both
    })
    .await;
    let sotw_took = added.elapsed();
    delta
        .until(LIMIT, "ServiceEntry update (delta)", |h| {
            consul_endpoints(h) == both
        })
        .await;
    let delta_took = added.elapsed();
    println!(
        "Consul instance added -> ServiceEntry update: SotW {sotw_took:?}, delta {delta_took:?}"
    );
    assert_eq!(sotw.held, delta.held);
}

// Two replicas on the same registries serve the same versions (TRANS-12), WorkloadEntries mode
// included; with MCP off the collections are unknown types, ignored as before (SOTW-5), and an
// Envoy-style stream never sees them either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_agree_and_envoy_streams_never_see_collections() {
    let dir_a = tempfile::tempdir().unwrap();
    let dir_b = tempfile::tempdir().unwrap();
    let consul = FakeConsul::start().await;
    consul.register(web("web-1", "10.3.0.1"));
    consul.register(web("web-2", "10.3.0.2"));
    let mcp = "mcp: {enabled: true, endpoints: workload_entries}\n";
    let a = start(dir_a.path(), &write_config(dir_a.path(), &consul, mcp)).await;
    let b = start(dir_b.path(), &write_config(dir_b.path(), &consul, mcp)).await;
    let mut held = Vec::new();
    for t in [&a, &b] {
        let mut c = McpClient::open(t.xds, Mode::Sotw, "istiod").await;
        c.until(LIMIT, "both Consul WorkloadEntries", |h| {
            h.get(WE).is_some_and(|w| w.len() == 3) && h.len() == 4
        })
        .await;
        held.push((c.versions.clone(), c.held.clone()));
    }
    assert_eq!(
        held[0], held[1],
        "same versions and content on both replicas"
    );
    let (_, h) = &held[0];
    let we_names: Vec<&str> = h[WE].keys().map(String::as_str).collect();
    assert_eq!(
        we_names,
        [
            "default/consul-web.service.consul-10.3.0.1",
            "default/consul-web.service.consul-10.3.0.2",
            "default/mock-pay.mock.internal-10.1.0.1",
        ]
    );
    let se = h[SE]["default/consul-web.service.consul"].service_entry();
    assert!(se.endpoints.is_empty(), "endpoints are WorkloadEntries");
    let selector = &se.workload_selector.expect("selector").labels;
    let we = h[WE]["default/consul-web.service.consul-10.3.0.2"].workload_entry();
    assert_eq!(
        we.labels["tributary.io/service"],
        selector["tributary.io/service"]
    );
    assert_eq!(we.address, "10.3.0.2");
    assert_eq!(we.ports["http"], 7000);

    // An Envoy-style stream on the MCP-serving replica: only what it asked for.
    envoy_sees_only_clusters(a.xds, &[]).await;
    // MCP off: a collection request is ignored (SOTW-5), the stream keeps working.
    let dir_c = tempfile::tempdir().unwrap();
    let off = start(dir_c.path(), &write_config(dir_c.path(), &consul, "")).await;
    envoy_sees_only_clusters(off.xds, &[SE, WE]).await;
}

/// Opens ADS for CDS, then asks for `also`; every response within a while must be CDS.
async fn envoy_sees_only_clusters(xds: SocketAddr, also: &[&str]) {
    let ch = connect(xds).await.expect("connects");
    let (tx, mut rx) = open(ch, node("envoy")).await.expect("ADS opens");
    for url in also {
        let req = envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest {
            type_url: url.to_string(),
            ..Default::default()
        };
        tx.send(req).await.expect("buffer has room");
    }
    let mut cds = 0;
    let deadline = Instant::now() + QUIET;
    while let Ok(Ok(Some(resp))) =
        tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), rx.message()).await
    {
        assert_eq!(
            resp.type_url, CDS,
            "an Envoy stream only gets what it asked for"
        );
        cds += 1;
    }
    assert!(cds >= 1, "CDS is answered, the collections are not");
}
