//! Watch semantics: relists are atomic and report only real differences (REG-1, REG-14), normal
//! watch ends resume without relisting and duplicates report nothing (REG-3), bookmarks are
//! honoured, and the HTTP-410 guard relists.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::*;

const HOST: &str = "web.shop.svc.cluster.local";

/// Longer than a relist with the test config's 20 ms retry, with room for slow CI.
const QUIET: Duration = Duration::from_millis(1500);

/// A registry synced against `c`, with every kind's watch open.
async fn synced(c: &FakeCluster) -> Run {
    let mut run = Run::start(config("kube", "c1", &c.kubeconfig));
    run.wait("initial sync", |r| r.synced).await;
    until("every watch open", || {
        c.server.counts::<Service>().watches > 0
            && c.server.counts::<EndpointSlice>().watches > 0
            && c.server.counts::<Pod>().watches > 0
            && c.server.counts::<Node>().watches > 0
    })
    .await;
    run
}

#[tokio::test]
async fn relist_after_410_gives_one_diff_and_never_an_empty_or_partial_state() {
    // REG-1
    let c = FakeCluster::start().await;
    c.add_service(
        "shop",
        "web",
        "10.96.0.10",
        &["10.1.0.1", "10.1.0.2", "10.1.0.3"],
    );
    let mut run = synced(&c).await;
    assert_eq!(run.endpoints(HOST).len(), 3);
    let lists = c.server.counts::<EndpointSlice>().lists;

    // The watch is told its version is gone; while the relist is on its way (slow lists), one
    // endpoint is removed and one added.
    c.server.set_list_delay(Duration::from_millis(300));
    c.server.expire::<EndpointSlice>();
    c.server
        .apply(&objects::pod(
            "shop",
            "web-9",
            &[("app", "web")],
            "web",
            "node-a",
        ))
        .unwrap();
    let eps = ["10.1.0.1", "10.1.0.3", "10.1.0.9"];
    let pods = ["web-0", "web-2", "web-9"];
    let slice_eps: Vec<SliceEndpoint> = eps
        .iter()
        .zip(pods)
        .map(|(ip, pod)| SliceEndpoint::ready(ip).pod(pod).node("node-a"))
        .collect();
    c.server
        .apply(&objects::endpoint_slice(
            "shop",
            "web-1",
            "web",
            &[("http", 8080)],
            &slice_eps,
        ))
        .unwrap();
    // The new slice reached the client only through the relist: the compacted watch was ended.
    let service_before = run.view[&Hostname::new(HOST).unwrap()].service.clone();
    run.wait("the relisted endpoints", |r| r.endpoints(HOST) == eps)
        .await;
    let changes = run.settle(QUIET).await;
    assert!(
        changes.is_empty(),
        "nothing after the one diff: {changes:?}"
    );
    let upserts: Vec<&Change> = run.log.iter().skip(1).collect();
    assert_eq!(
        upserts.len(),
        1,
        "exactly one change for the relist: {upserts:?}"
    );
    assert_eq!(
        run.view[&Hostname::new(HOST).unwrap()].service,
        service_before,
        "the service itself (CDS input) did not change"
    );
    assert_eq!(
        c.server.counts::<EndpointSlice>().lists,
        lists + 1,
        "one relist"
    );
}

/// Services in the REG-14 test; with their slices and pods, over a thousand objects.
const SERVICES: usize = 340;

#[tokio::test]
async fn a_thousand_unchanged_objects_relisted_report_nothing() {
    // REG-14
    let c = FakeCluster::start().await;
    for i in 0..SERVICES {
        let ip = format!("10.2.{}.{}", i / 200, i % 200 + 1);
        c.add_service(
            "bulk",
            &format!("svc-{i}"),
            &format!("10.97.{}.{}", i / 200, i % 200 + 1),
            &[&ip],
        );
    }
    // 340 Services + 340 EndpointSlices + 340 Pods + 1 Node: over a thousand objects, listed in
    // pages of 100 (continue tokens).
    c.server.set_max_page_size(Some(100));
    let started = std::time::Instant::now();
    let mut run = synced(&c).await;
    eprintln!(
        "initial sync of {} objects: {:?}",
        3 * SERVICES + 1,
        started.elapsed()
    );
    assert_eq!(run.view.len(), SERVICES);
    let before: [usize; 4] = [
        c.server.counts::<Service>().lists,
        c.server.counts::<EndpointSlice>().lists,
        c.server.counts::<Pod>().lists,
        c.server.counts::<Node>().lists,
    ];
    let relist = std::time::Instant::now();
    c.server.expire::<Service>();
    c.server.expire::<EndpointSlice>();
    c.server.expire::<Pod>();
    c.server.expire::<Node>();
    until("every kind relisted", || {
        c.server.counts::<Service>().lists >= before[0] + 4
            && c.server.counts::<EndpointSlice>().lists >= before[1] + 4
            && c.server.counts::<Pod>().lists >= before[2] + 4
            && c.server.counts::<Node>().lists > before[3]
    })
    .await;
    eprintln!(
        "relist of every kind requested and served: {:?}",
        relist.elapsed()
    );
    let changes = run.settle(QUIET).await;
    assert!(
        changes.is_empty(),
        "an unchanged relist reports nothing: {} changes",
        changes.len()
    );
    assert_eq!(
        run.status,
        RegistryStatus::Healthy,
        "a 410 is not an outage"
    );
}

