//! End to end with the real Envoy and the Kubernetes registry: tributary (the real binary) reads a
//! fake Kubernetes API server over HTTP with kube-rs, Envoy gets the result over ADS, and real
//! HTTP goes through Envoy to local backends. Envoy missing is a failure, never a skip.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tributary_registries::kubernetes::fake::FakeApiServer;
use tributary_registries::kubernetes::fake::objects::{self, SliceEndpoint};

use crate::support::harness::{Backend, Envoy, Tributary, eventually, free_port, http_get};

const HOST: &str = "web.shop.svc.cluster.local";

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A fake API server with node `node-a` and Service `shop/web` on `port` (named `http`).
async fn cluster(dir: &Path, port: u16) -> (FakeApiServer, std::path::PathBuf) {
    let server = FakeApiServer::start().await.expect("fake API server");
    let kubeconfig = dir.join("kubeconfig.yaml");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    server
        .apply(&objects::node("node-a", "us-east", "us-east-1a"))
        .expect("apply node");
    server
        .apply(&objects::service(
            "shop",
            "web",
            "10.96.0.10",
            &[("http", port)],
        ))
        .expect("apply service");
    (server, kubeconfig)
}

/// A pod and an EndpointSlice per backend (`(pod name, backend, terminating)`): the endpoint is
/// the backend's address and port. A slice carries one port number per port name, so each
/// backend gets its own slice, as pods of a Deployment do when their ports differ.
fn endpoints(server: &FakeApiServer, backends: &[(&str, &Backend, bool)]) {
    for (name, b, terminating) in backends {
        server
            .apply(&objects::pod(
                "shop",
                name,
                &[("app", "web")],
                "web",
                "node-a",
            ))
            .expect("apply pod");
        let ip = b.addr.ip().to_string();
        let mut ep = SliceEndpoint::ready(&ip).pod(name).node("node-a");
        if *terminating {
            ep = ep.terminating();
        }
        let slice = objects::endpoint_slice(
            "shop",
            &format!("web-{name}"),
            "web",
            &[("http", b.addr.port())],
            &[ep],
        );
        server.apply(&slice).expect("apply slice");
    }
}

fn config(dir: &Path, kubeconfig: &Path, mock: Option<&Path>) -> std::path::PathBuf {
    let mut yaml = format!(
        "registries:\n- type: kubernetes\n  name: kube\n  cluster_id: c1\n  kubeconfig: {}\n  retry_initial: 50ms\n  retry_max: 500ms\n",
        kubeconfig.display()
    );
    if let Some(m) = mock {
        yaml += &format!("- type: mock\n  name: vms\n  file: {}\n", m.display());
    }
    yaml += "debounce: {debounce_after: 20ms, debounce_max: 1s, endpoint_debounce_after: 10ms}\n";
    let path = dir.join("tributary.yaml");
    std::fs::write(&path, yaml).expect("config");
    path
}

/// Sends requests until every name in `want` has answered (and nothing else); returns what
/// answered, sorted.
async fn answers(listener: SocketAddr, want: &[&str]) -> Vec<String> {
    let seen = std::sync::Mutex::new(Vec::<String>::new());
    eventually(
        Duration::from_secs(15),
        &format!("answers from {want:?}"),
        || async {
            if let Some((200, body)) = http_get(listener, HOST, "/").await {
                assert!(
                    want.contains(&body.as_str()),
                    "unexpected answer {body:?}, want {want:?}"
                );
                let mut seen = seen.lock().expect("not poisoned");
                if !seen.contains(&body) {
                    seen.push(body);
                }
            }
            (seen.lock().expect("not poisoned").len() == want.len()).then_some(())
        },
    )
    .await;
    let mut seen = seen.into_inner().expect("not poisoned");
    seen.sort();
    seen
}

async fn no_rejections(envoy: &Envoy) {
    assert_eq!(
        envoy.stat_sum("update_rejected").await,
        0,
        "INV-7: Envoy rejected config"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_service_is_reachable_through_envoy_and_scale_down_moves_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (server, kubeconfig) = cluster(dir.path(), port).await;
    let a = Backend::start("backend-a").await;
    let b = Backend::start_on("127.0.0.2", "backend-b").await;
    endpoints(&server, &[("web-a", &a, false)]);
    let cfg = config(dir.path(), &kubeconfig, None);
    let (t, envoy) = Tributary::with_envoy(dir.path(), &cfg, "kube").await;
    let listener = loopback(port);
    assert_eq!(answers(listener, &["backend-a"]).await, ["backend-a"]);

    // Scale up: a second pod's endpoint joins.
    endpoints(&server, &[("web-b", &b, false)]);
    answers(listener, &["backend-a", "backend-b"]).await;

    // Scale down: web-a terminates; its endpoint leaves EDS (REG-4, BUG-1) and every request
    // lands on web-b.
    endpoints(&server, &[("web-a", &a, true)]);
    eventually(
        Duration::from_secs(5),
        "traffic only to backend-b",
        || async {
            for _ in 0..10 {
                match http_get(listener, HOST, "/").await {
                    Some((200, body)) if body == "backend-b" => {}
                    _ => return None,
                }
            }
            Some(())
        },
    )
    .await;
    no_rejections(&envoy).await;
    let registryz = t.get("/debug/registryz").await;
    assert!(registryz.contains("\"kube\""), "{registryz}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_hostname_from_kubernetes_and_the_mock_gets_the_union() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (server, kubeconfig) = cluster(dir.path(), port).await;
    let pod = Backend::start("pod").await;
    let vm = Backend::start("vm").await;
    endpoints(&server, &[("web-a", &pod, false)]);
    let mock = dir.path().join("vms.yaml");
    std::fs::write(
        &mock,
        format!(
            "services:\n  - hostname: {HOST}\n    ports: [{{name: http, port: {port}, protocol: HTTP}}]\n    endpoints:\n      - {{address: 127.0.0.1, ports: {{http: {}}}}}\n",
            vm.addr.port()
        ),
    )
    .unwrap();
    let cfg = config(dir.path(), &kubeconfig, Some(&mock));
    let (_t, envoy) = Tributary::with_envoy(dir.path(), &cfg, "hybrid").await;
    assert_eq!(answers(loopback(port), &["pod", "vm"]).await, ["pod", "vm"]);
    no_rejections(&envoy).await;
}
