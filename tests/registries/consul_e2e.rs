//! The Consul registry end to end: the fake Consul (real wire format, on loopback), tributary and
//! Envoy as real processes, real HTTP through Envoy. Envoy missing is a failure, never a skip.
//!
//! Backends ("VMs") listen on 127.0.0.2 and Envoy's listeners on 127.0.0.1: a Consul service's
//! port is its instances' port, so both sides use the same number.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tributary_registries::consul::fake::{CheckStatus, FakeConsul, Fault, Instance};

use crate::support::harness::{Backend, Envoy, Tributary, eventually, free_port, http_get};

const VM_IP: &str = "127.0.0.2";
const HOST: &str = "web.service.consul";
/// The aggregate's default debounce for service changes; endpoint-only changes are not delayed.
const DEBOUNCE: Duration = Duration::from_millis(100);

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

async fn vm(name: &str) -> Backend {
    Backend::start_on(VM_IP, name).await
}

fn instance(id: &str, b: &Backend) -> Instance {
    Instance::new("web", id, &b.addr.ip().to_string(), b.addr.port()).meta("protocol", "http")
}

fn write_config(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("tributary.yaml");
    std::fs::write(&path, yaml).expect("write config");
    path
}

async fn start_envoy(dir: &Path, t: &Tributary, node: &str) -> Envoy {
    let mut envoy = Envoy::start(dir, node, t.xds, &["--listener-address", "127.0.0.1"]).await;
    envoy.wait_live().await;
    envoy
}

/// Which backends answer `requests` requests through Envoy's listener.
async fn answering(listener: SocketAddr, requests: usize) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for _ in 0..requests {
        if let Some((200, body)) = http_get(listener, HOST, "/").await {
            seen.insert(body);
        }
    }
    seen
}

/// Waits until traffic through Envoy reaches every backend in `want`.
async fn wait_for_backends(listener: SocketAddr, want: &[&str]) {
    let want: BTreeSet<String> = want.iter().map(|s| s.to_string()).collect();
    eventually(
        Duration::from_secs(15),
        &format!("traffic to {want:?}"),
        || {
            let want = want.clone();
            async move { (answering(listener, 8).await == want).then_some(()) }
        },
    )
    .await;
}

/// Envoy's `/clusters` lists `addr` as a host.
async fn envoy_has_host(envoy: &Envoy, addr: SocketAddr) -> bool {
    let body = http_get(envoy.admin, "localhost", "/clusters")
        .await
        .map(|(_, b)| b)
        .unwrap_or_default();
    body.contains(&format!("::{addr}::"))
}

/// How long until Envoy no longer has `addr` as a host.
async fn time_until_gone(envoy: &Envoy, addr: SocketAddr) -> Duration {
    let start = Instant::now();
    eventually(
        Duration::from_secs(10),
        &format!("{addr} gone from Envoy"),
        || async { (!envoy_has_host(envoy, addr).await).then_some(()) },
    )
    .await;
    start.elapsed()
}

async fn no_rejections(envoy: &Envoy) {
    assert_eq!(
        envoy.stat_sum("update_rejected").await,
        0,
        "INV-7: Envoy rejected config"
    );
}

