//! The ServiceEntry registry end to end: Istio manifests in, Envoy clusters out.
//!
//! - In-process: each resolution's Envoy cluster type, from the registry's real output through
//!   the generator (REG-17).
//! - With the real Envoy (H-ENVOY): a STATIC entry whose endpoint is a local HTTP backend and DNS
//!   entries resolving `localhost` carry real traffic; invalid entries are rejected with their own
//!   errors in `/debug/configz` while Envoy rejects nothing (REG-11, INV-7); and the same objects
//!   loaded as CRDs from the fake Kubernetes API server behave identically. Envoy missing is a
//!   failure, never a skip. Everything listens on loopback and stops with the test.

// Test code: a failed setup step should fail the test on the spot.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, LbConfig,
};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use prost::Message;
use serde_json::Value;
use tokio::sync::mpsc;
use tributary::aggregate::merge;
use tributary::envoy::{EncodedResource, GenerateOptions, clusters_for, load_assignments_for};
use tributary_registries::kubernetes::fake::{FakeApiServer, ResourceType};
use tributary_registries::serviceentry::fixtures::{
    invalid_service_entries, service_entry, workload_entry,
};
use tributary_registries::serviceentry::{GROUP, ServiceEntryConfig, ServiceEntryRegistry};
use tributary_registries::{
    Change, Hostname, Registry, RegistryEvent, RegistryId, RegistrySink, ServiceState,
};

use crate::support::harness::{Backend, Envoy, Tributary, eventually, free_port, http_get};

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// How long any expected event may take (real processes on shared CI cores).
const LIMIT: Duration = Duration::from_secs(15);

/// Runs a file-source registry in-process over `manifests` and returns what it served at sync.
async fn served(manifests: &str) -> BTreeMap<Hostname, ServiceState> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.yaml"), manifests).unwrap();
    let registry = Box::new(ServiceEntryRegistry::new(ServiceEntryConfig {
        directory: Some(dir.path().to_path_buf()),
        ..ServiceEntryConfig::default()
    }));
    let (tx, mut rx) = mpsc::channel(64);
    let task = tokio::spawn(registry.run(RegistrySink::new(RegistryId::new("serviceentry"), tx)));
    let mut view = BTreeMap::new();
    loop {
        let msg = tokio::time::timeout(LIMIT, rx.recv())
            .await
            .expect("the registry syncs")
            .expect("the registry runs");
        match msg.event {
            RegistryEvent::Changes(changes) => {
                for c in changes {
                    if let Change::Upsert(s) = c {
                        view.insert(s.service.hostname.clone(), s);
                    }
                }
            }
            RegistryEvent::Synced => break,
            _ => {}
        }
    }
    task.abort();
    view
}

fn decode<M: Message + Default>(r: &EncodedResource) -> M {
    M::decode(r.to_any().value.as_slice()).expect("resource decodes as its own type")
}

fn discovery_type(c: &Cluster) -> DiscoveryType {
    let Some(ClusterDiscoveryType::Type(t)) = c.cluster_discovery_type else {
        panic!("no discovery type on {}", c.name)
    };
    DiscoveryType::try_from(t).expect("a known type")
}

