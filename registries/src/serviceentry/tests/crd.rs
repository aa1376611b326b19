//! The CRD source against the fake Kubernetes API server (real HTTP on loopback, kube-rs
//! unmodified): every served `networking.istio.io` version, updates, relists, Pods, outages.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::*;
use crate::kubernetes::fake::{FakeApiServer, ResourceType};
use crate::model::Health;
use crate::serviceentry::fixtures::{service_entry, workload_entry};
use crate::serviceentry::{API_VERSIONS, CrdSourceConfig, GROUP};

/// A fake cluster serving the ServiceEntry and WorkloadEntry CRDs at one version.
pub(super) struct Cluster {
    pub(super) server: FakeApiServer,
    pub(super) kubeconfig: PathBuf,
    version: String,
    _dir: tempfile::TempDir,
}

impl Cluster {
    pub(super) async fn start(version: &str) -> Self {
        let server = FakeApiServer::start()
            .await
            .expect("fake API server starts");
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig.yaml");
        server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
        let c = Self {
            server,
            kubeconfig,
            version: version.into(),
            _dir: dir,
        };
        c.server.register_istio_networking(version);
        c
    }

    pub(super) fn rt(&self, kind: &str) -> ResourceType {
        let plural = format!("{}s", kind.to_ascii_lowercase()).replace("entrys", "entries");
        ResourceType::new(GROUP, &self.version, &plural, kind, true)
    }

    /// Creates or updates the object a manifest describes, at this cluster's version.
    pub(super) fn apply(&self, yaml: &str) {
        let mut v: serde_json::Value = serde_yaml::from_str(yaml).expect("test manifests parse");
        let kind = v["kind"].as_str().expect("a kind").to_string();
        v["apiVersion"] = format!("{GROUP}/{}", self.version).into();
        self.server
            .apply_json(&self.rt(&kind), v)
            .expect("fake accepts it");
    }

