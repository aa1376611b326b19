//! Client status (CS-1..CS-4 in docs/client-status.md) read by a real CSDS client (Python, with the
//! Envoy stubs `grpcio-csds` brings) while a real Envoy, a real grpcio proxyless client and a raw
//! client that NACKs are connected: every client listed, each resource with its status.

#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::support::harness::{Envoy, Tributary, eventually, free_port, loopback};
use crate::support::proxyless::{
    Scripted, fixture_dir, grpc_mesh, python, require_python, write_bootstrap,
};
use crate::support::type_url::{CDS, LDS};

const HOST: &str = "greeter.csds.local";
const NACK_MESSAGE: &str = "rejected by the test: cluster is not acceptable";

/// Runs the CSDS client against `server` and returns its JSON.
fn csds(server: std::net::SocketAddr, extra: &[&str]) -> Value {
    let out = Command::new(python())
        .current_dir(fixture_dir())
        .args(["csds_client.py", "--server", &server.to_string()])
        .args(extra)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "csds_client.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON from csds_client.py")
}

/// The `(status, error)` of resource `name` of `ty` held by `node`, if listed.
fn status_of(v: &Value, node: &str, ty: &str, name: &str) -> Option<(String, Option<String>)> {
    let client = v["clients"]
        .as_array()?
        .iter()
        .find(|c| c["node"] == node)?;
    let r = client["resources"]
        .as_array()?
        .iter()
        .find(|r| r["type"] == ty && r["name"] == name)?;
    Some((
        r["status"].as_str()?.to_string(),
        r["error"].as_str().map(String::from),
    ))
}

async fn next(rx: &mut tonic::Streaming<DiscoveryResponse>) -> DiscoveryResponse {
    tokio::time::timeout(Duration::from_secs(10), rx.message())
        .await
        .expect("a response in time")
        .expect("no error")
        .expect("stream open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csds_lists_envoy_grpc_and_raw_clients_with_resource_status() {
    require_python(&["grpc", "grpc_csds"]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let backend = loopback(free_port());
    let (t, _file) = Tributary::on_mesh(dir.path(), &grpc_mesh(HOST, port, &[backend]), &[]).await;

    // A real Envoy and a real grpcio client.
    let mut envoy = Envoy::start(
        dir.path(),
        "csds-envoy",
        t.xds,
        &["--listener-address", "127.0.0.1"],
    )
    .await;
    envoy.wait_live().await;
    let _greeter = Scripted::greeters(dir.path(), &[(backend, "backend")]).await;
    let bootstrap = write_bootstrap(dir.path(), "csds-grpc", t.xds);
    let mut grpc =
        Scripted::python_client(dir.path(), &bootstrap, &format!("xds:///{HOST}:{port}"));
    grpc.wait_reply_from(
        std::time::Instant::now(),
        Duration::from_secs(30),
        "backend",
    )
    .await;

    // A raw client: named LDS (one absent), then a NACKed CDS response.
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{}", t.xds))
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel(8);
    let named = format!("{HOST}:{port}");
    tx.send(DiscoveryRequest {
        node: Some(Node {
            id: "csds-raw".into(),
            user_agent_name: "gRPC raw test".into(),
            ..Default::default()
        }),
        type_url: LDS.into(),
        resource_names: vec![named.clone(), "absent.csds.local:1".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut stream = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let lds = next(&mut stream).await;
    assert_eq!(lds.resources.len(), 1, "only the listener that exists");
    tx.send(DiscoveryRequest {
        type_url: LDS.into(),
        version_info: lds.version_info.clone(),
        response_nonce: lds.nonce.clone(),
        resource_names: vec![named.clone(), "absent.csds.local:1".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    tx.send(DiscoveryRequest {
        type_url: CDS.into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let cds = next(&mut stream).await;
    tx.send(DiscoveryRequest {
        type_url: CDS.into(),
        response_nonce: cds.nonce.clone(),
        error_detail: Some(RpcStatus {
            code: 3,
            message: NACK_MESSAGE.into(),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();

    let cluster = format!("outbound|{port}||{HOST}");
    let envoy_listener = format!("0.0.0.0_{port}");
    let route = port.to_string();
    let all = eventually(Duration::from_secs(10), "every client ACKED", || async {
        let v = csds(t.xds, &[]);
        let acked = |node: &str, ty: &str, name: &str| {
            status_of(&v, node, ty, name).is_some_and(|(s, _)| s == "ACKED")
        };
        let ready = acked("csds-envoy", "Listener", &envoy_listener)
            && acked("csds-envoy", "Cluster", &cluster)
            && acked("csds-envoy", "ClusterLoadAssignment", &cluster)
            && acked("csds-envoy", "RouteConfiguration", &route)
            && acked("csds-grpc", "Listener", &named)
            && acked("csds-grpc", "RouteConfiguration", &route)
            && acked("csds-grpc", "Cluster", &cluster)
            && acked("csds-grpc", "ClusterLoadAssignment", &cluster)
            && acked("csds-raw", "Listener", &named)
            && status_of(&v, "csds-raw", "Cluster", &cluster).is_some_and(|(s, _)| s == "NACKED");
        ready.then_some(v)
    })
    .await;
    // CS-2: an absent named resource is DOES_NOT_EXIST.
    assert_eq!(
        status_of(&all, "csds-raw", "Listener", "absent.csds.local:1").map(|s| s.0),
        Some("DOES_NOT_EXIST".into()),
        "{all}"
    );
    // CS-3: the NACK's message is the error.
    let (_, error) = status_of(&all, "csds-raw", "Cluster", &cluster).unwrap();
    assert_eq!(error.as_deref(), Some(NACK_MESSAGE));
    // PG-4: the Envoy holds no API listener, the gRPC client no socket listener.
    assert!(status_of(&all, "csds-envoy", "Listener", &named).is_none());
    assert!(status_of(&all, "csds-grpc", "Listener", &envoy_listener).is_none());

    // CS-4: a node matcher selects clients, on the stream RPC too.
    let only = csds(t.xds, &["--node-prefix", "csds-raw", "--stream"]);
    let nodes: Vec<&str> = only["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["node"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["csds-raw"], "{only}");
    drop(tx);
}
