//! The xDS config source against the test MCP server on loopback: objects and rules arrive over
//! delta and SotW, responses are ACKed or NACKed, an invalid object is rejected alone, and the
//! source falls back to SotW when delta is not served.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::*;
use crate::config_store::ConfigStore;
use crate::istio_api::proto::istio::mcp::v1alpha1 as mcp;
use crate::istio_api::{DESTINATION_RULE, SERVICE_ENTRY};
use crate::model::RegistryId;
use crate::registry::RegistryStatus;
use crate::rules::RuleSet;
use crate::serviceentry::tests::{LIMIT, Run};
use crate::serviceentry::{ServiceEntryConfig, ServiceEntryRegistry};
use crate::test_util::mcp_server::{McpServer, SeenRequest, resource_of, wire};

const SE: &str = "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: shop, labels: {team: a}}
spec:
  hosts: [api.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  location: MESH_INTERNAL
  resolution: STATIC
  endpoints: [{address: 10.0.0.1, labels: {version: v1}}]
";

const DR: &str = "apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: api, namespace: shop}
spec:
  host: api.example.com
  subsets:
  - {name: v1, labels: {version: v1}}
";

fn config(server: &McpServer, protocol: XdsProtocol) -> ServiceEntryConfig {
    ServiceEntryConfig {
        name: format!("xds://{}", server.addr()),
        xds: Some(XdsSourceConfig {
            address: server.addr().to_string(),
            protocol,
            retry_initial: Duration::from_millis(20),
            retry_max: Duration::from_millis(200),
            ..XdsSourceConfig::default()
        }),
        ..ServiceEntryConfig::default()
    }
}

fn start(config: ServiceEntryConfig) -> (Run, watch::Receiver<Arc<RuleSet>>) {
    let (store, rx) = ConfigStore::new();
    let publisher = store.publisher(RegistryId::new(&config.name));
    let run = Run::start_registry(ServiceEntryRegistry::new(config).with_rules(publisher));
    (run, rx)
}

/// Waits until the server has read a request matching `f`.
async fn request(server: &McpServer, what: &str, f: impl Fn(&SeenRequest) -> bool) -> SeenRequest {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        if let Some(r) = server.requests().into_iter().find(|r| f(r)) {
            return r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no request {what}: {:?}",
            server.requests()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn delta_by_default_services_and_rules_arrive_and_every_response_is_acked() {
    let server = McpServer::start(true).await.unwrap();
    server.set_objects(&[SE, DR]).unwrap();
    let (mut run, mut rules) = start(config(&server, XdsProtocol::Delta));
    run.wait("synced with the service", |r| {
        r.synced && r.get("api.example.com").is_some()
    })
    .await;
    let state = run.get("api.example.com").unwrap();
    assert_eq!(state.endpoints.len(), 1);
    assert_eq!(
        state.service.labels.get("team").map(String::as_str),
        Some("a")
    );
    let rules = rules
        .wait_for(|r| r.destination_rules.len() == 1)
        .await
        .unwrap()
        .clone();
    let dr = &rules.destination_rules[0];
    assert_eq!(
        (dr.meta.namespace.as_str(), dr.meta.name.as_str()),
        ("shop", "api")
    );
    assert_eq!(
        dr.meta.source,
        format!("xds://{} {}", server.addr(), DESTINATION_RULE.type_url)
    );
    // DELTA-4: four wildcard subscriptions with the default node id; DELTA-2: each response is
    // ACKed by its nonce, without error_detail.
    for c in &crate::istio_api::COLLECTIONS {
        let ack = request(&server, "an ACK", |r| {
            r.delta && r.type_url == c.type_url && !r.response_nonce.is_empty()
        })
        .await;
        assert_eq!(ack.error, None);
        assert_eq!(ack.node_id, DEFAULT_NODE_ID);
    }

    // A change arrives as a change; a removal removes.
    server
        .set_objects(&[&SE.replace("10.0.0.1", "10.0.0.2")])
        .unwrap();
    run.wait("the new endpoint", |r| {
        r.get("api.example.com")
            .is_some_and(|s| s.endpoints[0].address == "10.0.0.2")
    })
    .await;
    server.set_objects(&[]).unwrap();
    run.wait("the service gone", |r| r.get("api.example.com").is_none())
        .await;
    assert!(run.rejected.is_empty(), "{:?}", run.rejected);
}

#[tokio::test]
async fn a_server_without_delta_gets_sotw() {
    let server = McpServer::start(false).await.unwrap();
    server.set_objects(&[SE]).unwrap();
    let (mut run, _rules) = start(config(&server, XdsProtocol::Delta));
    run.wait("synced over SotW", |r| {
        r.synced && r.get("api.example.com").is_some()
    })
    .await;
    // SOTW-11: the ACK repeats the response's version and nonce.
    let ack = request(&server, "a SotW ACK", |r| {
        !r.delta && r.type_url == SERVICE_ENTRY.type_url && !r.response_nonce.is_empty()
    })
    .await;
    assert_eq!((ack.version_info.as_str(), ack.error), ("1", None));
    assert_eq!(run.status, RegistryStatus::Healthy);
}

#[tokio::test]
async fn an_unidentifiable_resource_is_nacked_and_the_collection_keeps_its_objects() {
    for protocol in [XdsProtocol::Sotw, XdsProtocol::Delta] {
        let server = McpServer::start(true).await.unwrap();
        server.set_objects(&[SE]).unwrap();
        let (mut run, _rules) = start(config(&server, protocol));
        run.wait("synced", |r| r.synced && r.get("api.example.com").is_some())
            .await;
        let garbage = envoy_types::pb::google::protobuf::Any {
            type_url: SERVICE_ENTRY.type_url.into(),
            value: vec![0xff, 0xff, 0xff],
        };
        server.set_raw(SERVICE_ENTRY.type_url, vec![("shop/x".into(), garbage)]);
        // SOTW-12 / DELTA-2: a NACK carries error_detail; SOTW-15: the version of a SotW NACK
        // is the one still in use.
        let nack = request(&server, "a NACK", |r| r.error.is_some()).await;
        let why = nack.error.clone().unwrap_or_default();
        assert!(why.contains("not an istio.mcp.v1alpha1.Resource"), "{why}");
        if protocol == XdsProtocol::Sotw {
            assert_eq!(nack.version_info, "1");
        }
        run.wait(
            "degraded by the NACK",
            |r| matches!(&r.status, RegistryStatus::Degraded { reason } if reason.contains("NACK")),
        )
        .await;
        assert!(run.get("api.example.com").is_some(), "nothing withdrawn");
        server.set_objects(&[SE]).unwrap();
        run.wait("healthy again", |r| r.status == RegistryStatus::Healthy)
            .await;
        assert!(run.get("api.example.com").is_some());
    }
}

#[tokio::test]
async fn an_invalid_object_is_rejected_alone_and_the_response_acked() {
    let server = McpServer::start(true).await.unwrap();
    let bad = SE
        .replace("name: api,", "name: bad,")
        .replace("api.example.com", "bad.example.com")
        .replace("number: 80", "number: 0");
    server.set_objects(&[SE, &bad]).unwrap();
    let (mut run, _rules) = start(config(&server, XdsProtocol::Delta));
    run.wait("synced with a rejection", |r| {
        r.synced && r.get("api.example.com").is_some() && !r.rejected.is_empty()
    })
    .await;
    assert!(run.get("bad.example.com").is_none());
    // REG-11: reported with its field, from where it came, like a file's object.
    let r = run.rejections_of("ServiceEntry shop/bad");
    assert_eq!(r.len(), 1, "{:?}", run.rejected);
    assert_eq!(r[0].field, "spec.ports[0].number");
    assert_eq!(
        r[0].source,
        format!("xds://{} {}", server.addr(), SERVICE_ENTRY.type_url)
    );
    assert!(server.requests().iter().all(|r| r.error.is_none()));

    // A body that is not the collection's message is that object's problem too.
    let undecodable = mcp::Resource {
        metadata: Some(mcp::Metadata {
            name: "shop/broken".into(),
            ..mcp::Metadata::default()
        }),
        body: Some(prost_types::Any {
            type_url: SERVICE_ENTRY.body_type_url(),
            value: vec![0xff, 0xff],
        }),
    };
    let (_, name, api) = resource_of(SE).unwrap();
    let broken = wire(&SERVICE_ENTRY, &undecodable);
    let before = server.requests().len();
    server.set_raw(
        SERVICE_ENTRY.type_url,
        vec![(name, api), ("shop/broken".into(), broken)],
    );
    run.wait("the undecodable body rejected", |r| {
        !r.rejections_of("ServiceEntry shop/broken").is_empty()
    })
    .await;
    let r = run.rejections_of("ServiceEntry shop/broken");
    assert!(r[0].message.contains("does not decode"), "{}", r[0].message);
    assert!(run.get("api.example.com").is_some());
    assert!(
        server.requests()[before..]
            .iter()
            .all(|r| r.error.is_none())
    );
}

#[tokio::test]
async fn unreadable_tls_files_are_a_config_error() {
    let server = McpServer::start(true).await.unwrap();
    let mut c = config(&server, XdsProtocol::Delta);
    if let Some(x) = c.xds.as_mut() {
        x.tls = Some(XdsTlsConfig {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..XdsTlsConfig::default()
        });
    }
    let e = Settings::new(c.xds.clone().unwrap(), "default".into()).unwrap_err();
    assert!(
        e.to_string().contains("tls.ca_file /nonexistent/ca.pem"),
        "{e}"
    );
}