#[tokio::test]
async fn each_resolution_produces_its_envoy_cluster_type() {
    // REG-17: STATIC → EDS (non-IP workloads left out), DNS → STRICT_DNS and DNS_ROUND_ROBIN →
    // LOGICAL_DNS with endpoints inline (no EDS), NONE → ORIGINAL_DST with the target port.
    let http = "ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]";
    let manifests = [
        service_entry(
            "static",
            "shop",
            &format!("hosts: [static.example.com]\n{http}\nlocation: MESH_INTERNAL\nresolution: STATIC\nworkloadSelector: {{labels: {{app: static}}}}"),
        ),
        workload_entry("vm-ip", "shop", &[("app", "static")], "address: 10.0.0.1"),
        workload_entry("vm-name", "shop", &[("app", "static")], "address: vm.example.com"),
        service_entry("dns", "shop", &format!("hosts: [dns.example.com]\n{http}\nresolution: DNS")),
        service_entry(
            "rr",
            "shop",
            &format!("hosts: [rr.example.com]\n{http}\nresolution: DNS_ROUND_ROBIN\nendpoints: [{{address: lb.example.com}}]"),
        ),
        service_entry("none", "shop", &format!("hosts: [none.example.com]\n{http}\nresolution: NONE")),
    ]
    .join("---\n");
    let view = served(&manifests).await;
    let opts = GenerateOptions::default();
    let mut types = BTreeMap::new();
    for (host, state) in &view {
        let m = merge([state]).expect("one registry's state merges");
        let mut issues = Vec::new();
        let cluster: Cluster = decode(&clusters_for(&m, &opts, &mut issues)[0]);
        let clas: Vec<ClusterLoadAssignment> = load_assignments_for(&m, &opts, &mut issues)
            .iter()
            .map(decode)
            .collect();
        assert!(issues.is_empty(), "{host}: {issues:?}");
        types.insert(host.to_string(), (discovery_type(&cluster), cluster, clas));
    }
    let (ty, c, clas) = &types["static.example.com"];
    assert_eq!(*ty, DiscoveryType::Eds);
    assert_eq!(clas.len(), 1, "STATIC is served over EDS");
    let eps: Vec<String> = clas[0]
        .endpoints
        .iter()
        .flat_map(|l| &l.lb_endpoints)
        .map(|e| format!("{e:?}"))
        .collect();
    assert_eq!(eps.len(), 1, "only the IP workload: {eps:?}");
    assert!(
        eps[0].contains("10.0.0.1") && eps[0].contains("8080"),
        "{eps:?}"
    );
    assert!(c.load_assignment.is_none());

    let (ty, c, clas) = &types["dns.example.com"];
    assert_eq!(*ty, DiscoveryType::StrictDns);
    assert!(clas.is_empty(), "no EDS for DNS clusters");
    let inline = format!("{:?}", c.load_assignment);
    assert!(
        inline.contains("dns.example.com") && inline.contains("8080"),
        "{inline}"
    );

    let (ty, c, clas) = &types["rr.example.com"];
    assert_eq!(*ty, DiscoveryType::LogicalDns);
    assert!(clas.is_empty());
    assert!(format!("{:?}", c.load_assignment).contains("lb.example.com"));

    let (ty, c, clas) = &types["none.example.com"];
    assert_eq!(*ty, DiscoveryType::OriginalDst);
    assert!(clas.is_empty());
    let Some(LbConfig::OriginalDstLbConfig(o)) = &c.lb_config else {
        panic!("ORIGINAL_DST config: {:?}", c.lb_config)
    };
    assert_eq!(
        o.upstream_port_override.as_ref().map(|v| v.value),
        Some(8080)
    );
}

/// The listener ports of the mesh under test and the backends behind it.
struct Mesh {
    static_port: u16,
    dns_port: u16,
    rr_port: u16,
    none_port: u16,
    a: Backend,
    b: Backend,
}

impl Mesh {
    async fn start() -> Mesh {
        Mesh {
            static_port: free_port(),
            dns_port: free_port(),
            rr_port: free_port(),
            none_port: free_port(),
            a: Backend::start("backend-a").await,
            b: Backend::start("backend-b").await,
        }
    }

    /// One ServiceEntry per resolution, plus the REG-11 table of invalid ones.
    fn manifests(&self) -> Vec<String> {
        let http = |port: u16, target: u16| {
            format!("ports: [{{number: {port}, name: http, protocol: HTTP, targetPort: {target}}}]")
        };
        let mut out = vec![
            service_entry(
                "static",
                "shop",
                &format!(
                    "hosts: [static.example.com]\n{}\nlocation: MESH_INTERNAL\nresolution: STATIC\nendpoints: [{{address: 127.0.0.1}}]",
                    http(self.static_port, self.a.addr.port())
                ),
            ),
            service_entry(
                "dns",
                "shop",
                &format!(
                    "hosts: [localhost]\n{}\nresolution: DNS",
                    http(self.dns_port, self.b.addr.port())
                ),
            ),
            service_entry(
                "rr",
                "shop",
                &format!(
                    "hosts: [rr.example.com]\n{}\nresolution: DNS_ROUND_ROBIN\nendpoints: [{{address: localhost}}]",
                    http(self.rr_port, self.a.addr.port())
                ),
            ),
            service_entry(
                "none",
                "shop",
                &format!(
                    "hosts: [none.example.com]\nports: [{{number: {}, name: tcp, protocol: TCP, targetPort: {}}}]\nresolution: NONE",
                    self.none_port,
                    self.b.addr.port()
                ),
            ),
        ];
        out.extend(invalid_service_entries("shop").into_iter().map(|c| c.yaml));
        out
    }

