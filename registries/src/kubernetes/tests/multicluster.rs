//! Several clusters in one registry (REG-9, BUG-15): the same Service in two clusters is one
//! service with a VIP per cluster and the union of endpoints; kubeconfig files added, removed and
//! replaced at runtime add, remove or keep exactly that cluster's endpoints.

use std::collections::BTreeSet;
use std::path::Path;

use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use super::*;
use crate::model::ClusterId;

const WEB: &str = "web.shop.svc.cluster.local";

/// Writes a kubeconfig into the watched directory the way a Secret update or `mv` does: a hidden
/// temporary file renamed over the target.
fn put(dir: &Path, cluster: &str, text: &str) {
    let tmp = dir.join(format!(".{cluster}.tmp"));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, dir.join(format!("{cluster}.yaml"))).unwrap();
}

fn hosts(changes: &[Change]) -> BTreeSet<String> {
    changes
        .iter()
        .map(|c| c.hostname().as_str().to_string())
        .collect()
}

fn clusters_of(run: &Run, host: &str) -> Vec<String> {
    run.view[&Hostname::new(host).unwrap()]
        .endpoints
        .iter()
        .map(|e| e.origin.cluster.as_str().to_string())
        .collect()
}

fn lists(c: &FakeCluster) -> usize {
    c.server.counts::<Service>().lists
        + c.server.counts::<EndpointSlice>().lists
        + c.server.counts::<Pod>().lists
        + c.server.counts::<Node>().lists
}

#[tokio::test]
async fn clusters_merge_and_come_and_go_with_their_kubeconfig_files() {
    let east = FakeCluster::start().await;
    east.add_service("shop", "web", "10.96.0.10", &["10.1.0.1"]);
    east.add_service("shop", "only-east", "10.96.0.11", &["10.1.0.2"]);
    let west = FakeCluster::start().await;
    west.add_service("shop", "web", "10.97.0.10", &["10.2.0.1", "10.2.0.2"]);
    west.add_service("shop", "only-west", "10.97.0.11", &["10.2.0.3"]);
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "west", &west.server.kubeconfig_yaml());
    let mut cfg = config("kube", "east", &east.kubeconfig);
    cfg.kubeconfig_dir = Some(dir.path().to_path_buf());
    let mut run = Run::start(cfg);
    run.wait("both clusters synced", |r| r.synced).await;

    // One service, a VIP per cluster, the union of endpoints, each with its cluster (REG-9).
    assert_eq!(run.view.len(), 3);
    let web = &run.view[&Hostname::new(WEB).unwrap()];
    let vip_clusters: Vec<&str> = web.service.vips.keys().map(ClusterId::as_str).collect();
    assert_eq!(vip_clusters, ["east", "west"]);
    assert_eq!(
        web.service.origin.cluster.as_str(),
        "east",
        "the primary's attributes"
    );
    assert_eq!(run.endpoints(WEB), ["10.1.0.1", "10.2.0.1", "10.2.0.2"]);
    assert_eq!(clusters_of(&run, WEB), ["east", "west", "west"]);

    // A failing remote cluster keeps its endpoints and degrades the registry (REG-9, REG-2).
    west.server.stop().await;
    run.wait(
        "degraded",
        |r| matches!(&r.status, RegistryStatus::Degraded { reason } if reason.contains("west")),
    )
    .await;
    assert_eq!(run.endpoints(WEB).len(), 3, "a failure withdraws nothing");
    west.server.restart().await.unwrap();
    run.wait("healthy", |r| r.status == RegistryStatus::Healthy)
        .await;

    // A new kubeconfig file adds exactly that cluster's endpoints.
    let north = FakeCluster::start().await;
    north.add_service("shop", "web", "10.98.0.10", &["10.3.0.1"]);
    let mark = run.log.len();
    put(dir.path(), "north", &north.server.kubeconfig_yaml());
    run.wait("north's endpoint", |r| {
        r.endpoints(WEB).contains(&"10.3.0.1".to_string())
    })
    .await;
    let settled = run.settle(Duration::from_millis(500)).await;
    assert!(settled.is_empty(), "{settled:?}");
    assert_eq!(hosts(&run.log[mark..]), BTreeSet::from([WEB.to_string()]));
    assert_eq!(clusters_of(&run, WEB), ["east", "north", "west", "west"]);

    // Removing a file removes exactly that cluster's shards (BUG-15).
    let mark = run.log.len();
    std::fs::remove_file(dir.path().join("west.yaml")).unwrap();
    run.wait("west's endpoints gone", |r| {
        r.endpoints(WEB) == ["10.1.0.1", "10.3.0.1"]
    })
    .await;
    run.wait("only-west deleted", |r| {
        !r.view
            .contains_key(&Hostname::new("only-west.shop.svc.cluster.local").unwrap())
    })
    .await;
    let _ = run.settle(Duration::from_millis(500)).await;
    assert_eq!(
        hosts(&run.log[mark..]),
        BTreeSet::from([
            WEB.to_string(),
            "only-west.shop.svc.cluster.local".to_string()
        ]),
        "only the removed cluster's hostnames changed"
    );
    assert_eq!(run.view[&Hostname::new(WEB).unwrap()].service.vips.len(), 2);

    // Rotating north's credentials with unchanged data: a new client lists everything again, and
    // nothing is reported (REG-9: replacing must not wipe the new shards).
    let before = lists(&north);
    let rotated = north
        .server
        .kubeconfig_yaml()
        .replace("fake-token", "rotated-token");
    let mark = run.log.len();
    put(dir.path(), "north", &rotated);
    until("the new client listed", || lists(&north) >= before + 4).await;
    let settled = run.settle(Duration::from_millis(800)).await;
    assert!(
        settled.is_empty() && run.log.len() == mark,
        "rotation reported {settled:?}"
    );

    // Rotating to credentials that do not work keeps the old data and says so.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let broken = rotated.replace(&north.server.url(), &format!("http://127.0.0.1:{dead}"));
    put(dir.path(), "north", &broken);
    run.wait("degraded by the new credentials", |r| {
        matches!(&r.status, RegistryStatus::Degraded { reason } if reason.contains("new credentials of cluster north"))
    })
    .await;
    assert!(
        run.endpoints(WEB).contains(&"10.3.0.1".to_string()),
        "old shards kept"
    );
    assert_eq!(
        run.log.len(),
        mark,
        "no change while the new credentials fail"
    );

    // Fixing them again: healthy, still no change.
    put(dir.path(), "north", &north.server.kubeconfig_yaml());
    run.wait("healthy", |r| r.status == RegistryStatus::Healthy)
        .await;
    let settled = run.settle(Duration::from_millis(800)).await;
    assert!(settled.is_empty(), "{settled:?}");

    // A broken file for a new cluster is reported and changes nothing else.
    put(dir.path(), "south", "clusters: [");
    run.wait("the broken file reported", |r| {
        matches!(&r.status, RegistryStatus::Degraded { reason } if reason.contains("south.yaml"))
    })
    .await;
    assert_eq!(run.log.len(), mark);
}

