//! One cluster's task: a client, the four watches, and the cluster's converted services, reported
//! to the registry worker as per-hostname shard changes.
//!
//! Health: a watch failure other than `410` marks its kind failing; the kind recovers when its
//! next request succeeds (see `client` for why that is observed at the HTTP layer) or when it
//! lists again. The cluster reports `Health(Some(reason))` while any kind is failing and
//! `Health(None)` when none is, only on change. Data is never withdrawn because of a failure:
//! the stores keep their last contents until a list replaces them.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::convert::Context;
use super::shards::{ShardChange, Shards};
use super::watch::{self, Kind, WatchItem, WatchSettings};
use crate::model::ClusterId;
use crate::support::backoff::RetryBackoff;
use crate::support::kube_client::{ApiSuccesses, Credentials, RateLimitLayer};

/// Delay between client builds should the backoff ever run dry (it does not; it repeats its cap).
const CLIENT_RETRY_FALLBACK: std::time::Duration = std::time::Duration::from_secs(30);

/// What a cluster task reports.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ClusterEvent {
    /// Hostnames whose state in this cluster changed.
    Shards(Vec<ShardChange>),
    /// Every kind has listed once: what was reported is this cluster's whole state.
    Synced,
    /// `None` when healthy, else what is failing.
    Health(Option<String>),
}

/// A [`ClusterEvent`] with the cluster and the generation (credentials version) it came from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClusterReport {
    pub(crate) cluster: ClusterId,
    pub(crate) generation: u64,
    pub(crate) event: ClusterEvent,
}

/// Everything a cluster task needs, shared by all clusters of a registry except the credentials.
#[derive(Debug, Clone)]
pub(crate) struct ClusterSettings {
    pub(crate) watch: WatchSettings,
    pub(crate) rate: RateLimitLayer,
    /// Conversion context; its origin's cluster is replaced per cluster.
    pub(crate) ctx: Context,
    pub(crate) retry: RetryBackoff,
}

/// One cluster task's identity.
#[derive(Debug, Clone)]
pub(crate) struct ClusterRun {
    pub(crate) cluster: ClusterId,
    pub(crate) generation: u64,
    pub(crate) credentials: Credentials,
}

struct Reporter {
    run: ClusterRun,
    tx: mpsc::Sender<ClusterReport>,
}

impl Reporter {
    /// `false` when the worker is gone (the task should end).
    async fn send(&self, event: ClusterEvent) -> bool {
        self.tx
            .send(ClusterReport {
                cluster: self.run.cluster.clone(),
                generation: self.run.generation,
                event,
            })
            .await
            .is_ok()
    }
}

/// Runs one cluster until the worker goes away (or the task is aborted).
pub(crate) async fn run(
    run: ClusterRun,
    settings: Arc<ClusterSettings>,
    tx: mpsc::Sender<ClusterReport>,
) {
    let cluster = run.cluster.clone();
    let credentials = run.credentials.clone();
    let reporter = Reporter { run, tx };
    let seen = ApiSuccesses::default();
    let mut retry = settings.retry.clone();
    // The health last reported (`None`: healthy, which is what the worker assumes at first).
    let mut reported: Option<String> = None;
    let client = loop {
        match credentials.client(settings.rate, seen.clone()).await {
            Ok(c) => break c,
            Err(e) => {
                warn!(cluster = %cluster, error = %e, "cannot build a client for the cluster");
                let reason = Some(format!("cluster {cluster}: {e}"));
                if reason != reported {
                    reported = reason.clone();
                    if !reporter.send(ClusterEvent::Health(reason)).await {
                        return;
                    }
                }
                tokio::time::sleep(retry.next().unwrap_or(CLIENT_RETRY_FALLBACK)).await;
            }
        }
    };
    let (stores, mut items) = watch::start(&client, &settings.watch);
    let mut ctx = settings.ctx.clone();
    ctx.origin.cluster = cluster.clone();
    let mut shards = Shards::new(ctx);
    let mut listed = std::collections::BTreeSet::new();
    let mut synced = false;
    // Failing kinds: the error and the success count of that kind when it failed.
    let mut failing: BTreeMap<Kind, (String, u64)> = BTreeMap::new();
    let pending = crate::metrics::k8s_pending_pods(cluster.as_str());
    loop {
        tokio::select! {
            item = items.next() => {
                let Some(item) = item else { return };
                let changes = match item {
                    WatchItem::Listed(kind) => {
                        failing.remove(&kind);
                        listed.insert(kind);
                        match listed.len() == Kind::ALL.len() {
                            true => shards.rebuild(&stores),
                            false => Vec::new(),
                        }
                    }
                    WatchItem::Touched { kind, namespace, name, owner } => match synced {
                        true => shards.touched(&stores, kind, &namespace, &name, owner),
                        false => Vec::new(),
                    },
                    WatchItem::Failed { kind, error, expired: true } => {
                        info!(cluster = %cluster, kind = kind.plural(), error = %error,
                            "resourceVersion expired; relisting");
                        Vec::new()
                    }
                    WatchItem::Failed { kind, error, expired: false } => {
                        debug!(cluster = %cluster, kind = kind.plural(), error = %error, "watch failed");
                        failing.insert(kind, (error, seen.count(kind.plural())));
                        Vec::new()
                    }
                };
                pending.set(shards.pending_pods() as f64);
                if !changes.is_empty() && !reporter.send(ClusterEvent::Shards(changes)).await {
                    return;
                }
                if !synced && listed.len() == Kind::ALL.len() {
                    synced = true;
                    info!(cluster = %cluster, pending_pods = shards.pending_pods(), "cluster synced");
                    if !reporter.send(ClusterEvent::Synced).await {
                        return;
                    }
                }
            }
            _ = seen.notified() => {}
        }
        failing.retain(|kind, (_, at)| seen.count(kind.plural()) <= *at);
        let now = match failing.is_empty() {
            true => None,
            false => Some(format!(
                "cluster {cluster}: {} (is the API server reachable, and may these credentials list and watch them?)",
                failing
                    .iter()
                    .map(|(k, (e, _))| format!("{}: {e}", k.plural()))
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
        };
        if now != reported {
            match &now {
                Some(reason) => warn!(cluster = %cluster, reason = %reason, "cluster degraded"),
                None => info!(cluster = %cluster, "cluster healthy again"),
            }
            reported = now.clone();
            if !reporter.send(ClusterEvent::Health(now)).await {
                return;
            }
        }
    }
}
