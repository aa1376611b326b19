//! The four watches of one cluster: Services, EndpointSlices, Pods and Nodes, each through
//! kube-runtime's `watcher` into a reflector `Store`, merged into one stream of [`WatchItem`]s.
//!
//! kube-runtime does the list/watch protocol: paged lists, resuming from the last
//! resourceVersion (bookmarks included) when a watch ends normally, and a relist after a
//! `410 Gone` ERROR event. Each event is applied to the kind's reflector writer before it is
//! passed on, so the store is already up to date when the cluster task sees it; during a relist
//! the writer buffers `InitApply` objects and swaps them in at `InitDone` (REG-1), so the store is
//! never empty or partial on the way.
//!
//! One guard of our own: an API server (or proxy) that answers a watch from a compacted version
//! with an HTTP `410` status, instead of the ERROR event real API servers send, would make the
//! watcher retry that same version forever; the stream is then restarted from scratch, which
//! relists.

use std::fmt::Debug;

use futures::stream::{BoxStream, SelectAll};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::convert::SERVICE_NAME_LABEL;
use crate::support::backoff::RetryBackoff;

/// The kinds a cluster is watched for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Kind {
    Services,
    EndpointSlices,
    Pods,
    Nodes,
}

impl Kind {
    /// All of them; a cluster is synced once each has listed.
    pub(crate) const ALL: [Kind; 4] = [
        Kind::Services,
        Kind::EndpointSlices,
        Kind::Pods,
        Kind::Nodes,
    ];

    /// istiod's `type` label of `pilot_k8s_reg_events`.
    pub(crate) fn metric_label(self) -> &'static str {
        match self {
            Kind::Services => "Services",
            Kind::EndpointSlices => "EndpointSlice",
            Kind::Pods => "Pods",
            Kind::Nodes => "Nodes",
        }
    }

    /// The resource's plural, as in its URLs.
    pub(crate) fn plural(self) -> &'static str {
        match self {
            Kind::Services => "services",
            Kind::EndpointSlices => "endpointslices",
            Kind::Pods => "pods",
            Kind::Nodes => "nodes",
        }
    }
}

/// What the cluster task hears from the watches.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WatchItem {
    /// One object changed; its store already shows the change.
    Touched {
        kind: Kind,
        namespace: String,
        name: String,
        /// For EndpointSlices: the Service it belongs to.
        owner: Option<String>,
    },
    /// A list (the first, or a relist) completed and its store was swapped in whole.
    Listed(Kind),
    /// A request failed. `expired` failures (410) are followed by a relist, not an outage.
    Failed {
        kind: Kind,
        error: String,
        expired: bool,
    },
}

/// What to watch.
#[derive(Debug, Clone)]
pub(crate) struct WatchSettings {
    /// Namespaces for Services, EndpointSlices and Pods; empty is all.
    pub(crate) namespaces: Vec<String>,
    /// Label selector for Services.
    pub(crate) label_selector: Option<String>,
    /// Server-side watch timeout, seconds.
    pub(crate) timeout_secs: u32,
    /// Retry delays.
    pub(crate) backoff: RetryBackoff,
}

/// The reflector stores of one cluster. With several namespaces there is one store (and one
/// watch) per namespace and kind.
#[derive(Clone, Default)]
pub(crate) struct Stores {
    pub(crate) services: Vec<Store<Service>>,
    pub(crate) slices: Vec<Store<EndpointSlice>>,
    pub(crate) pods: Vec<Store<Pod>>,
    pub(crate) nodes: Vec<Store<Node>>,
}

fn find<K>(stores: &[Store<K>], namespace: Option<&str>, name: &str) -> Option<std::sync::Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    let mut key = ObjectRef::<K>::new(name);
    if let Some(ns) = namespace {
        key = key.within(ns);
    }
    stores.iter().find_map(|s| s.get(&key))
}

impl Stores {
    pub(crate) fn service(&self, ns: &str, name: &str) -> Option<std::sync::Arc<Service>> {
        find(&self.services, Some(ns), name)
    }

    pub(crate) fn slice(&self, ns: &str, name: &str) -> Option<std::sync::Arc<EndpointSlice>> {
        find(&self.slices, Some(ns), name)
    }
}

impl super::convert::Lookup for Stores {
    fn pod(&self, namespace: &str, name: &str) -> Option<std::sync::Arc<Pod>> {
        find(&self.pods, Some(namespace), name)
    }

    fn node(&self, name: &str) -> Option<std::sync::Arc<Node>> {
        find(&self.nodes, None, name)
    }
}

