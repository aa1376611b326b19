//! End to end with the real Envoy over incremental xDS (H-ENVOY, `tributary bootstrap --delta`):
//! traffic, endpoint changes, and a tributary restart during which the mesh changed. Envoy missing
//! is a failure, never a skip.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::harness::{
    Backend, Envoy, Tributary, dynamic_config, eventually, free_port, http_get, loopback,
    no_rejections, replace_file, wait_for_backend, warming_drains,
};

/// A mock file with HTTP services `(hostname, listener port, backend)`.
fn services(list: &[(&str, u16, SocketAddr)]) -> String {
    let mut y = String::from("services:\n");
    for (host, port, backend) in list {
        y += &format!(
            "  - hostname: {host}\n    ports: [{{name: http, port: {port}, protocol: HTTP}}]\n    endpoints:\n      - {{address: {}, ports: {{http: {}}}}}\n",
            backend.ip(),
            backend.port()
        );
    }
    y
}

/// Envoy's dynamic config with its own listener bind address written as 127.0.0.1, so two Envoys
/// on different loopback addresses compare equal when they hold the same config.
async fn config_of(envoy: &Envoy, bind: &str) -> Vec<String> {
    dynamic_config(&envoy.config_dump().await)
        .into_iter()
        .map(|line| line.replace(&format!("\"{bind}\""), "\"127.0.0.1\""))
        .collect()
}

// DELTA-11, DELTA-12, TRANS-11, BUG-7: Envoy on DELTA_GRPC through changes and a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_envoy_follows_changes_and_reconnects_to_exactly_the_new_state() {
    let dir = tempfile::tempdir().unwrap();
    let a = Backend::start("backend-a").await;
    let b = Backend::start("backend-b").await;
    let (web, api, new) = (free_port(), free_port(), free_port());
    let file = dir.path().join("mesh.yaml");
    std::fs::write(
        &file,
        services(&[
            ("web.delta.local", web, a.addr),
            ("api.delta.local", api, a.addr),
        ]),
    )
    .unwrap();
    let (xds, admin) = (loopback(free_port()), loopback(free_port()));
    let args = ["--mock-file", file.to_str().unwrap()];
    let mut t = Tributary::start(dir.path(), xds, admin, &args).await;
    let mut envoy = Envoy::start(
        dir.path(),
        "delta",
        xds,
        &["--delta", "--listener-address", "127.0.0.1"],
    )
    .await;
    envoy.wait_live().await;
    wait_for_backend(
        loopback(web),
        "web.delta.local",
        "backend-a",
        Duration::from_secs(10),
    )
    .await;
    let syncz = t.get("/debug/syncz").await;
    assert!(syncz.contains("\"protocol\":\"delta\""), "{syncz}");

    // An endpoint change applies.
    replace_file(
        &file,
        &services(&[
            ("web.delta.local", web, b.addr),
            ("api.delta.local", api, a.addr),
        ]),
    );
    let took = wait_for_backend(
        loopback(web),
        "web.delta.local",
        "backend-b",
        Duration::from_secs(10),
    )
    .await;
    println!("delta: endpoint change → traffic moved in {took:?}");
    no_rejections(&envoy).await;
    warming_drains(&envoy).await;
    let removed_before = envoy.stat("cluster_manager.cluster_removed").await;
    let updated_before = envoy.stat("cluster_manager.cluster_updated").await;

    // tributary goes away; meanwhile "api" is removed and "new" is added; "web" is unchanged.
    t.proc.kill();
    envoy.wait_connected(false, Duration::from_secs(10)).await;
    drop(t);
    replace_file(
        &file,
        &services(&[
            ("web.delta.local", web, b.addr),
            ("new.delta.local", new, a.addr),
        ]),
    );
    let t = Tributary::start(dir.path(), xds, admin, &args).await;
    wait_for_backend(
        loopback(new),
        "new.delta.local",
        "backend-a",
        Duration::from_secs(30),
    )
    .await;
    eventually(
        Duration::from_secs(10),
        "the api listener to go",
        || async {
            http_get(loopback(api), "api.delta.local", "/")
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;
    warming_drains(&envoy).await;

    // A fresh Envoy on the same mesh holds exactly the same config: nothing leaked, nothing lost.
    let mut fresh = Envoy::start(
        dir.path(),
        "fresh",
        xds,
        &["--delta", "--listener-address", "127.0.0.2"],
    )
    .await;
    fresh.wait_live().await;
    wait_for_backend(
        SocketAddr::from(([127, 0, 0, 2], web)),
        "web.delta.local",
        "backend-b",
        Duration::from_secs(10),
    )
    .await;
    warming_drains(&fresh).await;
    // The removed listener drains (1 s) before its route config goes; then both must match.
    let want = config_of(&fresh, "127.0.0.2").await;
    assert!(!want.is_empty());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut got = config_of(&envoy, "127.0.0.1").await;
    while got != want && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        got = config_of(&envoy, "127.0.0.1").await;
    }
    assert_eq!(got, want, "config after reconnect");
    // Exactly one cluster (api) was removed, and the unchanged web cluster was not touched.
    assert_eq!(
        envoy.stat("cluster_manager.cluster_removed").await,
        removed_before + 1
    );
    assert_eq!(
        envoy.stat("cluster_manager.cluster_updated").await,
        updated_before
    );
    no_rejections(&envoy).await;
    no_rejections(&fresh).await;
    wait_for_backend(
        loopback(web),
        "web.delta.local",
        "backend-b",
        Duration::from_secs(5),
    )
    .await;
    drop(t);
}
