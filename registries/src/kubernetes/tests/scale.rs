//! Endpoint lifecycle over the fake API server: scale-down removes terminating endpoints at once
//! (REG-4, BUG-1), endpoints wait for their pods (held, not dropped), slices merge, and the
//! namespace and label-selector settings limit what is served.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::*;
use crate::model::{Health, Locality};

const HOST: &str = "web.shop.svc.cluster.local";

fn slice_of(eps: &[SliceEndpoint]) -> EndpointSlice {
    objects::endpoint_slice("shop", "web-1", "web", &[("http", 8080)], eps)
}

fn ready(i: usize) -> SliceEndpoint {
    SliceEndpoint::ready(&format!("10.1.0.{}", i + 1))
        .pod(&format!("web-{i}"))
        .node("node-a")
}

#[tokio::test]
async fn scale_three_to_one_removes_endpoints_within_a_second() {
    // REG-4, BUG-1
    let c = FakeCluster::start().await;
    c.add_service(
        "shop",
        "web",
        "10.96.0.10",
        &["10.1.0.1", "10.1.0.2", "10.1.0.3"],
    );
    let mut run = Run::start(config("kube", "c1", &c.kubeconfig));
    run.wait("three endpoints", |r| {
        r.synced && r.endpoints(HOST).len() == 3
    })
    .await;

    // The EndpointSlice controller first marks the two going away as terminating (still
    // serving), later drops them from the slice.
    let start = Instant::now();
    c.server
        .apply(&slice_of(&[
            ready(0),
            ready(1).terminating(),
            ready(2).terminating(),
        ]))
        .unwrap();
    run.wait("one endpoint left", |r| r.endpoints(HOST) == ["10.1.0.1"])
        .await;
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "terminating endpoints left after {took:?}"
    );
    c.server.apply(&slice_of(&[ready(0)])).unwrap();
    let later = run.settle(Duration::from_millis(500)).await;
    assert!(
        later.is_empty(),
        "dropping already-terminated endpoints changes nothing: {later:?}"
    );
    eprintln!("scale 3->1: terminating endpoints left the registry's output after {took:?}");
}

#[tokio::test]
async fn endpoints_wait_for_their_pods_and_carry_pod_and_node_metadata() {
    let c = FakeCluster::start().await;
    let s = &c.server;
    s.apply(&objects::node("node-b", "eu-west", "eu-west-2b"))
        .unwrap();
    s.apply(&objects::service(
        "shop",
        "web",
        "10.96.0.10",
        &[("http", 80)],
    ))
    .unwrap();
    s.apply(&objects::pod(
        "shop",
        "web-0",
        &[("app", "web")],
        "web-sa",
        "node-b",
    ))
    .unwrap();
    let eps = [
        SliceEndpoint::ready("10.1.0.1").pod("web-0"),
        SliceEndpoint::ready("10.1.0.2").pod("web-1"),
    ];
    s.apply(&slice_of(&eps)).unwrap();
    let mut run = Run::start(config("kube", "c1", &c.kubeconfig));
    run.wait("synced", |r| r.synced).await;
    assert_eq!(
        run.endpoints(HOST),
        ["10.1.0.1"],
        "the endpoint of the unknown pod is held"
    );
    let ep = &run.view[&Hostname::new(HOST).unwrap()].endpoints[0];
    assert_eq!(
        ep.service_account,
        "spiffe://cluster.local/ns/shop/sa/web-sa"
    );
    assert_eq!(ep.locality, Locality::parse("eu-west/eu-west-2b/"));
    assert_eq!(ep.labels["app"], "web");
    assert_eq!(ep.labels["topology.istio.io/cluster"], "c1");
    assert_eq!(ep.ports["http"], 8080);
    assert_eq!(ep.origin.cluster.as_str(), "c1");
    // The pod arrives, with a locality override.
    s.apply(&objects::pod(
        "shop",
        "web-1",
        &[
            ("app", "web"),
            ("topology.istio.io/locality", "ap.ap-1.rack7"),
        ],
        "web-sa",
        "node-b",
    ))
    .unwrap();
    run.wait("the held endpoint", |r| r.endpoints(HOST).len() == 2)
        .await;
    let ep = &run.view[&Hostname::new(HOST).unwrap()].endpoints[1];
    assert_eq!(ep.locality, Locality::parse("ap/ap-1/rack7"));
    assert_eq!(ep.health, Health::Healthy);
}

#[tokio::test]
async fn slices_merge_and_a_deleted_slice_removes_only_its_endpoints() {
    // REG-4
    let c = FakeCluster::start().await;
    c.add_service("shop", "web", "10.96.0.10", &["10.1.0.1", "10.1.0.2"]);
    c.server
        .apply(&objects::pod(
            "shop",
            "web-x",
            &[("app", "web")],
            "web",
            "node-a",
        ))
        .unwrap();
    let second = [
        SliceEndpoint::ready("10.1.0.2").pod("web-1").node("node-a"),
        SliceEndpoint::ready("10.1.0.7").pod("web-x").node("node-a"),
    ];
    c.server
        .apply(&objects::endpoint_slice(
            "shop",
            "web-2",
            "web",
            &[("http", 8080)],
            &second,
        ))
        .unwrap();
    let mut run = Run::start(config("kube", "c1", &c.kubeconfig));
    run.wait("synced", |r| r.synced).await;
    assert_eq!(
        run.endpoints(HOST),
        ["10.1.0.1", "10.1.0.2", "10.1.0.7"],
        "the address in both slices is one endpoint"
    );
    c.server.delete::<EndpointSlice>("shop", "web-2");
    run.wait("only web-2's own endpoint gone", |r| {
        r.endpoints(HOST) == ["10.1.0.1", "10.1.0.2"]
    })
    .await;
    c.server.delete::<Service>("shop", "web");
    run.wait("the service deleted", |r| r.view.is_empty()).await;
    assert!(matches!(run.log.last(), Some(Change::Delete(h)) if h.as_str() == HOST));
}

#[tokio::test]
async fn namespaces_and_label_selector_limit_what_is_served() {
    let c = FakeCluster::start().await;
    c.add_service("shop", "web", "10.96.0.10", &["10.1.0.1"]);
    c.add_service("other", "web", "10.96.0.11", &["10.2.0.1"]);
    let mut labelled = objects::service("shop", "api", "10.96.0.12", &[("grpc-api", 9090)]);
    labelled.metadata.labels = Some([("expose".to_string(), "yes".to_string())].into());
    c.server.apply(&labelled).unwrap();
    let mut cfg = config("kube", "c1", &c.kubeconfig);
    cfg.namespaces = vec!["shop".into()];
    cfg.label_selector = Some("expose=yes".into());
    let mut run = Run::start(cfg);
    run.wait("synced", |r| r.synced).await;
    let hosts: Vec<&str> = run.view.keys().map(Hostname::as_str).collect();
    assert_eq!(hosts, ["api.shop.svc.cluster.local"]);
    let svc = &run.view[&Hostname::new("api.shop.svc.cluster.local").unwrap()].service;
    assert_eq!(svc.ports[0].protocol, crate::model::Protocol::Grpc);
    assert_eq!(
        svc.vips[&crate::model::ClusterId::new("c1")],
        ["10.96.0.12".parse::<std::net::IpAddr>().unwrap()]
    );
}
