//! Proxyless gRPC over the incremental protocol, with a raw client (the grpcio and grpc-js clients
//! speak SotW only): named API listeners are sent when they exist, answered as
//! `removed_resources` when they do not (DELTA-10, PG-1), and sent again when they appear; an Envoy
//! node's wildcard LDS on the same server never holds them (PG-4).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse,
};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use crate::support::harness::{Tributary, free_port, loopback, replace_file};
use crate::support::proxyless::grpc_mesh;
use crate::support::type_url::LDS;

const HOST: &str = "greeter.delta.local";
const WAIT: Duration = Duration::from_secs(10);

struct Raw {
    tx: mpsc::Sender<DeltaDiscoveryRequest>,
    rx: Streaming<DeltaDiscoveryResponse>,
}

impl Raw {
    async fn open(addr: std::net::SocketAddr, node: Node) -> Raw {
        let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
        let (tx, req_rx) = mpsc::channel(16);
        tx.send(DeltaDiscoveryRequest {
            node: Some(node),
            type_url: LDS.into(),
            ..Default::default()
        })
        .await
        .unwrap();
        let rx = client
            .delta_aggregated_resources(ReceiverStream::new(req_rx))
            .await
            .expect("stream")
            .into_inner();
        Raw { tx, rx }
    }

    async fn send(&self, req: DeltaDiscoveryRequest) {
        self.tx.send(req).await.expect("stream open");
    }

    async fn next(&mut self) -> DeltaDiscoveryResponse {
        let resp = tokio::time::timeout(WAIT, self.rx.message())
            .await
            .expect("a response in time")
            .expect("no error")
            .expect("stream open");
        // Every response is acknowledged, as a client does.
        self.send(DeltaDiscoveryRequest {
            type_url: resp.type_url.clone(),
            response_nonce: resp.nonce.clone(),
            ..Default::default()
        })
        .await;
        resp
    }
}

fn names(resp: &DeltaDiscoveryResponse) -> Vec<&str> {
    resp.resources.iter().map(|r| r.name.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_api_listeners_over_delta_appear_vanish_and_return() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let backend = loopback(free_port());
    let (t, file) = Tributary::on_mesh(dir.path(), &grpc_mesh(HOST, port, &[backend]), &[]).await;
    let grpc_node = Node {
        id: "delta-grpc".into(),
        user_agent_name: "gRPC raw test".into(),
        ..Default::default()
    };
    let mut c = Raw::open(t.xds, grpc_node).await;
    // The initial request subscribed to nothing; now name one that exists and one that does not.
    let named = format!("{HOST}:{port}");
    c.send(DeltaDiscoveryRequest {
        type_url: LDS.into(),
        resource_names_subscribe: vec![named.clone(), "absent.delta.local:1".into()],
        ..Default::default()
    })
    .await;
    let mut got = Vec::new();
    let mut removed = Vec::new();
    while !(got.contains(&named) && removed.iter().any(|n| n == "absent.delta.local:1")) {
        let resp = c.next().await;
        got.extend(names(&resp).into_iter().map(String::from));
        removed.extend(resp.removed_resources.iter().cloned());
    }
    assert!(!got.iter().any(|n| n.starts_with("0.0.0.0_")), "{got:?}");

    // Removing the service removes the named listener; re-adding it sends it again (DELTA-9).
    replace_file(&file, "services: []\n");
    loop {
        let resp = c.next().await;
        if resp.removed_resources.contains(&named) {
            break;
        }
    }
    replace_file(&file, &grpc_mesh(HOST, port, &[backend]));
    let listener = loop {
        let resp = c.next().await;
        if let Some(r) = resp.resources.iter().find(|r| r.name == named) {
            break r.resource.clone().expect("a resource");
        }
    };
    let l = Listener::decode(listener.value.as_slice()).unwrap();
    assert!(l.api_listener.is_some(), "PG-1: an API listener: {l:?}");

    // PG-4: an Envoy's wildcard LDS on the same server holds socket listeners only.
    let envoy_node = Node {
        id: "delta-envoy".into(),
        user_agent_name: "envoy".into(),
        ..Default::default()
    };
    let mut e = Raw::open(t.xds, envoy_node).await;
    let resp = e.next().await;
    assert_eq!(names(&resp), [format!("0.0.0.0_{port}")]);
}
