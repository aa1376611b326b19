//! The CRD source: `ServiceEntry` and `WorkloadEntry` objects of one cluster (and its Pods, when
//! selectors may pick them), read with kube-runtime watchers through the Kubernetes registry's
//! client (kubeconfig or in-cluster credentials, client-side rate limit, retry backoff).
//!
//! One task runs every watch (one per kind and namespace) and reports to the registry's worker:
//! each completed list or relist as the whole contents of its scope, buffered from `Init` to
//! `InitDone` so the worker swaps it in at once and never sees a partial list (REG-1); single
//! changes as they come; and its health. A failing watch reports `Degraded` and withdraws
//! nothing; it recovers when its resource answers again (seen at the HTTP layer, since a resumed
//! watch is silent until something changes) or lists again.

mod pods;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::stream::{BoxStream, SelectAll};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::config::CrdSourceConfig;
use super::types::{GROUP, Kind};
use super::validate::Workload;
use crate::support::backoff::RetryBackoff;
pub(crate) use crate::support::kube_client::Credentials;
use crate::support::kube_client::{ApiSuccesses, RateLimitLayer};

/// Events waiting for the worker. Each is small (a list is one event), so a few hundred absorb a
/// burst of single changes while the worker rebuilds; when full, the watch task waits (back-
/// pressure reaches the API server's watch, never unbounded memory).
pub(crate) const EVENT_CAPACITY: usize = 256;

/// What a watch covers: a kind (or Pods) in one namespace, or in all of them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Scope {
    /// `None` for Pods.
    pub(crate) kind: Option<Kind>,
    /// `None` for all namespaces.
    pub(crate) namespace: Option<String>,
}

impl Scope {
    fn plural(&self) -> &'static str {
        self.kind.map_or("pods", Kind::plural)
    }

    /// Whether an object of `kind` in `namespace` belongs to this scope.
    pub(crate) fn covers(&self, kind: Option<Kind>, namespace: &str) -> bool {
        self.kind == kind && self.namespace.as_deref().is_none_or(|ns| ns == namespace)
    }
}

/// One object as the cluster has it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ClusterObject {
    /// A ServiceEntry or WorkloadEntry, as JSON text for the common parser.
    Config {
        kind: Kind,
        namespace: String,
        name: String,
        text: String,
    },
    /// An object whose body could not be read (the xDS source): rejected as a whole.
    Undecodable {
        kind: Kind,
        namespace: String,
        name: String,
        message: String,
    },
    /// A Pod; `None` when it cannot receive traffic (no IP yet, terminating, finished).
    Pod {
        namespace: String,
        name: String,
        workload: Option<Workload>,
    },
}

/// What the watch task reports.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ClusterEvent {
    /// A list or relist of `scope` completed: its whole contents.
    Listed(Scope, Vec<ClusterObject>),
    /// An object was created or changed.
    Applied(ClusterObject),
    /// An object was deleted.
    Deleted {
        kind: Option<Kind>,
        namespace: String,
        name: String,
    },
    /// `None` when healthy, else what is failing.
    Health(Option<String>),
}

/// Everything the watch task needs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) config: CrdSourceConfig,
    /// The kubeconfig (read and checked at start) or the in-cluster service account.
    pub(crate) credentials: Credentials,
    /// For messages.
    pub(crate) cluster: String,
}

impl Settings {
    /// The scopes that must list before the source has synced.
    pub(crate) fn scopes(&self) -> Vec<Scope> {
        let namespaces: Vec<Option<String>> = match self.config.namespaces.is_empty() {
            true => vec![None],
            false => self.config.namespaces.iter().cloned().map(Some).collect(),
        };
        let mut kinds: Vec<Option<Kind>> = Kind::ALL.into_iter().map(Some).collect();
        if self.config.select_pods {
            kinds.push(None);
        }
        let mut out = Vec::new();
        for ns in &namespaces {
            for kind in &kinds {
                out.push(Scope {
                    kind: *kind,
                    namespace: ns.clone(),
                });
            }
        }
        out
    }

    /// `networking.istio.io/v1 in cluster Kubernetes`, for messages about its objects.
    pub(crate) fn api(&self) -> String {
        format!(
            "{GROUP}/{} in cluster {}",
            self.config.api_version, self.cluster
        )
    }
}

/// One watch's output, before buffering.
enum Item {
    Init,
    InitApply(ClusterObject),
    InitDone,
    Apply(ClusterObject),
    Delete { namespace: String, name: String },
    Failed { error: String, expired: bool },
}