#[tokio::test]
async fn watch_timeouts_resume_without_relisting_and_duplicates_report_nothing() {
    // REG-3
    let c = FakeCluster::start().await;
    c.add_service("shop", "web", "10.96.0.10", &["10.1.0.1", "10.1.0.2"]);
    c.server.set_watch_timeout(Some(Duration::from_millis(200)));
    let mut run = synced(&c).await;
    let lists = c.server.counts::<EndpointSlice>().lists;
    let watches = c.server.counts::<EndpointSlice>().watches;
    for _ in 0..3 {
        c.server.touch::<EndpointSlice>("shop", "web-1").unwrap();
        c.server.touch::<Service>("shop", "web").unwrap();
        c.server.touch::<Pod>("shop", "web-0").unwrap();
        c.server.touch::<Node>("", "node-a").unwrap();
    }
    let changes = run.settle(QUIET).await;
    assert!(
        changes.is_empty(),
        "duplicate events report nothing: {changes:?}"
    );
    assert!(
        c.server.counts::<EndpointSlice>().watches >= watches + 3,
        "the watch ended and resumed several times"
    );
    assert_eq!(c.server.counts::<EndpointSlice>().lists, lists, "no relist");
    // A real change still arrives over the resumed watches.
    c.server
        .apply(&objects::pod(
            "shop",
            "web-0",
            &[("app", "web"), ("version", "v2")],
            "web",
            "node-a",
        ))
        .unwrap();
    run.wait("the pod's new label on its endpoint", |r| {
        r.view
            .get(&Hostname::new(HOST).unwrap())
            .is_some_and(|s| s.endpoints[0].labels.get("version").map(String::as_str) == Some("v2"))
    })
    .await;
}

#[tokio::test]
async fn bookmarks_move_the_resume_version_past_compaction() {
    // REG-3: a kind with no events of its own resumes from its bookmark; without one it relists.
    let c = FakeCluster::start().await;
    c.add_service("shop", "web", "10.96.0.10", &["10.1.0.1"]);
    let mut run = synced(&c).await;
    // Other kinds move the global version on.
    for i in 0..5 {
        c.server
            .apply(&objects::node(&format!("n{i}"), "r", "z"))
            .unwrap();
    }
    c.server.bookmark::<EndpointSlice>();
    // Let the bookmark reach the client before its watch ends.
    tokio::time::sleep(Duration::from_millis(200)).await;
    c.server.compact::<EndpointSlice>();
    c.server.compact::<Pod>();
    let slices = c.server.counts::<EndpointSlice>().lists;
    let pods = c.server.counts::<Pod>().lists;
    let slice_watches = c.server.counts::<EndpointSlice>().watches;
    c.server.end_watches::<EndpointSlice>();
    c.server.end_watches::<Pod>();
    until("pods relisted (no bookmark)", || {
        c.server.counts::<Pod>().lists > pods
    })
    .await;
    until("slices watched again", || {
        c.server.counts::<EndpointSlice>().watches > slice_watches
    })
    .await;
    let changes = run.settle(QUIET).await;
    assert_eq!(
        c.server.counts::<EndpointSlice>().lists,
        slices,
        "slices resumed from the bookmark"
    );
    assert!(changes.is_empty(), "{changes:?}");
}

#[tokio::test]
async fn an_http_410_at_watch_start_relists_instead_of_retrying_forever() {
    let c = FakeCluster::start().await;
    c.add_service("shop", "web", "10.96.0.10", &["10.1.0.1"]);
    let mut run = synced(&c).await;
    c.server.set_gone_as_http_status(true);
    let lists = c.server.counts::<Service>().lists;
    // While the server is down, the Services' history moves past the client's version.
    c.server.stop().await;
    c.server
        .apply(&objects::service(
            "shop",
            "web2",
            "10.96.0.11",
            &[("http", 80)],
        ))
        .unwrap();
    c.server.compact::<Service>();
    c.server.restart().await.unwrap();
    run.wait(
        "the service created while the watch version was gone",
        |r| {
            r.view
                .contains_key(&Hostname::new("web2.shop.svc.cluster.local").unwrap())
        },
    )
    .await;
    assert!(c.server.counts::<Service>().lists > lists, "relisted");
    run.wait("healthy again", |r| r.status == RegistryStatus::Healthy)
        .await;
}