    /// Waits until every kind is being watched, so that what the test changes next reaches the
    /// watches (an expiry before a watch starts would not end it).
    pub(super) async fn watching(&self) {
        let deadline = tokio::time::Instant::now() + LIMIT;
        for kind in [
            "ServiceEntry",
            "WorkloadEntry",
            "DestinationRule",
            "VirtualService",
        ] {
            while self.server.counts_of(&self.rt(kind)).watches == 0 {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{kind} is never watched"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }

    pub(super) fn config(&self) -> ServiceEntryConfig {
        ServiceEntryConfig {
            name: "se".into(),
            cluster_id: "c1".into(),
            kubernetes: Some(CrdSourceConfig {
                kubeconfig: Some(self.kubeconfig.clone()),
                api_version: self.version.clone(),
                retry_initial: Duration::from_millis(20),
                retry_max: Duration::from_millis(200),
                ..CrdSourceConfig::default()
            }),
            ..ServiceEntryConfig::default()
        }
    }
}

const SELECTING: &str = "hosts: [api.shop.example]
ports: [{number: 80, name: http, protocol: HTTP}]
location: MESH_INTERNAL
resolution: STATIC
workloadSelector: {labels: {app: api}}";

fn addresses(run: &Run, host: &str) -> Vec<String> {
    run.get(host)
        .map(|s| s.endpoints.iter().map(|e| e.address.clone()).collect())
        .unwrap_or_default()
}

#[tokio::test]
async fn every_served_api_version_is_read_the_same_way() {
    for version in API_VERSIONS {
        let c = Cluster::start(version).await;
        c.apply(&service_entry("api", "shop", SELECTING));
        c.apply(&workload_entry(
            "vm-1",
            "shop",
            &[("app", "api")],
            "address: 10.0.0.1\nserviceAccount: api",
        ));
        c.apply(&workload_entry(
            "vm-2",
            "other",
            &[("app", "api")],
            "address: 10.0.0.2",
        ));
        let mut run = Run::start(c.config());
        run.wait("synced with the selected entry", |r| {
            r.synced && addresses(r, "api.shop.example") == ["10.0.0.1"]
        })
        .await;
        let ep = &run.get("api.shop.example").unwrap().endpoints[0];
        assert_eq!(
            ep.service_account, "spiffe://cluster.local/ns/shop/sa/api",
            "{version}"
        );
        assert!(run.rejected.is_empty(), "{version}: {:?}", run.rejected);
    }
}

#[tokio::test]
async fn updates_and_an_invalid_update_that_keeps_the_last_valid_version() {
    let c = Cluster::start("v1").await;
    let good = service_entry(
        "db",
        "shop",
        "hosts: [db.shop.example]\nports: [{number: 5432, name: tcp, protocol: TCP}]\nresolution: DNS\nendpoints: [{address: db1.example.com}]",
    );
    c.apply(&good);
    let mut run = Run::start(c.config());
    run.wait("synced", |r| r.synced && r.get("db.shop.example").is_some())
        .await;

    c.apply(&good.replace("db1.example.com", "db2.example.com"));
    run.wait("updated", |r| {
        addresses(r, "db.shop.example") == ["db2.example.com"]
    })
    .await;

    // REG-11: the object becomes invalid; its last valid version stays, the error is reported.
    c.apply(
        &good
            .replace("db1.example.com", "db3.example.com")
            .replace("number: 5432", "number: 0"),
    );
    run.wait("rejected", |r| {
        !r.rejections_of("ServiceEntry shop/db").is_empty()
    })
    .await;
    let r = run.rejections_of("ServiceEntry shop/db")[0].clone();
    assert_eq!(r.field, "spec.ports[0].number");
    assert_eq!(r.source, "networking.istio.io/v1 in cluster c1");
    assert!(r.serving_previous);
    assert_eq!(addresses(&run, "db.shop.example"), ["db2.example.com"]);

    c.server.delete_json(&c.rt("ServiceEntry"), "shop", "db");
    run.wait("deleted, no longer rejected", |r| {
        r.get("db.shop.example").is_none() && r.rejected.is_empty()
    })
    .await;
}

#[tokio::test]
async fn relists_cause_no_changes() {
    // REG-1, REG-14: a 410 relist of unchanged objects is swapped in whole and reports nothing.
    let c = Cluster::start("v1").await;
    c.apply(&service_entry("api", "shop", SELECTING));
    c.apply(&workload_entry(
        "vm-1",
        "shop",
        &[("app", "api")],
        "address: 10.0.0.1",
    ));
    let mut run = Run::start(c.config());
    run.wait("synced", |r| {
        r.synced && !addresses(r, "api.shop.example").is_empty()
    })
    .await;
    c.watching().await;
    let lists = c.server.counts_of(&c.rt("ServiceEntry")).lists;
    c.server.expire_type(&c.rt("ServiceEntry"));
    c.server.expire_type(&c.rt("WorkloadEntry"));
    assert_eq!(
        run.settle(Duration::from_millis(1500)).await,
        0,
        "no changes"
    );
    let after = c.server.counts_of(&c.rt("ServiceEntry"));
    assert!(after.lists > lists, "it did relist: {lists} -> {after:?}");
    // A change made across a relist is exactly one change.
    c.server.expire_type(&c.rt("WorkloadEntry"));
    c.apply(&workload_entry(
        "vm-1",
        "shop",
        &[("app", "api")],
        "address: 10.0.0.9",
    ));
    run.wait("moved", |r| {
        addresses(r, "api.shop.example") == ["10.0.0.9"]
    })
    .await;
    assert_eq!(run.settle(Duration::from_millis(500)).await, 0);
}

fn pod(name: &str, ip: &str, ready: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("shop".into()),
            labels: Some([("app".to_string(), "api".to_string())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            service_account_name: Some("api".into()),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some(ip.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..PodCondition::default()
            }]),
            ..PodStatus::default()
        }),
    }
}

