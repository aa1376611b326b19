//! The admin's routes through `tower::ServiceExt::oneshot`, over a real snapshot (built by the
//! mesh builder) and the xDS server's real connection registry.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use envoy_types::pb::envoy::admin::v3::{ClustersConfigDump, ConfigDump, EndpointsConfigDump};
use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use prost::{Message, Name};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tributary_registries::Protocol;

use super::*;
use crate::envoy::fixtures::{ep, merged, port};
use crate::envoy::{GenerateOptions, ResourceType};
use crate::snapshot::MeshBuilder;
use crate::xds::{Connections, NodeInfo, TypeStatus};

const SIDECAR: &str = "sidecar~10.0.0.1~web-7d9f.shop~shop.svc.cluster.local";

struct Admin {
    state: AdminState,
    connections: Connections,
}

fn admin(config: Config) -> Admin {
    let store = SnapshotStore::new();
    let mut builder = MeshBuilder::new(GenerateOptions::default());
    let svc = merged(
        "web.shop.svc.cluster.local",
        vec![port("http", 80, Protocol::Http)],
        vec![ep("10.1.0.1")],
    );
    let snapshot = builder
        .apply(
            vec![(svc.service.hostname.clone(), Some(Arc::new(svc)))],
            Instant::now(),
        )
        .expect("a new service makes a snapshot");
    store.publish(snapshot);
    let connections = Connections::default();
    let state = AdminState {
        store,
        registries: RegistriesView::default(),
        xds: Arc::new(connections.clone()),
        config: Arc::new(config),
        draining: CancellationToken::new(),
        rules: tributary_registries::config_store::ConfigStore::new().0,
    };
    Admin { state, connections }
}

