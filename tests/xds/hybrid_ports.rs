//! A hybrid hostname merged from four registries, each naming its port its own way, in process:
//! the fake Kubernetes API server (`http-web` 80, pods on 8080), the fake Consul (`http` on 9090,
//! named after `Meta.protocol`), a ServiceEntry file (`port-80`, target port 8888) and a mock
//! registry whose only port (`tcp-legacy` 7000) matches nothing. Every endpoint keeps the port it
//! was registered on, and the one that cannot be mapped is left out and reported (HYB-1..HYB-4 in
//! docs/hybrid-ports.md).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::endpoint::v3::lb_endpoint::HostIdentifier;
use prost::Message;
use tributary::config::Config;
use tributary::envoy::ResourceType;
use tributary_registries::consul::fake::{FakeConsul, Instance};
use tributary_registries::kubernetes::fake::FakeApiServer;
use tributary_registries::kubernetes::fake::objects::{self, SliceEndpoint};

use crate::support;
use crate::support::harness::{eventually, http_get};

const HOST: &str = "web.shop.svc.cluster.local";
const CLUSTER: &str = "outbound|80||web.shop.svc.cluster.local";
const LIMIT: Duration = Duration::from_secs(20);

const SERVICE_ENTRY: &str = "\
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: web-vms, namespace: shop}
spec:
  hosts: [web.shop.svc.cluster.local]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{name: port-80, number: 80, protocol: HTTP, targetPort: 8888}]
  endpoints: [{address: 10.3.0.1}]
";

const MOCK: &str = "\
services:
  - hostname: web.shop.svc.cluster.local
    ports: [{name: tcp-legacy, port: 7000, protocol: TCP}]
    endpoints:
      - {address: 10.4.0.1, ports: {tcp-legacy: 7000}}
";

/// `address:port` of every endpoint in the CLA.
fn endpoints(cla: &ClusterLoadAssignment) -> Vec<String> {
    let mut out: Vec<String> = cla
        .endpoints
        .iter()
        .flat_map(|l| &l.lb_endpoints)
        .filter_map(|lb| match &lb.host_identifier {
            Some(HostIdentifier::Endpoint(e)) => e.address.as_ref(),
            _ => None,
        })
        .filter_map(|a| match &a.address {
            Some(envoy_types::pb::envoy::config::core::v3::address::Address::SocketAddress(s)) => {
                let port = match s.port_specifier {
                    Some(envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier::PortValue(p)) => p,
                    _ => 0,
                };
                Some(format!("{}:{port}", s.address))
            }
            _ => None,
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_registry_keeps_its_own_port_and_an_unmatched_endpoint_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let kube = FakeApiServer::start().await.expect("fake API server");
    let kubeconfig = dir.path().join("kubeconfig.yaml");
    kube.write_kubeconfig(&kubeconfig).unwrap();
    kube.apply(&objects::node("node-a", "us-east", "us-east-1a"))
        .unwrap();
    kube.apply(&objects::service(
        "shop",
        "web",
        "10.96.0.10",
        &[("http-web", 80)],
    ))
    .unwrap();
    kube.apply(&objects::pod(
        "shop",
        "web-0",
        &[("app", "web")],
        "web",
        "node-a",
    ))
    .unwrap();
    kube.apply(&objects::endpoint_slice(
        "shop",
        "web-abc",
        "web",
        &[("http-web", 8080)],
        &[SliceEndpoint::ready("10.1.0.1").pod("web-0").node("node-a")],
    ))
    .unwrap();

    let consul = FakeConsul::start().await;
    consul.register(Instance::new("web", "vm-1", "10.2.0.1", 9090).meta("protocol", "http"));

    let se_dir = dir.path().join("se");
    std::fs::create_dir(&se_dir).unwrap();
    std::fs::write(se_dir.join("web.yaml"), SERVICE_ENTRY).unwrap();
    let mock = dir.path().join("mesh.yaml");
    std::fs::write(&mock, MOCK).unwrap();

    let yaml = format!(
        "debounce: {{debounce_after: 20ms, debounce_max: 1s}}\n\
         registries:\n\
         - type: kubernetes\n  name: kube\n  cluster_id: c1\n  kubeconfig: {kubeconfig}\n\
         - type: consul\n  name: consul\n  address: {consul}\n  hostname_template: \"{{service}}.shop.svc.cluster.local\"\n\
         - type: service_entry\n  name: se\n  directory: {se}\n\
         - type: mock\n  name: legacy\n  file: {mock}\n",
        kubeconfig = kubeconfig.display(),
        consul = consul.url(),
        se = se_dir.display(),
        mock = mock.display(),
    );
    let path = dir.path().join("tributary.yaml");
    std::fs::write(&path, yaml).unwrap();
    let config = Config {
        xds_addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        ..Config::from_file(&path).expect("config parses and is valid")
    };
    let running = support::start_runtime(config).await;

    // HYB-3: Consul's `http` on 9090 by protocol; HYB-2: the ServiceEntry's `port-80` by number,
    // on its target port 8888; the pods on 8080 as Kubernetes said. Nothing on 80.
    let want = ["10.1.0.1:8080", "10.2.0.1:9090", "10.3.0.1:8888"];
    let store = running.store.clone();
    let got = eventually(LIMIT, "the merged CLA from three registries", || {
        let store = store.clone();
        async move {
            let snapshot = store.load()?;
            let entry = snapshot.resources(ResourceType::Endpoint).get(CLUSTER)?;
            let cla =
                ClusterLoadAssignment::decode(entry.resource.to_any().value.as_slice()).ok()?;
            let eps = endpoints(&cla);
            (eps.len() >= want.len()).then_some(eps)
        }
    })
    .await;
    assert_eq!(got, want, "HYB-1..3: every endpoint on its own port");

    // HYB-4: the mock's TCP endpoint matches no port of the service; it is reported, never sent.
    let admin = running.admin_addr;
    let report = eventually(
        LIMIT,
        "the unmapped endpoint in /debug/push_status",
        || async move {
            let (status, body) = http_get(admin, "localhost", "/debug/push_status").await?;
            (status == 200 && body.contains("10.4.0.1")).then_some(body)
        },
    )
    .await;
    assert!(report.contains(CLUSTER), "{report}");
    assert!(report.contains("registry legacy"), "{report}");
    assert!(report.contains(HOST), "{report}");
    running.stop().await;
}