// A VM registered in Consul is reachable through Envoy; deregistering an instance, or failing its
// check (REG-7), removes it from Envoy within 1 s plus the debounce.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consul_services_reach_envoy_and_leave_it_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeConsul::start().await;
    let (x, y) = (vm("vm-x").await, vm("vm-y").await);
    // `lo` has the lower port, which the service (and Envoy's listener) uses.
    let ((lo, lo_name), (hi, hi_name)) = match x.addr.port() < y.addr.port() {
        true => ((x, "vm-x"), (y, "vm-y")),
        false => ((y, "vm-y"), (x, "vm-x")),
    };
    fake.register(instance("web-lo", &lo));
    fake.register(instance("web-hi", &hi));
    let config = write_config(
        dir.path(),
        &format!(
            "registries:\n  - type: consul\n    address: {}\n",
            fake.url()
        ),
    );
    let args = ["--config", config.to_str().unwrap()];
    let t = Tributary::start(
        dir.path(),
        loopback(free_port()),
        loopback(free_port()),
        &args,
    )
    .await;
    let envoy = start_envoy(dir.path(), &t, "consul-vm").await;
    let listener = loopback(lo.addr.port());
    wait_for_backends(listener, &[lo_name, hi_name]).await;
    no_rejections(&envoy).await;

    // Deregistration.
    fake.deregister("web-hi");
    let took = time_until_gone(&envoy, hi.addr).await;
    println!("deregistered instance left Envoy in {took:?}");
    assert!(took < Duration::from_secs(1) + DEBOUNCE, "took {took:?}");
    assert_eq!(
        answering(listener, 6).await,
        BTreeSet::from([lo_name.to_string()])
    );

    // Back, then a failing check.
    fake.register(instance("web-hi", &hi));
    wait_for_backends(listener, &[lo_name, hi_name]).await;
    fake.set_service_check("web-lo", CheckStatus::Critical);
    let took = time_until_gone(&envoy, lo.addr).await;
    println!("instance with a critical check left Envoy in {took:?}");
    assert!(took < Duration::from_secs(1) + DEBOUNCE, "took {took:?}");
    assert_eq!(
        answering(listener, 6).await,
        BTreeSet::from([hi_name.to_string()])
    );

    // Passing again: back in.
    fake.set_service_check("web-lo", CheckStatus::Passing);
    wait_for_backends(listener, &[lo_name, hi_name]).await;
    no_rejections(&envoy).await;
    let endpointz = t.get("/debug/endpointz").await;
    assert!(endpointz.contains("consul/consul"), "{endpointz}");
}

// Hybrid: the same hostname from the mock registry and from Consul gets the union of endpoints;
// Consul failing keeps both (REG-5: last good state; REG-9: the mock's shard is untouched), and
// shows as degraded in /debug/registryz and the metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_mock_and_consul_serve_the_union_and_survive_a_consul_outage() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeConsul::start().await;
    let (k8s, vm_b) = (vm("pod-a").await, vm("vm-b").await);
    fake.register(instance("web-vm", &vm_b));
    let port = free_port();
    let mesh = dir.path().join("mesh.yaml");
    std::fs::write(
        &mesh,
        format!(
            "services:\n  - hostname: {HOST}\n    ports: [{{name: http, port: {port}, protocol: HTTP}}]\n    endpoints:\n      - {{address: {}, ports: {{http: {}}}}}\n",
            k8s.addr.ip(),
            k8s.addr.port()
        ),
    )
    .unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "registries:\n  - type: mock\n    file: {}\n  - type: consul\n    address: {}\n    backoff: {{initial: 100ms, max: 1s}}\n",
            mesh.display(),
            fake.url()
        ),
    );
    let args = ["--config", config.to_str().unwrap()];
    let t = Tributary::start(
        dir.path(),
        loopback(free_port()),
        loopback(free_port()),
        &args,
    )
    .await;
    let envoy = start_envoy(dir.path(), &t, "hybrid").await;
    // The mock is first in order: its port is the listener; Consul adds its endpoint.
    let listener = loopback(port);
    wait_for_backends(listener, &["pod-a", "vm-b"]).await;
    let endpointz = t.get("/debug/endpointz").await;
    assert!(
        endpointz.contains("mock/mock") && endpointz.contains("consul/consul"),
        "{endpointz}"
    );

    fake.fail(Fault::Status(503));
    eventually(
        Duration::from_secs(10),
        "consul degraded in /debug/registryz",
        || async {
            let r = t.get("/debug/registryz").await;
            r.contains("degraded: ").then_some(())
        },
    )
    .await;
    let metrics = t.get("/metrics").await;
    assert!(
        metrics.contains("tributary_registry_degraded{registry=\"consul\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.lines().any(|l| l
            .starts_with("tributary_registry_stale_since_timestamp_seconds{registry=\"consul\"}")
            && !l.ends_with(" 0")),
        "{metrics}"
    );
    // Last good state: both still serve.
    assert_eq!(
        answering(listener, 8).await,
        BTreeSet::from(["pod-a".to_string(), "vm-b".to_string()])
    );
    fake.heal();
    eventually(Duration::from_secs(10), "consul healthy again", || async {
        let r = t.get("/debug/registryz").await;
        (!r.contains("degraded: ")).then_some(())
    })
    .await;
    no_rejections(&envoy).await;
}