#[tokio::test]
async fn selectors_pick_pods_when_enabled() {
    let c = Cluster::start("v1").await;
    c.apply(&service_entry("api", "shop", SELECTING));
    c.apply(&workload_entry(
        "vm-1",
        "shop",
        &[("app", "api")],
        "address: 10.0.0.1",
    ));
    c.server.apply(&pod("api-a", "10.1.0.1", true)).unwrap();
    let mut config = c.config();
    if let Some(k) = config.kubernetes.as_mut() {
        k.select_pods = true;
        k.namespaces = vec!["shop".into()];
    }
    let mut run = Run::start(config);
    run.wait("a pod and a WorkloadEntry", |r| {
        r.synced && addresses(r, "api.shop.example") == ["10.0.0.1", "10.1.0.1"]
    })
    .await;
    c.server.apply(&pod("api-a", "10.1.0.1", false)).unwrap();
    run.wait("the pod is not ready", |r| {
        r.get("api.shop.example")
            .is_some_and(|s| s.endpoints.iter().any(|e| e.health == Health::Unhealthy))
    })
    .await;
    c.server.delete::<Pod>("shop", "api-a");
    run.wait("the pod is gone", |r| {
        addresses(r, "api.shop.example") == ["10.0.0.1"]
    })
    .await;
}

#[tokio::test]
async fn an_unreachable_api_server_degrades_and_withdraws_nothing() {
    // REG-2
    let c = Cluster::start("v1").await;
    c.apply(&service_entry("api", "shop", SELECTING));
    c.apply(&workload_entry(
        "vm-1",
        "shop",
        &[("app", "api")],
        "address: 10.0.0.1",
    ));
    let mut run = Run::start(c.config());
    run.wait("synced", |r| {
        r.synced && !addresses(r, "api.shop.example").is_empty()
    })
    .await;
    c.server.stop().await;
    run.wait("degraded", |r| {
        matches!(r.status, RegistryStatus::Degraded { .. })
    })
    .await;
    c.server.delete_json(&c.rt("WorkloadEntry"), "shop", "vm-1");
    run.settle(Duration::from_millis(300)).await;
    assert!(
        run.log.iter().all(|ch| matches!(ch, Change::Upsert(_))),
        "nothing withdrawn"
    );
    c.server.restart().await.unwrap();
    run.wait("healthy, then the real change", |r| {
        r.status == RegistryStatus::Healthy && addresses(r, "api.shop.example").is_empty()
    })
    .await;
}

#[tokio::test]
async fn an_unreadable_kubeconfig_is_a_config_error() {
    let mut config = Cluster::start("v1").await.config();
    if let Some(k) = config.kubernetes.as_mut() {
        k.kubeconfig = Some("/nonexistent/kubeconfig".into());
    }
    let registry = Box::new(ServiceEntryRegistry::new(config));
    let (tx, _rx) = mpsc::channel(8);
    let err = registry
        .run(RegistrySink::new(RegistryId::new("se"), tx))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/kubeconfig"), "{err}");
}

#[tokio::test]
async fn files_are_reported_before_an_unreachable_cluster_lists_and_synced_waits_for_it() {
    // REG-15: should the cluster never answer, the aggregate's sync timeout still has the files.
    let c = Cluster::start("v1").await;
    c.apply(&service_entry("api", "shop", SELECTING));
    c.server.stop().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("db.yaml"),
        service_entry("db", "shop", "hosts: [db.example.com]\nports: [{number: 5432, name: tcp, protocol: TCP}]\nresolution: DNS"),
    )
    .unwrap();
    let mut config = c.config();
    config.directory = Some(dir.path().to_path_buf());
    let mut run = Run::start(config);
    run.wait("the file's service", |r| r.get("db.example.com").is_some())
        .await;
    run.wait("degraded", |r| {
        matches!(r.status, RegistryStatus::Degraded { .. })
    })
    .await;
    assert!(!run.synced, "not synced before the cluster lists");
    c.server.restart().await.unwrap();
    run.wait("synced with both", |r| {
        r.synced && r.get("api.shop.example").is_some()
    })
    .await;
}
