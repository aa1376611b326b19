//! The real Envoy against tributary as a deployed control plane: over mTLS with the bootstrap
//! `tributary bootstrap --tls` prints (SEC-1, SEC-2), and through a rolling restart of two
//! tributary processes behind one xDS cluster (TRANS-8, TRANS-12).

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::support::harness::{
    Backend, Envoy, Proc, Tributary, envoy_bin, free_port, http_get, loopback, mesh, no_rejections,
    tributary_bin, wait_for_backend,
};
use crate::support::pki;
use crate::support::pki::Ca;

/// An Istio-style node id in namespace `shop`, matching `spiffe://cluster.local/ns/shop/sa/cart`.
const SHOP_NODE: &str = "sidecar~127.0.0.1~cart-1.shop~shop.svc.cluster.local";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gets_config_over_mtls_from_bootstrap_tls() {
    // SEC-1: Envoy presents a SPIFFE certificate and verifies tributary's; SEC-2: its node id
    // matches the certificate's namespace, so it is served.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = Ca::new("mesh root");
    let client = ca.client("spiffe://cluster.local/ns/shop/sa/cart");
    let tls_addr = loopback(free_port());
    let config_path = ca.write_tls_config(d, tls_addr);
    let backend = Backend::start("web-1").await;
    let port = free_port();
    let config = ["--config", config_path.to_str().unwrap()];
    let (t, _) = Tributary::on_mesh(d, &mesh(port, &[backend.addr]), &config).await;
    let cert = pki::write(d, "envoy.crt", &client.cert);
    let key = pki::write(d, "envoy.key", &client.key);
    let ca_path = d.join("ca.crt");
    let mut flags = vec!["--tls"];
    flags.extend(pki::client_tls_flags(&ca_path, &cert, &key));
    flags.extend(["--listener-address", "127.0.0.1"]);
    let mut envoy = Envoy::start(d, SHOP_NODE, tls_addr, &flags).await;
    serves_web(&mut envoy, port).await;
    no_rejections(&envoy).await;
    let syncz = t.get("/debug/syncz").await;
    assert!(syncz.contains("cart-1.shop"), "served over mTLS: {syncz}");
}

/// Waits until `envoy` is live and routes `web.e2e.local` on `port` to the backend `web-1`.
async fn serves_web(envoy: &mut Envoy, port: u16) {
    envoy.wait_live().await;
    wait_for_backend(
        loopback(port),
        "web.e2e.local",
        "web-1",
        Duration::from_secs(20),
    )
    .await;
}

/// `tributary bootstrap` output with every address in `xds` as an endpoint of the xDS cluster.
fn bootstrap_for(xds: &[SocketAddr], admin_port: u16) -> String {
    let out = Command::new(tributary_bin())
        .args(["bootstrap", "--node-id", "roll", "--listener-address"])
        .arg("127.0.0.1")
        .arg("--xds-addr")
        .arg(xds[0].to_string())
        .arg("--admin-port")
        .arg(admin_port.to_string())
        .output()
        .expect("bootstrap runs");
    assert!(out.status.success());
    let mut v: serde_yaml::Value = serde_yaml::from_slice(&out.stdout).unwrap();
    let eps = &mut v["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]["lb_endpoints"];
    let first = eps[0].clone();
    let list = eps.as_sequence_mut().unwrap();
    for a in &xds[1..] {
        let mut e = first.clone();
        e["endpoint"]["address"]["socket_address"]["port_value"] = a.port().into();
        list.push(e);
    }
    serde_yaml::to_string(&v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_of_two_replicas_keeps_traffic_and_config() {
    // TRANS-8: each replica shuts down gracefully on SIGTERM; TRANS-12: the other serves identical
    // versions, so Envoy moves over with no rejection, no removal and no failed request.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let backend = Backend::start("web-1").await;
    let port = free_port();
    let mesh_path = pki::write(d, "mesh.yaml", &mesh(port, &[backend.addr]));
    let config_path = pki::write(d, "t.yaml", "shutdown: {grace_period: 2s}\n");
    let args = [
        "--config",
        config_path.to_str().unwrap(),
        "--mock-file",
        mesh_path.to_str().unwrap(),
    ];
    let addrs = [
        (loopback(free_port()), loopback(free_port())),
        (loopback(free_port()), loopback(free_port())),
    ];
    let mut replicas = Vec::new();
    for (x, a) in addrs {
        replicas.push(Tributary::start(d, x, a, &args).await);
    }
    let admin_port = free_port();
    let bootstrap = pki::write(
        d,
        "roll.yaml",
        &bootstrap_for(&[addrs[0].0, addrs[1].0], admin_port),
    );
    let mut cmd = Command::new(envoy_bin());
    cmd.arg("-c").arg(&bootstrap).args([
        "--disable-hot-restart",
        "--drain-time-s",
        "1",
        "-l",
        "info",
    ]);
    let mut envoy = Envoy {
        proc: Proc::spawn("envoy-roll", &mut cmd, d),
        admin: loopback(admin_port),
    };
    serves_web(&mut envoy, port).await;

    // Traffic all along.
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = tokio_util::sync::CancellationToken::new();
    let traffic = {
        let (ok, failed, stop) = (ok.clone(), failed.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                match http_get(loopback(port), "web.e2e.local", "/").await {
                    Some((200, b)) if b == "web-1" => ok.fetch_add(1, Ordering::Relaxed),
                    _ => failed.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };

    for i in 0..2 {
        let (x, a) = addrs[i];
        let terminated = replicas[i].proc.terminate(Duration::from_secs(10));
        assert!(
            terminated,
            "replica {i} exits on SIGTERM:\n{}",
            replicas[i].proc.tail()
        );
        let log = std::fs::read_to_string(&replicas[i].proc.log).unwrap_or_default();
        assert!(!log.contains("after the grace period"), "{log}");
        tokio::time::sleep(Duration::from_secs(1)).await;
        replicas[i] = Tributary::start(d, x, a, &args).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    stop.cancel();
    traffic.await.unwrap();
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    println!("rolling restart: {ok} requests answered, {failed} failed");
    assert!(ok > 50, "traffic ran: {ok}");
    assert_eq!(failed, 0, "no request failed during the rolling restart");
    no_rejections(&envoy).await;
    assert_eq!(
        envoy.stat("cluster_manager.cluster_removed").await,
        0,
        "no cluster removed"
    );
    assert_eq!(envoy.stat("listener_manager.listener_removed").await, 0);
    assert!(
        envoy.stat("cluster.xds-grpc.upstream_cx_total").await >= 2,
        "Envoy reconnected to the other replica"
    );
    let replaced = http_get(envoy.admin, "localhost", "/ready").await;
    assert_eq!(replaced.map(|r| r.0), Some(200));
}
