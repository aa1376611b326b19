//! Supervision of long-lived tasks (REL-1, REL-2 in docs/reliability.md): a registry task that
//! dies is restarted while its last state is served and shown degraded; the aggregate, the
//! builder, the admin or an xDS server dying makes the real binary exit non-zero with a log line
//! that says which task and why. Tasks are killed with the hidden `--inject-panic` flag.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tributary::config::Config;
use tributary::envoy::ResourceType;
use tributary::runtime::{self, Faults};

use crate::support::harness::{eventually, free_port, http_get, tributary_bin};

const MESH: &str = "\
services:
  - hostname: echo.demo.svc.cluster.local
    ports: [{name: http, port: 18080, protocol: HTTP}]
    endpoints:
      - {address: 127.0.0.1, ports: {http: 19101}}
";
const CLUSTER: &str = "outbound|18080||echo.demo.svc.cluster.local";
const LIMIT: Duration = Duration::from_secs(20);

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn write_mesh(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("mesh.yaml");
    std::fs::write(&path, MESH).unwrap();
    path
}

async fn get(addr: SocketAddr, path: &str) -> String {
    http_get(addr, "localhost", path)
        .await
        .map(|(_, b)| b)
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_registry_is_restarted_degraded_meanwhile_and_its_state_kept() {
    // REL-1.
    let dir = tempfile::tempdir().unwrap();
    let mesh = write_mesh(dir.path());
    let yaml = format!(
        "registries:\n- type: mock\n  name: vms\n  file: {}\n",
        mesh.display()
    );
    let config = Config {
        xds_addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        ..Config::from_yaml(&yaml).unwrap()
    };
    let faults: Faults = "registry:vms@300ms".parse().unwrap();
    let running = runtime::start_with_faults(config, faults).await.unwrap();
    let admin = running.admin_addr;
    let store = running.store.clone();
    let served = move || {
        store
            .load()
            .is_some_and(|s| s.resources(ResourceType::Cluster).get(CLUSTER).is_some())
    };
    eventually(LIMIT, "the mock's cluster served", || async {
        served().then_some(())
    })
    .await;

    // Degraded, with the panic message, while the last state is still served.
    let registryz = eventually(
        LIMIT,
        "the registry degraded in /debug/registryz",
        || async {
            let body = get(admin, "/debug/registryz").await;
            body.contains("registry task panicked").then_some(body)
        },
    )
    .await;
    assert!(registryz.contains("injected fault"), "{registryz}");
    assert!(
        served(),
        "REL-1: the dead registry's last state is still served"
    );

    // Restarted: healthy again, counted, the control handle drives the new instance.
    eventually(LIMIT, "the registry healthy again", || async {
        let body = get(admin, "/debug/registryz").await;
        body.contains("\"status\":\"healthy\"").then_some(())
    })
    .await;
    let metrics = get(admin, "/metrics").await;
    assert!(
        metrics.contains("tributary_registry_restarts{registry=\"vms\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tributary_registry_degraded{registry=\"vms\"} 0"),
        "{metrics}"
    );
    assert!(served());
    let state = running.mocks[0].state().await;
    assert!(
        state.is_ok(),
        "the mock handle survives the restart: {state:?}"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_a_dead_builder_is_reported_and_ready_turns_503() {
    // REL-2: `failed()` names the task and the panic; `/ready` is 503 from then on.
    let dir = tempfile::tempdir().unwrap();
    let mesh = write_mesh(dir.path());
    let yaml = format!("registries:\n- type: mock\n  file: {}\n", mesh.display());
    let config = Config {
        xds_addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        ..Config::from_yaml(&yaml).unwrap()
    };
    let faults: Faults = "builder@500ms".parse().unwrap();
    let mut running = runtime::start_with_faults(config, faults).await.unwrap();
    let why = tokio::time::timeout(LIMIT, running.failed())
        .await
        .expect("the builder's death is noticed");
    assert!(
        why.contains("snapshot builder task panicked") && why.contains("injected fault"),
        "{why}"
    );
    let (status, _) = http_get(running.admin_addr, "localhost", "/ready")
        .await
        .expect("admin still answers");
    assert_eq!(status, 503, "REL-2: not ready once a critical task died");
    running.stop().await;
}

/// Runs the real binary with `task` killed after it is ready; returns its exit code and log.
async fn binary_with_dead(task: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let mesh = write_mesh(dir.path());
    let admin = loopback(free_port());
    let log_path = dir.path().join("tributary.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(tributary_bin())
        .arg("--mock-file")
        .arg(&mesh)
        .arg("--xds-addr")
        .arg(loopback(free_port()).to_string())
        .arg("--admin-addr")
        .arg(admin.to_string())
        .arg("--inject-panic")
        .arg(format!("{task}@1s"))
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("start tributary");
    let deadline = Instant::now() + LIMIT;
    let mut was_ready = false;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        if !was_ready {
            was_ready = matches!(http_get(admin, "localhost", "/ready").await, Some((200, _)));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let text = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(was_ready, "tributary never became ready:\n{text}");
    let status =
        status.unwrap_or_else(|| panic!("still running {LIMIT:?} after {task} died:\n{text}"));
    (status.code(), text)
}

async fn exits_non_zero_when(task: &str, name: &str) {
    let (code, log) = binary_with_dead(task).await;
    assert!(
        code.is_some_and(|c| c != 0),
        "REL-2: exit code {code:?} after the {task} died:\n{log}"
    );
    assert!(
        log.contains("a critical task died") && log.contains(&format!("the {name} task panicked")),
        "REL-2: the log says which task died and why:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exits_non_zero_when_the_aggregate_dies() {
    exits_non_zero_when("aggregate", "aggregate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exits_non_zero_when_the_builder_dies() {
    exits_non_zero_when("builder", "snapshot builder").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exits_non_zero_when_the_xds_server_dies() {
    exits_non_zero_when("xds", "plaintext xDS server").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exits_non_zero_when_the_admin_server_dies() {
    exits_non_zero_when("admin", "admin server").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_duration_is_refused_at_start_with_a_clear_error() {
    // REL-3: the values that used to panic a task are refused before anything starts.
    let dir = tempfile::tempdir().unwrap();
    for (yaml, want) in [
        (
            "debounce: {debounce_max: 18446744073709551615s}\n",
            "longest duration",
        ),
        (
            "debounce: {debounce_max: 20days}\n",
            "debounce.debounce_max",
        ),
        ("sync_timeout: 10days\n", "sync_timeout"),
    ] {
        let path = dir.path().join("tributary.yaml");
        std::fs::write(&path, yaml).unwrap();
        let out = Command::new(tributary_bin())
            .arg("--config")
            .arg(&path)
            .output()
            .expect("run tributary");
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{yaml} accepted");
        assert!(text.contains(want), "{yaml}: {text}");
    }
}
