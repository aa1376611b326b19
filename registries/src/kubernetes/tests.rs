//! Kubernetes registry tests against the fake API server (real HTTP on loopback, kube-rs
//! unmodified). They run in real time: every wait has a deadline, and every server and registry
//! task stops when its test ends.

mod conformance;
mod fake_server;
mod multicluster;
mod relist;
mod scale;

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::fake::FakeApiServer;
use super::fake::objects::{self, SliceEndpoint};
use super::{KubernetesConfig, KubernetesRegistry};
use crate::model::Hostname;
use crate::registry::{Change, Registry, RegistryStatus};
use crate::test_util::Observer;

/// Longest any single expected event may take (shared CI cores, debug build).
pub(super) const LIMIT: Duration = Duration::from_secs(10);

/// A config for `server` with fast retries, so outage tests take moments.
pub(super) fn config(name: &str, cluster: &str, kubeconfig: &Path) -> KubernetesConfig {
    KubernetesConfig {
        name: name.into(),
        cluster_id: cluster.into(),
        kubeconfig: Some(kubeconfig.to_path_buf()),
        retry_initial: Duration::from_millis(20),
        retry_max: Duration::from_millis(200),
        ..KubernetesConfig::default()
    }
}

/// A fake cluster: the server and a kubeconfig file for it.
pub(super) struct FakeCluster {
    pub(super) server: FakeApiServer,
    pub(super) kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl FakeCluster {
    pub(super) async fn start() -> Self {
        let server = FakeApiServer::start()
            .await
            .expect("fake API server starts");
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = dir.path().join("kubeconfig.yaml");
        server
            .write_kubeconfig(&kubeconfig)
            .expect("write kubeconfig");
        Self {
            server,
            kubeconfig,
            _dir: dir,
        }
    }

    /// A Service `name` in `ns` on port 80 (`http`), with one slice of `ips`, each backed by a pod
    /// on node `node-a` (all applied).
    pub(super) fn add_service(&self, ns: &str, name: &str, vip: &str, ips: &[&str]) {
        let s = &self.server;
        s.apply(&objects::node("node-a", "us-east", "us-east-1a"))
            .expect("node");
        s.apply(&objects::service(ns, name, vip, &[("http", 80)]))
            .expect("service");
        let mut eps = Vec::new();
        for (i, ip) in ips.iter().enumerate() {
            let pod = format!("{name}-{i}");
            s.apply(&objects::pod(ns, &pod, &[("app", name)], name, "node-a"))
                .expect("pod");
            eps.push(SliceEndpoint::ready(ip).pod(&pod).node("node-a"));
        }
        s.apply(&objects::endpoint_slice(
            ns,
            &format!("{name}-1"),
            name,
            &[("http", 8080)],
            &eps,
        ))
        .expect("slice");
    }
}

/// Tells the Kubernetes harness's [`Observer`] apart.
pub(super) enum Kube {}

/// A running registry and what it reported.
pub(super) type Run = Observer<Kube>;

impl Run {
    pub(super) fn start(config: KubernetesConfig) -> Self {
        Self::launch(Box::new(KubernetesRegistry::new(config)))
    }

    /// Applies events until `done` holds; panics after [`LIMIT`].
    pub(super) async fn wait(&mut self, what: &str, done: impl Fn(&Run) -> bool) {
        let deadline = tokio::time::Instant::now() + LIMIT;
        while !done(self) {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(msg)) => self.apply(msg.event),
                Ok(None) => panic!(
                    "registry stopped while waiting for {what}: {:?}",
                    (&mut self.task).await
                ),
                Err(_) => panic!(
                    "timed out waiting for {what}; status {:?}, synced {}, view {:?}",
                    self.status,
                    self.synced,
                    self.view.keys()
                ),
            }
        }
    }

    /// Applies whatever arrives within `quiet`; returns the changes among it.
    pub(super) async fn settle(&mut self, quiet: Duration) -> Vec<Change> {
        let mark = self.log.len();
        while let Ok(Some(msg)) = tokio::time::timeout(quiet, self.rx.recv()).await {
            self.apply(msg.event);
        }
        self.log[mark..].to_vec()
    }

    pub(super) fn endpoints(&self, host: &str) -> Vec<String> {
        self.view
            .get(&Hostname::new(host).expect("hostname"))
            .map(|s| s.endpoints.iter().map(|e| e.address.clone()).collect())
            .unwrap_or_default()
    }
}

/// Waits until `f` holds, polling; panics after [`LIMIT`].
pub(super) async fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
