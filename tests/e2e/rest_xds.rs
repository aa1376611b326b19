//! REST-JSON xDS (REST-1..REST-4 in docs/rest-xds.md): a real Envoy on the bootstrap
//! `tributary bootstrap --rest` prints polls CDS/LDS/EDS/RDS as JSON over HTTP/1.1, routes traffic
//! and follows an endpoint change; a raw poll with the current version gets 304, bad input 400.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::harness::{
    Backend, Tributary, envoy_serving_web, free_port, loopback, mesh, move_web, no_rejections,
};

/// A minimal HTTP/1.1 POST of a JSON body; returns (status, body).
async fn post(addr: SocketAddr, path: &str, json: &serde_json::Value) -> (u16, String) {
    let body = json.to_string();
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: tributary\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .expect("answer in time")
        .unwrap();
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text.split(' ').nth(1).unwrap().parse().unwrap();
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string());
    (status, body.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_envoy_routes_traffic_and_follows_an_endpoint_change() {
    let dir = tempfile::tempdir().unwrap();
    let a = Backend::start("backend-a").await;
    let b = Backend::start("backend-b").await;
    let port = free_port();
    let listener = loopback(port);
    let (t, file) = Tributary::on_mesh(dir.path(), &mesh(port, &[a.addr]), &[]).await;
    // REST-1: CDS/LDS over REST from the bootstrap; REST-3: EDS/RDS over REST from the resources.
    let envoy = envoy_serving_web(
        dir.path(),
        "rest",
        t.xds,
        &["--rest"],
        listener,
        Duration::from_secs(15),
    )
    .await;
    let took = move_web(&file, port, b.addr, "backend-b").await;
    println!("REST: endpoint change → traffic moved in {took:?} (1 s polls)");
    no_rejections(&envoy).await;
    let dump = envoy.config_dump().await.to_string();
    assert!(
        dump.contains("\"api_type\":\"REST\"") && !dump.contains("\"ads\":{}"),
        "Envoy's clusters and listeners use REST sources, not ADS"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_poll_with_current_version_gets_304_and_bad_input_400() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (t, _file) =
        Tributary::on_mesh(dir.path(), &mesh(port, &[loopback(free_port())]), &[]).await;
    let node = serde_json::json!({ "id": "rest-raw", "cluster": "test" });
    let (status, body) = post(
        t.xds,
        "/v3/discovery:clusters",
        &serde_json::json!({ "node": node }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let version = v["versionInfo"].as_str().expect("versionInfo").to_string();
    let cluster = &v["resources"][0];
    assert_eq!(
        cluster["@type"],
        "type.googleapis.com/envoy.config.cluster.v3.Cluster"
    );
    assert_eq!(cluster["name"], format!("outbound|{port}||web.e2e.local"));
    assert_eq!(
        cluster["edsClusterConfig"]["edsConfig"]["apiConfigSource"]["apiType"],
        "REST"
    );

    // REST-2: the current version → 304, nothing new.
    let (status, body) = post(
        t.xds,
        "/v3/discovery:clusters",
        &serde_json::json!({ "node": node, "versionInfo": version }),
    )
    .await;
    assert_eq!(status, 304, "{body}");

    // Named EDS: only what is asked for and exists; the same version string as gRPC would carry.
    let name = format!("outbound|{port}||web.e2e.local");
    let (status, body) = post(
        t.xds,
        "/v3/discovery:endpoints",
        &serde_json::json!({ "node": node, "resourceNames": [name, "outbound|1||absent"] }),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["resources"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["resources"][0]["clusterName"], name);

    // REST-4: bad input is a 400 that says what is wrong.
    let (status, body) = post(t.xds, "/v3/discovery:routes", &serde_json::json!({})).await;
    assert_eq!(status, 400);
    assert!(body.contains("node"), "{body}");
    let (status, body) = post(
        t.xds,
        "/v3/discovery:routes",
        &serde_json::json!({ "node": node, "typeUrl": "type.googleapis.com/envoy.config.cluster.v3.Cluster" }),
    )
    .await;
    assert_eq!(status, 400);
    assert!(body.contains("type_url"), "{body}");
}
