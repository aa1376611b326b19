//! End to end with the real Envoy taking its virtual hosts over VHDS on the delta ADS stream
//! (H-ENVOY, `tributary bootstrap --delta --vhds`, DELTA-22): HTTP routes by Host to services
//! whose virtual hosts came as `VirtualHost` resources; a service added later routes without its
//! route configuration being sent again; a port added later routes (its virtual hosts follow its
//! route configuration); a deleted service stops routing. Envoy missing is a failure, never a skip.

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::harness::{
    Backend, Envoy, Tributary, eventually, free_port, http_get, loopback, no_rejections,
    replace_file, wait_for_backend, warming_drains,
};

/// A mock file: one service per `(hostname, port, backend)`, several may share a port.
fn mesh(list: &[(&str, u16, SocketAddr)]) -> String {
    let items: Vec<String> = list
        .iter()
        .map(|(host, port, b)| {
            format!(
                "- {{hostname: {host}, ports: [{{name: http, port: {port}, protocol: HTTP}}], \
                 endpoints: [{{address: {}, ports: {{http: {}}}}}]}}",
                b.ip(),
                b.port()
            )
        })
        .collect();
    format!("services:\n{}\n", items.join("\n"))
}

/// The route configuration Envoy holds for `port`, from its config dump.
async fn route_config(envoy: &Envoy, port: u16) -> serde_json::Value {
    let name = port.to_string();
    let dump = envoy.config_dump().await;
    let configs = dump["configs"].as_array().cloned().unwrap_or_default();
    configs
        .iter()
        .flat_map(|c| {
            c["dynamic_route_configs"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|d| d["route_config"].clone())
        .find(|rc| rc["name"].as_str() == Some(name.as_str()))
        .unwrap_or(serde_json::Value::Null)
}

// DELTA-22, DELTA-15, H-ENVOY: virtual hosts over VHDS, pushed without any on-demand request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_envoy_routes_by_host_with_virtual_hosts_over_vhds() {
    let dir = tempfile::tempdir().unwrap();
    let a = Backend::start("backend-a").await;
    let b = Backend::start("backend-b").await;
    let (port, late_port) = (free_port(), free_port());
    let file = dir.path().join("mesh.yaml");
    let web = ("web.vhds.local", port, a.addr);
    let api = ("api.vhds.local", port, b.addr);
    std::fs::write(&file, mesh(&[web, api])).unwrap();
    let (xds, admin) = (loopback(free_port()), loopback(free_port()));
    let t = Tributary::start(
        dir.path(),
        xds,
        admin,
        &["--mock-file", file.to_str().unwrap()],
    )
    .await;
    let mut envoy = Envoy::start(
        dir.path(),
        "vhds",
        xds,
        &["--delta", "--vhds", "--listener-address", "127.0.0.1"],
    )
    .await;
    envoy.wait_live().await;
    let limit = Duration::from_secs(10);
    // Two services on one port: Envoy picks the virtual host by Host.
    wait_for_backend(loopback(port), "web.vhds.local", "backend-a", limit).await;
    wait_for_backend(loopback(port), "api.vhds.local", "backend-b", limit).await;
    let rc = route_config(&envoy, port).await;
    assert!(rc["vhds"]["config_source"]["ads"].is_object(), "{rc}");
    let vhosts: Vec<&str> = rc["virtual_hosts"]
        .as_array()
        .map(|v| v.iter().filter_map(|h| h["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        vhosts,
        [
            format!("{port}/api.vhds.local:{port}"),
            format!("{port}/web.vhds.local:{port}")
        ],
        "the virtual hosts Envoy holds came over VHDS"
    );
    let syncz = t.get("/debug/syncz").await;
    assert!(syncz.contains("\"vhds_acked\":\""), "{syncz}");

    // A service added later routes; its route configuration is not sent again.
    let rds_updates = format!(".rds.{port}.update_success");
    let before = envoy.stat_sum(&rds_updates).await;
    assert!(before >= 1);
    let new = ("new.vhds.local", port, b.addr);
    replace_file(&file, &mesh(&[web, api, new]));
    let took = wait_for_backend(loopback(port), "new.vhds.local", "backend-b", limit).await;
    println!("vhds: new service routed in {took:?}");
    assert_eq!(envoy.stat_sum(&rds_updates).await, before, "no RDS update");

    // A port added later: its virtual host follows its route configuration, and the listener
    // leaves warming.
    let late = ("late.vhds.local", late_port, a.addr);
    replace_file(&file, &mesh(&[web, api, new, late]));
    wait_for_backend(loopback(late_port), "late.vhds.local", "backend-a", limit).await;

    // A deleted service stops routing (Envoy answers 404: no virtual host for it); the others
    // on its port still route, and the route configuration is still not resent.
    replace_file(&file, &mesh(&[web, new, late]));
    eventually(limit, "api to stop routing", || async {
        matches!(
            http_get(loopback(port), "api.vhds.local", "/").await,
            Some((404, _))
        )
        .then_some(())
    })
    .await;
    wait_for_backend(loopback(port), "web.vhds.local", "backend-a", limit).await;
    assert_eq!(envoy.stat_sum(&rds_updates).await, before, "no RDS update");
    no_rejections(&envoy).await;
    warming_drains(&envoy).await;
    drop(t);
}
