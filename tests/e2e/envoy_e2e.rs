//! End to end with the real Envoy (H-ENVOY): tributary and Envoy as real processes on loopback,
//! real HTTP through Envoy's listener. Envoy missing is a failure, never a skip.

use std::time::Duration;

use tributary_registries::mock::proto::mock_registry_client::MockRegistryClient;
use tributary_registries::mock::proto::{Endpoint as EndpointSpec, SetEndpointsRequest};

use crate::support::harness::{
    Backend, Envoy, Tributary, dynamic_config, envoy_serving_web, eventually, free_port, http_get,
    loopback, mesh, move_web, no_rejections, replace_file, wait_for_backend, warming_drains,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_mesh_comes_up_live_and_serves_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let t = Tributary::start(
        dir.path(),
        loopback(free_port()),
        loopback(free_port()),
        &[],
    )
    .await;
    let mut envoy = Envoy::start(
        dir.path(),
        "demo",
        t.xds,
        &["--listener-address", "127.0.0.1"],
    )
    .await;
    envoy.wait_live().await;
    let body = eventually(Duration::from_secs(10), "echo through Envoy", || async {
        match http_get(loopback(18080), "echo.demo.svc.cluster.local", "/").await {
            Some((200, body)) => Some(body),
            _ => None,
        }
    })
    .await;
    assert!(
        body.starts_with("hello from echo.demo.svc.cluster.local"),
        "{body}"
    );
    // The short name a user would type routes too.
    let (status, body) = http_get(loopback(18081), "orders", "/")
        .await
        .expect("orders answers");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("orders.demo.svc.cluster.local"), "{body}");
    no_rejections(&envoy).await;
    warming_drains(&envoy).await;
    let syncz = t.get("/debug/syncz").await;
    assert!(
        syncz.contains("demo"),
        "the proxy shows in /debug/syncz: {syncz}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_and_control_api_changes_move_traffic_and_removal_removes_config() {
    let dir = tempfile::tempdir().unwrap();
    let a = Backend::start("backend-a").await;
    let b = Backend::start("backend-b").await;
    let port = free_port();
    let listener = loopback(port);
    // The control API has its own listener (docs/hardening.md).
    let control = loopback(free_port());
    let (t, file) = Tributary::on_mesh(
        dir.path(),
        &mesh(port, &[a.addr]),
        &["--control-addr", &control.to_string()],
    )
    .await;
    let envoy = envoy_serving_web(
        dir.path(),
        "e2e",
        t.xds,
        &[],
        listener,
        Duration::from_secs(10),
    )
    .await;

    // A file edit moves traffic to another endpoint within 1 s.
    let took = move_web(&file, port, b.addr, "backend-b").await;
    println!("file edit → traffic moved in {took:?}");
    assert!(
        took < Duration::from_secs(1),
        "file edit took {took:?} to move traffic"
    );

    // The control API does the same.
    let mut client = MockRegistryClient::connect(format!("http://{control}"))
        .await
        .unwrap();
    client
        .set_endpoints(SetEndpointsRequest {
            hostname: "web.e2e.local".into(),
            endpoints: vec![EndpointSpec {
                address: a.addr.ip().to_string(),
                ports: [("http".to_string(), u32::from(a.addr.port()))].into(),
                ..Default::default()
            }],
        })
        .await
        .expect("SetEndpoints");
    let took = wait_for_backend(
        listener,
        "web.e2e.local",
        "backend-a",
        Duration::from_secs(10),
    )
    .await;
    println!("control API → traffic moved in {took:?}");
    assert!(
        took < Duration::from_secs(1),
        "control API change took {took:?}"
    );
    no_rejections(&envoy).await;
    warming_drains(&envoy).await;

    // Removing the service removes its listener, route and cluster.
    let cluster = format!("outbound|{port}||web.e2e.local");
    replace_file(&file, "services: []\n");
    eventually(
        Duration::from_secs(5),
        "cluster and listener removed",
        || async {
            let dump = envoy.config_dump().await.to_string();
            (!dump.contains(&cluster) && !dump.contains(&format!("0.0.0.0_{port}"))).then_some(())
        },
    )
    .await;
    assert!(
        http_get(listener, "web.e2e.local", "/").await.is_none(),
        "listener is gone"
    );
    no_rejections(&envoy).await;

    // A half-written file is an error that keeps the last good state (here: the empty mesh), and a
    // fixed file brings the service back.
    std::fs::write(&file, "services:\n  - hostname: [").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let registryz = t.get("/debug/registryz").await;
    assert!(
        registryz.contains("degraded"),
        "the bad file shows in /debug/registryz: {registryz}"
    );
    move_web(&file, port, b.addr, "backend-b").await;
    no_rejections(&envoy).await;
}

// TRANS-11 / BUG-9: restarting tributary causes no spurious deletions in Envoy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_causes_no_spurious_deletions() {
    let dir = tempfile::tempdir().unwrap();
    let a = Backend::start("backend-a").await;
    let port = free_port();
    let file = dir.path().join("mesh.yaml");
    std::fs::write(&file, mesh(port, &[a.addr])).unwrap();
    let (xds, admin) = (loopback(free_port()), loopback(free_port()));
    let args = ["--mock-file", file.to_str().unwrap()];
    let mut t = Tributary::start(dir.path(), xds, admin, &args).await;
    let envoy = envoy_serving_web(
        dir.path(),
        "restart",
        t.xds,
        &[],
        loopback(port),
        Duration::from_secs(10),
    )
    .await;
    let before = dynamic_config(&envoy.config_dump().await);
    assert!(!before.is_empty());
    let removed_before = envoy.stat("cluster_manager.cluster_removed").await;
    let listeners_removed_before = envoy.stat("listener_manager.listener_removed").await;

    t.proc.kill();
    envoy.wait_connected(false, Duration::from_secs(10)).await;
    drop(t);
    let _t = Tributary::start(dir.path(), xds, admin, &args).await;
    envoy.wait_connected(true, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    assert_eq!(
        dynamic_config(&envoy.config_dump().await),
        before,
        "config changed across restart"
    );
    assert_eq!(
        envoy.stat("cluster_manager.cluster_removed").await,
        removed_before
    );
    assert_eq!(
        envoy.stat("listener_manager.listener_removed").await,
        listeners_removed_before
    );
    no_rejections(&envoy).await;
    warming_drains(&envoy).await;
    wait_for_backend(
        loopback(port),
        "web.e2e.local",
        "backend-a",
        Duration::from_secs(5),
    )
    .await;
}
