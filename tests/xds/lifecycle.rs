//! tributary's lifecycle over real sockets, in process: graceful shutdown in order (TRANS-8) and
//! connection age (TRANS-9).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use tokio::sync::mpsc;
use tonic::{Code, Status, Streaming};
use tributary::config::{Config, ConnectionSettings, ShutdownSettings};
use tributary::runtime::Running;

use crate::support;
use crate::support::harness::http_get;
use crate::support::raw_ads;

const WAIT: Duration = Duration::from_secs(10);

async fn start(config: Config) -> Running {
    support::start_ready(config, WAIT).await
}

/// An ADS stream asking for every cluster, with its first response.
async fn ads(
    addr: std::net::SocketAddr,
) -> Result<
    (
        mpsc::Sender<DiscoveryRequest>,
        Streaming<DiscoveryResponse>,
        DiscoveryResponse,
    ),
    Status,
> {
    raw_ads::open_first(raw_ads::connect(addr).await?, raw_ads::node("n1"), WAIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_turns_unready_then_drains_streams_without_pushing() {
    // TRANS-8: readiness false first; then live streams end UNAVAILABLE with no response (empty or
    // partial) before it; new connections are refused; the whole stop fits in the grace period.
    let drain_delay = Duration::from_millis(500);
    let running = start(Config {
        shutdown: ShutdownSettings {
            drain_delay,
            grace_period: Duration::from_secs(3),
        },
        ..Config::default()
    })
    .await;
    let (xds, admin, store) = (running.xds_addr, running.admin_addr, running.store.clone());
    let before = store.load().expect("a snapshot");
    let (_tx, mut stream, first) = ads(xds).await.unwrap();
    assert!(!first.resources.is_empty());
    assert_eq!(
        http_get(admin, "localhost", "/ready").await.map(|r| r.0),
        Some(200)
    );

    let t0 = Instant::now();
    let stop = tokio::spawn(running.stop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ready = http_get(admin, "localhost", "/ready").await;
    assert_eq!(ready.as_ref().map(|r| r.0), Some(503), "{ready:?}");
    assert!(ready.unwrap().1.contains("shutting down"));

    let end = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("the stream ends");
    match end {
        Err(status) => assert_eq!(status.code(), Code::Unavailable, "{status:?}"),
        Ok(Some(resp)) => panic!(
            "a response was pushed during shutdown ({} resources)",
            resp.resources.len()
        ),
        Ok(None) => panic!("the stream ended without a status"),
    }
    assert!(
        t0.elapsed() >= drain_delay,
        "streams are drained only after readiness had time to propagate"
    );
    tokio::time::timeout(Duration::from_secs(5), stop)
        .await
        .expect("stop finishes within the grace period")
        .unwrap();
    println!("shutdown took {:?}", t0.elapsed());
    assert!(ads(xds).await.is_err(), "no new streams after shutdown");
    let after = store.load().expect("still a snapshot");
    assert!(
        Arc::ptr_eq(&before, &after),
        "nothing was published during shutdown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_recycled_after_max_age_and_reconnect_to_the_same_config() {
    // TRANS-9: after max age (+ grace) the connection closes; a reconnect sees identical config.
    let running = start(Config {
        connections: ConnectionSettings {
            max_connection_age: Some(Duration::from_millis(500)),
            max_connection_age_grace: Duration::from_millis(500),
            ..ConnectionSettings::default()
        },
        ..Config::default()
    })
    .await;
    let (_tx, mut stream, first) = ads(running.xds_addr).await.unwrap();
    let t0 = Instant::now();
    let end = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("the aged connection closes");
    assert!(end.is_err(), "ended with a status, got {end:?}");
    let lived = t0.elapsed();
    assert!(lived < Duration::from_secs(5), "closed after {lived:?}");
    let (_tx2, _s2, again) = ads(running.xds_addr).await.unwrap();
    assert_eq!(again.version_info, first.version_info, "same version");
    assert_eq!(again.resources, first.resources, "same resources");
    running.stop().await;
}