#[tokio::test]
async fn statically_configured_clusters_merge_too() {
    let east = FakeCluster::start().await;
    east.add_service("shop", "web", "10.96.0.10", &["10.1.0.1"]);
    let west = FakeCluster::start().await;
    west.add_service("shop", "web", "10.97.0.10", &["10.2.0.1"]);
    let mut cfg = config("kube", "east", &east.kubeconfig);
    cfg.clusters = vec![crate::kubernetes::RemoteCluster {
        cluster_id: "west".into(),
        kubeconfig: west.kubeconfig.clone(),
        context: None,
    }];
    let mut run = Run::start(cfg);
    run.wait("synced", |r| r.synced).await;
    assert_eq!(clusters_of(&run, WEB), ["east", "west"]);
}

#[tokio::test]
async fn a_remote_cluster_that_cannot_sync_delays_synced_only_up_to_the_timeout() {
    // REG-15: the primary is waited for; a remote cluster only up to `remote_sync_timeout`.
    let east = FakeCluster::start().await;
    east.add_service("shop", "web", "10.96.0.10", &["10.1.0.1"]);
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = tempfile::tempdir().unwrap();
    let unreachable = east
        .server
        .kubeconfig_yaml()
        .replace(&east.server.url(), &format!("http://127.0.0.1:{dead}"));
    put(dir.path(), "far", &unreachable);
    let mut cfg = config("kube", "east", &east.kubeconfig);
    cfg.kubeconfig_dir = Some(dir.path().to_path_buf());
    cfg.remote_sync_timeout = Duration::from_millis(700);
    let started = std::time::Instant::now();
    let mut run = Run::start(cfg);
    run.wait("synced without the remote cluster", |r| r.synced)
        .await;
    assert!(
        started.elapsed() >= Duration::from_millis(700),
        "waited for the remote cluster first: {:?}",
        started.elapsed()
    );
    assert_eq!(run.endpoints(WEB), ["10.1.0.1"]);
    assert!(
        matches!(&run.status, RegistryStatus::Degraded { reason } if reason.contains("cluster far")),
        "{:?}",
        run.status
    );
}
