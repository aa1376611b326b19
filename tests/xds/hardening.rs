//! Untrusted input at tributary's edges, in process over real loopback sockets
//! (docs/hardening.md): the control API only where configured and with its token; silent and
//! excess connections closed; hostile mock files rejected while every stream keeps being served.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use prost::Message;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tonic::transport::Channel;
use tonic::{Code, Streaming};
use tributary::config::{Config, ConnectionSettings, RegistryConfig};
use tributary::control_api::ControlApiConfig;
use tributary::runtime::Running;
use tributary_registries::RegistryStatus;
use tributary_registries::mock::MockConfig;
use tributary_registries::mock::proto::ListServicesRequest;
use tributary_registries::mock::proto::mock_registry_client::MockRegistryClient;

use crate::support;
use crate::support::raw_ads;

/// Upper bound on anything expected to happen; only paid when a test is about to fail.
const WAIT: Duration = Duration::from_secs(20);
/// The first-frames deadline of the connection test.
const SILENCE: Duration = Duration::from_secs(1);
/// How long a connection must stay open to count as "kept".
const KEPT: Duration = Duration::from_millis(500);

const GOOD: &str = "services:\n  - hostname: web.demo\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints:\n      - address: 10.0.0.1\n";
const WEB_CLUSTER: &str = "outbound|80||web.demo";

fn mock(file: Option<std::path::PathBuf>) -> RegistryConfig {
    let services = match file {
        Some(_) => vec![],
        None => serde_yaml::from_str::<MockConfig>(GOOD).unwrap().services,
    };
    RegistryConfig::Mock(MockConfig {
        file,
        services,
        ..MockConfig::default()
    })
}

async fn start(config: Config) -> Running {
    support::start_ready(config, WAIT).await
}

async fn list(addr: SocketAddr, token: Option<&str>) -> Result<usize, tonic::Status> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let header: Option<tonic::metadata::MetadataValue<_>> =
        token.map(|t| format!("Bearer {t}").parse().unwrap());
    let mut client =
        MockRegistryClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
            if let Some(h) = &header {
                req.metadata_mut().insert("authorization", h.clone());
            }
            Ok(req)
        });
    let resp = client.list_services(ListServicesRequest {}).await?;
    Ok(resp.into_inner().services.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_api_is_absent_unless_configured_and_never_on_the_xds_port() {
    let running = start(Config {
        registries: vec![mock(None)],
        ..Config::default()
    })
    .await;
    assert_eq!(running.control_addr, None);
    let err = list(running.xds_addr, None).await.unwrap_err();
    assert_eq!(err.code(), Code::Unimplemented, "{err}");
    running.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token-of-24-bytes\n").unwrap();
    let running = start(Config {
        registries: vec![mock(None)],
        control_api: Some(ControlApiConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            token_file: Some(token_file),
        }),
        ..Config::default()
    })
    .await;
    let control = running.control_addr.expect("served when configured");
    let err = list(control, None).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    let err = list(control, Some("s3cret-token-of-24-byteX"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "a wrong token: {err}");
    assert_eq!(
        list(control, Some("s3cret-token-of-24-bytes"))
            .await
            .unwrap(),
        1
    );
    let err = list(running.xds_addr, Some("s3cret-token-of-24-bytes"))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::Unimplemented,
        "not on the xDS port: {err}"
    );
    running.stop().await;
}

/// Whether the server closed `conn` within `within` (EOF or reset), or kept it open.
async fn closed_within(conn: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    loop {
        match tokio::time::timeout(within, conn.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // The server's SETTINGS frame: keep reading.
            Ok(Ok(_)) => continue,
        }
    }
}

/// An ADS stream asking for every cluster.
async fn ads(addr: SocketAddr) -> (mpsc::Sender<DiscoveryRequest>, Streaming<DiscoveryResponse>) {
    let ch = raw_ads::connect(addr).await.unwrap();
    raw_ads::open(ch, raw_ads::node("n1")).await.unwrap()
}