    /// Traffic flows through Envoy to every entry that can carry it, each cluster has its
    /// resolution's type, every invalid entry is reported on its own, and Envoy rejected
    /// nothing. The same whatever the source.
    async fn check(&self, t: &Tributary, envoy: &Envoy) {
        answers(self.static_port, "static.example.com", "backend-a").await;
        answers(self.dns_port, "localhost", "backend-b").await;
        answers(self.rr_port, "rr.example.com", "backend-a").await;
        let types = cluster_types(&envoy.config_dump().await);
        let name = |port: u16, host: &str| format!("outbound|{port}||{host}");
        assert_eq!(
            types
                .get(&name(self.static_port, "static.example.com"))
                .map(String::as_str),
            Some("EDS"),
            "{types:?}"
        );
        assert_eq!(
            types
                .get(&name(self.dns_port, "localhost"))
                .map(String::as_str),
            Some("STRICT_DNS"),
            "{types:?}"
        );
        assert_eq!(
            types
                .get(&name(self.rr_port, "rr.example.com"))
                .map(String::as_str),
            Some("LOGICAL_DNS"),
            "{types:?}"
        );
        assert_eq!(
            types
                .get(&name(self.none_port, "none.example.com"))
                .map(String::as_str),
            Some("ORIGINAL_DST"),
            "{types:?}"
        );
        assert_eq!(types.len(), 4, "no invalid entry reached Envoy: {types:?}");

        let configz: Value = serde_json::from_str(&t.get("/debug/configz").await).unwrap();
        let rejected = configz["rejected"]
            .as_array()
            .expect("rejected objects in configz");
        let cases = invalid_service_entries("shop");
        assert_eq!(rejected.len(), cases.len(), "{rejected:#?}");
        for c in &cases {
            let object = format!("ServiceEntry shop/{}", c.name);
            let r: Vec<&Value> = rejected
                .iter()
                .filter(|r| r["object"] == object.as_str())
                .collect();
            assert_eq!(r.len(), 1, "{object}: {r:?}");
            assert_eq!(r[0]["field"], c.field, "{object}");
            assert!(
                r[0]["message"].as_str().unwrap().contains(c.message),
                "{object}: {r:?}"
            );
        }
        let metrics = t.get("/metrics").await;
        let gauge = format!(
            "tributary_registry_rejected_objects{{registry=\"external\"}} {}",
            cases.len()
        );
        assert!(metrics.contains(&gauge), "{gauge} in /metrics");
        // INV-7
        assert_eq!(
            envoy.stat_sum("update_rejected").await,
            0,
            "INV-7: Envoy rejected config"
        );
    }
}

/// `name → type` of every dynamic cluster Envoy holds.
fn cluster_types(dump: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for config in dump["configs"].as_array().into_iter().flatten() {
        for c in config["dynamic_active_clusters"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let cluster = &c["cluster"];
            if let (Some(name), Some(ty)) = (cluster["name"].as_str(), cluster["type"].as_str()) {
                out.insert(name.to_string(), ty.to_string());
            }
        }
    }
    out
}

/// Sends requests through Envoy's listener on `port` until `want` answers.
async fn answers(port: u16, host: &str, want: &str) {
    eventually(
        LIMIT,
        &format!("{host} on {port} answered by {want}"),
        || async {
            match http_get(loopback(port), host, "/").await {
                Some((200, body)) if body == want => Some(()),
                _ => None,
            }
        },
    )
    .await;
}

fn config(dir: &Path, registry: &str) -> std::path::PathBuf {
    let yaml = format!(
        "registries:\n- type: service_entry\n  name: external\n{registry}debounce: {{debounce_after: 20ms, debounce_max: 1s, endpoint_debounce_after: 10ms}}\n"
    );
    let path = dir.join("tributary.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_entries_from_files_carry_traffic_through_envoy() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).unwrap();
    let mesh = Mesh::start().await;
    let docs = mesh.manifests();
    std::fs::write(manifests.join("mesh.yaml"), docs.join("---\n")).unwrap();
    let cfg = config(
        dir.path(),
        &format!(
            "  directory: {}\n  rescan_interval: 500ms\n",
            manifests.display()
        ),
    );
    let (t, envoy) = Tributary::with_envoy(dir.path(), &cfg, "se").await;
    mesh.check(&t, &envoy).await;

    // Edited while running: the static entry now points at backend-b.
    let edited = docs[0].replace(
        &format!("targetPort: {}", mesh.a.addr.port()),
        &format!("targetPort: {}", mesh.b.addr.port()),
    );
    std::fs::write(
        manifests.join("mesh.yaml"),
        [edited]
            .iter()
            .chain(&docs[1..])
            .cloned()
            .collect::<Vec<_>>()
            .join("---\n"),
    )
    .unwrap();
    answers(mesh.static_port, "static.example.com", "backend-b").await;
    assert_eq!(envoy.stat_sum("update_rejected").await, 0, "INV-7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_objects_as_crds_behave_identically() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeApiServer::start().await.expect("fake API server");
    let kubeconfig = dir.path().join("kubeconfig.yaml");
    server.write_kubeconfig(&kubeconfig).unwrap();
    let rt = |kind: &str, plural: &str| ResourceType::new(GROUP, "v1", plural, kind, true);
    server.register_istio_networking("v1");
    let mesh = Mesh::start().await;
    for doc in mesh.manifests() {
        let v: Value = serde_yaml::from_str(&doc).unwrap();
        server
            .apply_json(&rt("ServiceEntry", "serviceentries"), v)
            .unwrap();
    }
    let cfg = config(
        dir.path(),
        &format!(
            "  kubernetes: {{kubeconfig: {}, retry_initial: 50ms, retry_max: 500ms}}\n",
            kubeconfig.display()
        ),
    );
    let (t, envoy) = Tributary::with_envoy(dir.path(), &cfg, "se").await;
    mesh.check(&t, &envoy).await;
}