async fn get(state: &AdminState, uri: &str, token: Option<&str>) -> (StatusCode, String) {
    let mut req = Request::get(uri);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let resp = router(state.clone())
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// A connected proxy's registration and the state debug views read from it.
struct Connected {
    _registration: crate::xds::Registration,
    _types: Arc<parking_lot::Mutex<FixedStatus>>,
}

/// Per-type states that do not change.
struct FixedStatus(Vec<(ResourceType, TypeStatus)>);

impl crate::xds::StatusSource for FixedStatus {
    fn status(&self, ty: ResourceType) -> TypeStatus {
        self.0
            .iter()
            .find(|(t, _)| *t == ty)
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    }
}

/// Registers a connected proxy subscribed to CDS (wildcard) and to EDS for `eds_names`.
fn connect(c: &Connections, id: &str, eds_names: &[&str]) -> Connected {
    let node = NodeInfo {
        locality: None,
        id: Arc::from(id),
        cluster: Arc::from("web.shop"),
        metadata: None,
        listener_address: None,
        proxyless: false,
    };
    let registration = c.register(&node, None, false);
    let types = Arc::new(parking_lot::Mutex::new(FixedStatus(vec![
        (
            ResourceType::Cluster,
            TypeStatus {
                requested: true,
                wildcard: true,
                sent_version: Some("v1".into()),
                ..Default::default()
            },
        ),
        (
            ResourceType::Endpoint,
            TypeStatus {
                requested: true,
                names: eds_names.iter().map(|n| Arc::from(*n)).collect(),
                sent_version: Some("v2".into()),
                ..Default::default()
            },
        ),
    ])));
    registration.attach(Arc::downgrade(&types) as _);
    Connected {
        _registration: registration,
        _types: types,
    }
}

fn dump(body: &str) -> ConfigDump {
    crate::envoy::json::from_json::<ConfigDump>(body.as_bytes()).expect("parses as a ConfigDump")
}

#[tokio::test]
async fn istiod_paths_and_texts() {
    let a = admin(Config::default());
    assert_eq!(
        get(&a.state, "/ready", None).await,
        (StatusCode::OK, "ready\n".into())
    );
    let (s, body) = get(&a.state, "/nope", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(body.contains("see /debug"), "{body}");
    let (s, body) = get(&a.state, "/debug/config_dump", None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(body, "You must provide a proxyID in the query string\n");
    let (s, body) = get(&a.state, "/debug/config_dump?proxyID=ghost", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(body.starts_with("Proxy not connected to this tributary instance"));
    let resp = router(a.state.clone())
        .oneshot(Request::post("/ready").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    let (s, list) = get(&a.state, "/debug/list", None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(list.contains("/debug/config_dump"), "{list}");
}

#[tokio::test]
async fn proxy_id_takes_node_id_pod_namespace_and_percent_encoding() {
    let a = admin(Config::default());
    let _conn = connect(&a.connections, SIDECAR, &[]);
    let encoded = SIDECAR.replace('~', "%7E");
    for id in [
        SIDECAR,
        "web-7d9f.shop",
        encoded.as_str(),
        "web-7d9f%2Eshop",
    ] {
        let (s, body) = get(&a.state, &format!("/debug/config_dump?proxyID={id}"), None).await;
        assert_eq!(s, StatusCode::OK, "{id}: {body}");
        let (s, adsz) = get(&a.state, &format!("/debug/adsz?proxyID={id}"), None).await;
        assert_eq!(s, StatusCode::OK);
        assert!(adsz.contains("\"totalClients\":1"), "{id}: {adsz}");
    }
    // A pod of another namespace, or a prefix, is not this proxy.
    for id in ["web-7d9f.other", "web-7d9f", "10.0.0.1"] {
        let (s, _) = get(&a.state, &format!("/debug/config_dump?proxyID={id}"), None).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{id}");
    }
}

#[tokio::test]
async fn config_dump_is_an_envoy_config_dump_of_what_the_proxy_subscribed() {
    let a = admin(Config::default());
    let cla = "outbound|80||web.shop.svc.cluster.local";
    let _conn = connect(&a.connections, "n1", &[cla]);
    let (s, body) = get(&a.state, "/debug/config_dump?proxyID=n1", None).await;
    assert_eq!(s, StatusCode::OK, "{body}");
    let d = dump(&body);
    let kinds: Vec<&str> = d.configs.iter().map(|c| c.type_url.as_str()).collect();
    assert_eq!(
        kinds,
        [
            ClustersConfigDump::type_url(),
            "type.googleapis.com/envoy.admin.v3.ListenersConfigDump".to_string(),
            "type.googleapis.com/envoy.admin.v3.RoutesConfigDump".to_string(),
        ]
    );
    let clusters = ClustersConfigDump::decode(d.configs[0].value.as_slice()).unwrap();
    assert_eq!(clusters.version_info, "v1");
    let names: BTreeSet<String> = clusters
        .dynamic_active_clusters
        .iter()
        .map(|c| {
            assert!(c.last_updated.is_none(), "never sent: no time");
            let any = c.cluster.as_ref().unwrap();
            Cluster::decode(any.value.as_slice()).unwrap().name
        })
        .collect();
    assert_eq!(names, BTreeSet::from([cla.to_string()]));
    // Listeners and routes were never requested: empty sections, as Envoy's own.
    assert!(body.contains("\"@type\":\"type.googleapis.com/envoy.config.cluster.v3.Cluster\""));

    let (_, body) = get(&a.state, "/debug/config_dump?proxyID=n1&include_eds", None).await;
    let d = dump(&body);
    assert_eq!(d.configs.len(), 4);
    let eds = EndpointsConfigDump::decode(d.configs[1].value.as_slice()).unwrap();
    assert_eq!(eds.dynamic_endpoint_configs.len(), 1);
    assert_eq!(eds.dynamic_endpoint_configs[0].version_info, "v2");

    let (_, body) = get(&a.state, "/debug/config_dump?proxyID=n1&types=eds", None).await;
    let d = dump(&body);
    assert_eq!(d.configs.len(), 1);
    assert_eq!(d.configs[0].type_url, EndpointsConfigDump::type_url());
    let (s, body) = get(&a.state, "/debug/config_dump?proxyID=n1&types=xds", None).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(body.contains("\"xds\""), "{body}");
}

#[tokio::test]
async fn push_is_off_unless_allowed_and_needs_the_token_when_configured() {
    let a = admin(Config::default());
    let (s, body) = get(&a.state, "/debug/adsz?push=true", None).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{body}");
    assert!(body.contains("admin.allow_push"), "{body}");

    let mut open = Config::default();
    open.admin.allow_push = true;
    let a = admin(open);
    let _conn = connect(&a.connections, "n1", &[]);
    assert_eq!(
        get(&a.state, "/debug/adsz?push=true", None).await,
        (StatusCode::OK, "Pushed to 1 servers\n".into())
    );

    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let mut guarded = Config::default();
    guarded.admin.allow_push = true;
    guarded.admin.token_file = Some(token_file.clone());
    let a = admin(guarded);
    let (s, _) = get(&a.state, "/debug/adsz?push=true", None).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _) = get(&a.state, "/debug/adsz?push=true", Some("wrong")).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let (s, _) = get(&a.state, "/debug/adsz?push=true", Some("s3cret")).await;
    assert_eq!(s, StatusCode::OK);
    // Reading views never needs the token.
    let (s, _) = get(&a.state, "/debug/adsz", None).await;
    assert_eq!(s, StatusCode::OK);
    std::fs::remove_file(&token_file).unwrap();
    let (s, body) = get(&a.state, "/debug/adsz?push=true", Some("s3cret")).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{body}");
}

#[test]
fn push_beyond_loopback_without_a_token_is_a_config_error() {
    let mut c = Config {
        admin_addr: "0.0.0.0:15014".parse().unwrap(),
        ..Config::default()
    };
    assert!(
        c.validate().is_ok(),
        "reading views beyond loopback is allowed"
    );
    c.admin.allow_push = true;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("admin.token_file"), "{err}");
    c.admin.token_file = Some("/run/secrets/admin-token".into());
    assert!(c.validate().is_ok());
}

#[tokio::test]
async fn header_timeout_and_connection_cap_hold_on_a_real_socket() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut config = Config::default();
    config.admin.max_connections = 1;
    config.admin.header_read_timeout = std::time::Duration::from_millis(300);
    let a = admin(config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve(listener, a.state.clone(), shutdown.clone()));
    // A client that never finishes its headers holds the only slot...
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /ready HTTP/1.1\r\n").await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    // ...so another connection is closed at once, without an answer...
    let mut other = tokio::net::TcpStream::connect(addr).await.unwrap();
    other
        .write_all(b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .ok();
    let mut buf = Vec::new();
    let n = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        other.read_to_end(&mut buf),
    )
    .await
    .expect("closed, not left hanging");
    assert_eq!(n.unwrap_or(0), 0, "{}", String::from_utf8_lossy(&buf));
    // ...until the header timeout closes the slow one.
    let mut rest = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        slow.read_to_end(&mut rest),
    )
    .await
    .expect("the slow client is cut off by the header timeout")
    .ok();
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let mut ok = tokio::net::TcpStream::connect(addr).await.unwrap();
    ok.write_all(b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut resp = String::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        ok.read_to_string(&mut resp),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    shutdown.cancel();
    server.await.unwrap();
}