async fn cluster_names(stream: &mut Streaming<DiscoveryResponse>) -> Vec<String> {
    let resp = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("a response in time")
        .unwrap()
        .expect("stream open");
    resp.resources
        .iter()
        .map(|a| Cluster::decode(a.value.as_slice()).unwrap().name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_are_closed_and_each_peer_is_capped() {
    let running = start(Config {
        registries: vec![mock(None)],
        connections: ConnectionSettings {
            first_frames_timeout: SILENCE,
            max_connections_per_peer: 3,
            ..ConnectionSettings::default()
        },
        ..Config::default()
    })
    .await;
    // A gRPC client that spoke stays past the deadline and keeps its stream.
    let (_tx, mut stream) = ads(running.xds_addr).await;
    assert_eq!(cluster_names(&mut stream).await, [WEB_CLUSTER]);
    // A TCP connection that never speaks is closed after the deadline.
    let mut silent = TcpStream::connect(running.xds_addr).await.unwrap();
    assert!(
        closed_within(&mut silent, WAIT).await,
        "silent connection kept"
    );

    // Per peer: the gRPC connection plus two silent ones fill 127.0.0.1's 3 slots; a fourth is
    // closed while the two silent ones, accepted earlier, are still open: refused, not timed out.
    let mut a = TcpStream::connect(running.xds_addr).await.unwrap();
    let mut b = TcpStream::connect(running.xds_addr).await.unwrap();
    let mut excess = TcpStream::connect(running.xds_addr).await.unwrap();
    assert!(closed_within(&mut excess, WAIT).await);
    assert!(
        !closed_within(&mut a, Duration::from_millis(1)).await,
        "the excess connection was refused before the earlier silent ones timed out"
    );
    // Once the silent ones are gone, their slots are free again.
    assert!(closed_within(&mut a, WAIT).await && closed_within(&mut b, WAIT).await);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (_tx2, mut stream2) = ads(running.xds_addr).await;
    assert_eq!(cluster_names(&mut stream2).await, [WEB_CLUSTER]);
    // The first stream was never disturbed.
    assert!(
        tokio::time::timeout(KEPT, stream.message()).await.is_err(),
        "no push and no end on the first stream"
    );
    running.stop().await;
}

async fn wait_degraded(running: &Running, what: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let state = running.mocks[0].state().await.unwrap();
        if let RegistryStatus::Degraded { reason } = state.status {
            return reason;
        }
        assert!(Instant::now() < deadline, "{what} not rejected in {WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_mock_files_are_rejected_while_every_stream_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mesh.yaml");
    std::fs::write(&file, GOOD).unwrap();
    let running = start(Config {
        registries: vec![mock(Some(file.clone()))],
        ..Config::default()
    })
    .await;
    let (_tx, mut stream) = ads(running.xds_addr).await;
    assert_eq!(cluster_names(&mut stream).await, [WEB_CLUSTER]);

    let nested = format!("services: {}{}", "[".repeat(100_000), "]".repeat(100_000));
    let mut bomb = String::from(
        "services:\n  - &s\n    hostname: a.b\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints:\n",
    );
    for i in 0..1_000 {
        bomb.push_str(&format!(
            "      - {{address: 10.1.{}.{}}}\n",
            i / 250,
            i % 250
        ));
    }
    bomb.push_str(&"  - *s\n".repeat(10_000));
    for (what, text, says) in [
        ("100,000 nested [", nested, "nested deeper than"),
        ("the alias bomb", bomb, "expands past the size limit"),
    ] {
        std::fs::write(&file, text).unwrap();
        // Another proxy connecting meanwhile is served the last good mesh at once.
        let (_tx, mut other) = ads(running.xds_addr).await;
        assert_eq!(cluster_names(&mut other).await, [WEB_CLUSTER], "{what}");
        let reason = wait_degraded(&running, what).await;
        assert!(reason.contains(says), "{what}: {reason}");
        let (_tx, mut after) = ads(running.xds_addr).await;
        assert_eq!(cluster_names(&mut after).await, [WEB_CLUSTER], "{what}");
        // Back to a good file (a real change, so the next write is a change too).
        std::fs::write(&file, GOOD).unwrap();
        let deadline = Instant::now() + WAIT;
        while !matches!(
            running.mocks[0].state().await.unwrap().status,
            RegistryStatus::Healthy
        ) {
            assert!(
                Instant::now() < deadline,
                "never healthy again after {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // The first stream saw no push: nothing it holds changed.
    assert!(tokio::time::timeout(KEPT, stream.message()).await.is_err());
    running.stop().await;
}