// REG-15: a Consul unreachable at startup does not block readiness forever: after sync_timeout
// tributary serves the mock's services and says so; Consul's services join when it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_consul_at_startup_times_out_and_joins_later() {
    let dir = tempfile::tempdir().unwrap();
    let consul_addr = loopback(free_port());
    let mesh = dir.path().join("mesh.yaml");
    std::fs::write(
        &mesh,
        "services:\n  - hostname: k8s.e2e.local\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints: [{address: 127.0.0.9}]\n",
    )
    .unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "sync_timeout: 2s\nregistries:\n  - type: mock\n    file: {}\n  - type: consul\n    address: http://{consul_addr}\n    backoff: {{initial: 100ms, max: 500ms}}\n",
            mesh.display()
        ),
    );
    let args = ["--config", config.to_str().unwrap()];
    let start = Instant::now();
    let t = Tributary::start(
        dir.path(),
        loopback(free_port()),
        loopback(free_port()),
        &args,
    )
    .await;
    let took = start.elapsed();
    assert!(
        took >= Duration::from_secs(2),
        "ready only after the sync timeout: {took:?}"
    );
    let registryz = t.get("/debug/registryz").await;
    assert!(registryz.contains("timed_out"), "{registryz}");
    assert!(
        registryz.contains("cannot connect to Consul"),
        "{registryz}"
    );
    assert!(registryz.contains("k8s.e2e.local"), "{registryz}");

    let fake = FakeConsul::start_on(consul_addr, "dc1")
        .await
        .expect("the reserved port");
    fake.register(Instance::new("billing", "billing-1", "127.0.0.2", 9000));
    eventually(
        Duration::from_secs(10),
        "Consul's services join",
        || async {
            let r = t.get("/debug/registryz").await;
            (r.contains("billing.service.consul") && !r.contains("degraded: ")).then_some(())
        },
    )
    .await;
    let log = std::fs::read_to_string(&t.proc.log).unwrap_or_default();
    assert!(
        log.contains("did not sync in time"),
        "said loudly: {}",
        t.proc.tail()
    );
}

// Two datacenters side by side: two Consul registries, each with its own cluster id; the same
// service name in both is one hostname with both datacenters' endpoints, each in its own shard
// and locality.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_datacenters_run_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let dc1 = FakeConsul::start().await;
    let dc2 = FakeConsul::start_on(loopback(0), "dc2")
        .await
        .expect("a port");
    dc1.register(Instance::new("web", "web-1", "10.1.0.1", 8080));
    dc2.register(Instance::new("web", "web-1", "10.2.0.1", 8080));
    let config = write_config(
        dir.path(),
        &format!(
            "registries:\n  - type: consul\n    name: consul-dc1\n    datacenter: dc1\n    address: {}\n  - type: consul\n    name: consul-dc2\n    datacenter: dc2\n    address: {}\n",
            dc1.url(),
            dc2.url()
        ),
    );
    let args = ["--config", config.to_str().unwrap()];
    let t = Tributary::start(
        dir.path(),
        loopback(free_port()),
        loopback(free_port()),
        &args,
    )
    .await;
    let endpointz: serde_json::Value =
        serde_json::from_str(&t.get("/debug/endpointz").await).expect("endpointz is JSON");
    let web = &endpointz[HOST];
    assert_eq!(
        web["consul-dc1/dc1"][0]["address"], "10.1.0.1",
        "{endpointz}"
    );
    assert_eq!(web["consul-dc1/dc1"][0]["locality"], "dc1//", "{endpointz}");
    assert_eq!(
        web["consul-dc2/dc2"][0]["address"], "10.2.0.1",
        "{endpointz}"
    );
    assert_eq!(web["consul-dc2/dc2"][0]["locality"], "dc2//", "{endpointz}");
    assert!(
        dc2.requests()
            .iter()
            .all(|r| r.query.get("dc").map(String::as_str) != Some("dc1")),
        "each registry asks its own datacenter"
    );
}