/// Runs every watch of the cluster until the worker goes away.
pub(crate) async fn run(settings: Arc<Settings>, tx: mpsc::Sender<ClusterEvent>) {
    let c = &settings.config;
    let seen = ApiSuccesses::default();
    let mut retry = RetryBackoff::new(c.retry_initial, c.retry_max);
    let rate = RateLimitLayer {
        qps: c.qps,
        burst: c.burst,
    };
    let mut reported: Option<String> = None;
    let client = loop {
        match settings.credentials.client(rate, seen.clone()).await {
            Ok(client) => break client,
            Err(e) => {
                warn!(error = %e, "cannot build a Kubernetes client for the ServiceEntry CRDs");
                let reason = Some(format!("cluster {}: {e}", settings.cluster));
                if reason != reported {
                    reported = reason.clone();
                    if tx.send(ClusterEvent::Health(reason)).await.is_err() {
                        return;
                    }
                }
                tokio::time::sleep(retry.next().unwrap_or(c.retry_max)).await;
            }
        }
    };
    let mut items = start(&client, &settings);
    let mut buffers: HashMap<Scope, Vec<ClusterObject>> = HashMap::new();
    // Failing scopes: the error and the success count of their resource when they failed.
    let mut failing: BTreeMap<Scope, (String, u64)> = BTreeMap::new();
    loop {
        let mut data = None;
        tokio::select! {
            item = items.next() => {
                let Some((scope, item)) = item else { return };
                match item {
                    Item::Init => {
                        buffers.insert(scope, Vec::new());
                    }
                    Item::InitApply(o) => buffers.entry(scope).or_default().push(o),
                    Item::InitDone => {
                        failing.remove(&scope);
                        let objects = buffers.remove(&scope).unwrap_or_default();
                        data = Some(ClusterEvent::Listed(scope, objects));
                    }
                    Item::Apply(o) => data = Some(ClusterEvent::Applied(o)),
                    Item::Delete { namespace, name } => {
                        data = Some(ClusterEvent::Deleted { kind: scope.kind, namespace, name });
                    }
                    Item::Failed { error, expired: true } => {
                        info!(resource = scope.plural(), error = %error, "resourceVersion expired; relisting");
                    }
                    Item::Failed { error, expired: false } => {
                        let at = seen.count(scope.plural());
                        failing.insert(scope, (error, at));
                    }
                }
            }
            _ = seen.notified() => {}
        }
        failing.retain(|scope, (_, at)| seen.count(scope.plural()) <= *at);
        let now = (!failing.is_empty()).then(|| {
            format!(
                "cluster {}: {} (is the API server reachable, are the Istio CRDs installed, and may \
                 these credentials list and watch them?)",
                settings.cluster,
                failing
                    .iter()
                    .map(|(s, (e, _))| format!("{}: {e}", s.plural()))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        });
        // Health first: data that follows a recovery must not look like a degraded source's.
        if now != reported {
            match &now {
                Some(reason) => warn!(reason = %reason, "ServiceEntry CRD source degraded"),
                None => info!("ServiceEntry CRD source healthy again"),
            }
            reported = now.clone();
            if tx.send(ClusterEvent::Health(now)).await.is_err() {
                return;
            }
        }
        if let Some(event) = data
            && tx.send(event).await.is_err()
        {
            return;
        }
    }
}

/// Starts every watch; the stream never ends (errors are items, retried with backoff inside).
fn start(client: &Client, s: &Settings) -> SelectAll<BoxStream<'static, (Scope, Item)>> {
    let c = &s.config;
    let config =
        watcher::Config::default().timeout(u32::try_from(c.watch_timeout.as_secs()).unwrap_or(290));
    let backoff = RetryBackoff::new(c.retry_initial, c.retry_max);
    let mut streams = SelectAll::new();
    for scope in s.scopes() {
        let ns = scope.namespace.as_deref();
        let stream = match scope.kind {
            Some(kind) => {
                let gvk = GroupVersionKind::gvk(GROUP, &c.api_version, kind.name());
                let ar = ApiResource::from_gvk_with_plural(&gvk, kind.plural());
                let api: Api<DynamicObject> = match ns {
                    Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
                    None => Api::all_with(client.clone(), &ar),
                };
                watch(api, config.clone(), backoff.clone(), move |o| {
                    config_object(kind, o)
                })
            }
            None => {
                let api: Api<Pod> = match ns {
                    Some(ns) => Api::namespaced(client.clone(), ns),
                    None => Api::all(client.clone()),
                };
                watch(api, config.clone(), backoff.clone(), pods::pod_object)
            }
        };
        streams.push(stream.map(move |item| (scope.clone(), item)).boxed());
    }
    streams
}

/// One kube-runtime watcher as [`Item`]s.
fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    backoff: RetryBackoff,
    convert: impl Fn(&K) -> ClusterObject + Send + Sync + 'static,
) -> BoxStream<'static, Item>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher::watcher(api, config)
        .backoff(backoff)
        .map(move |event| match event {
            Ok(Event::Init) => Item::Init,
            Ok(Event::InitApply(o)) => Item::InitApply(convert(&o)),
            Ok(Event::InitDone) => Item::InitDone,
            Ok(Event::Apply(o)) => Item::Apply(convert(&o)),
            Ok(Event::Delete(o)) => Item::Delete {
                namespace: o.namespace().unwrap_or_default(),
                name: o.name_any(),
            },
            Err(e) => Item::Failed {
                expired: is_expired(&e),
                error: e.to_string(),
            },
        })
        .chain(stream::pending())
        .boxed()
}

/// Whether a failure is "your version is gone" (410), after which the watcher relists.
fn is_expired(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::InitialListFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// A ServiceEntry or WorkloadEntry as JSON text, without the bulky `managedFields`.
fn config_object(kind: Kind, o: &DynamicObject) -> ClusterObject {
    let mut value = serde_json::to_value(o).unwrap_or_default();
    if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("managedFields");
    }
    ClusterObject::Config {
        kind,
        namespace: o.namespace().unwrap_or_default(),
        name: o.name_any(),
        text: value.to_string(),
    }
}