/// Starts every watch of one cluster; the stream never ends (errors are items, retried with
/// backoff inside).
pub(crate) fn start(
    client: &Client,
    s: &WatchSettings,
) -> (Stores, SelectAll<BoxStream<'static, WatchItem>>) {
    let mut stores = Stores::default();
    let mut streams = SelectAll::new();
    let base = watcher::Config::default().timeout(s.timeout_secs);
    let svc_config = match &s.label_selector {
        Some(sel) => base.clone().labels(sel),
        None => base.clone(),
    };
    let namespaces: Vec<Option<&str>> = match s.namespaces.is_empty() {
        true => vec![None],
        false => s.namespaces.iter().map(|n| Some(n.as_str())).collect(),
    };
    for ns in namespaces {
        let (store, stream) = watch_kind(
            api(client, ns),
            svc_config.clone(),
            s.backoff.clone(),
            Kind::Services,
            strip_service,
        );
        stores.services.push(store);
        streams.push(stream);
        let (store, stream) = watch_kind(
            api(client, ns),
            base.clone(),
            s.backoff.clone(),
            Kind::EndpointSlices,
            strip_meta,
        );
        stores.slices.push(store);
        streams.push(stream);
        let (store, stream) = watch_kind(
            api(client, ns),
            base.clone(),
            s.backoff.clone(),
            Kind::Pods,
            strip_pod,
        );
        stores.pods.push(store);
        streams.push(stream);
    }
    let (store, stream) = watch_kind(
        Api::all(client.clone()),
        base,
        s.backoff.clone(),
        Kind::Nodes,
        strip_node,
    );
    stores.nodes.push(store);
    streams.push(stream);
    (stores, streams)
}

fn api<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

// What the stores keep: only what conversion reads, so that thousands of pods and nodes cost
// little memory.
fn strip_meta<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
    o.meta_mut().annotations = None;
}

fn strip_service(o: &mut Service) {
    o.metadata.managed_fields = None;
    o.status = None;
}

fn strip_pod(o: &mut Pod) {
    strip_meta(o);
    o.status = None;
    if let Some(spec) = o.spec.as_mut() {
        let keep = k8s_openapi::api::core::v1::PodSpec {
            node_name: spec.node_name.take(),
            service_account_name: spec.service_account_name.take(),
            ..Default::default()
        };
        *spec = keep;
    }
}

fn strip_node(o: &mut Node) {
    strip_meta(o);
    o.spec = None;
    o.status = None;
}

/// Whether a failure is "your version is gone" (410), and whether the stream must be restarted
/// by us to relist (an HTTP 410 status at watch start; see the module docs).
fn classify(e: &watcher::Error) -> (bool, bool) {
    match e {
        watcher::Error::WatchError(status) => (status.code == 410, false),
        watcher::Error::InitialListFailed(kube::Error::Api(status)) => (status.code == 410, false),
        watcher::Error::WatchStartFailed(kube::Error::Api(status)) if status.code == 410 => {
            (true, true)
        }
        _ => (false, false),
    }
}

type Inner<K> = BoxStream<'static, watcher::Result<Event<K>>>;

struct KindWatch<K: Resource<DynamicType = ()> + Clone + 'static> {
    api: Api<K>,
    config: watcher::Config,
    backoff: RetryBackoff,
    writer: reflector::store::Writer<K>,
    inner: Option<Inner<K>>,
}

fn watch_kind<K>(
    api: Api<K>,
    config: watcher::Config,
    backoff: RetryBackoff,
    kind: Kind,
    strip: fn(&mut K),
) -> (Store<K>, BoxStream<'static, WatchItem>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let writer = reflector::store::Writer::<K>::default();
    let store = writer.as_reader();
    let state = KindWatch {
        api,
        config,
        backoff,
        writer,
        inner: None,
    };
    let stream = stream::unfold(state, move |mut st| async move {
        loop {
            let inner = st.inner.get_or_insert_with(|| {
                watcher::watcher(st.api.clone(), st.config.clone())
                    .backoff(st.backoff.clone())
                    .boxed()
            });
            match inner.next().await {
                // The watcher never ends; if it did, start again.
                None => st.inner = None,
                Some(Ok(event)) => {
                    let event = event.modify(strip);
                    count_event(kind, &event, &st.writer.as_reader());
                    st.writer.apply_watcher_event(&event);
                    let item = match &event {
                        Event::Init | Event::InitApply(_) => None,
                        Event::InitDone => Some(WatchItem::Listed(kind)),
                        Event::Apply(o) | Event::Delete(o) => Some(WatchItem::Touched {
                            kind,
                            namespace: o.namespace().unwrap_or_default(),
                            name: o.name_any(),
                            owner: o.labels().get(SERVICE_NAME_LABEL).cloned(),
                        }),
                    };
                    if let Some(item) = item {
                        return Some((item, st));
                    }
                }
                Some(Err(e)) => {
                    let (expired, restart) = classify(&e);
                    if restart {
                        st.inner = None;
                    }
                    let item = WatchItem::Failed {
                        kind,
                        error: e.to_string(),
                        expired,
                    };
                    return Some((item, st));
                }
            }
        }
    });
    (store, stream.boxed())
}

/// Counts a watch event before it reaches the store (`pilot_k8s_reg_events`): an apply of an
/// object the store already holds is an update, else an add (initial listings count as adds).
fn count_event<K>(kind: Kind, event: &Event<K>, store: &Store<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    use crate::metrics::{ObjectEvent, k8s_registry_event};
    match event {
        Event::Apply(o) | Event::InitApply(o) => {
            let existed = store.get(&ObjectRef::from_obj(o)).is_some();
            k8s_registry_event(kind.metric_label(), ObjectEvent::upsert(existed));
        }
        Event::Delete(_) => k8s_registry_event(kind.metric_label(), ObjectEvent::Delete),
        Event::Init | Event::InitDone => {}
    }
}
