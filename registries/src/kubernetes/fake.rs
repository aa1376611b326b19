//! A fake Kubernetes API server for tests: real HTTP on `127.0.0.1:0`, a kubeconfig pointing at
//! it, and the real wire format, so `kube` and `kube-runtime` run against it unmodified.
//!
//! It is generic over (group, version, plural): the core kinds the Kubernetes registry watches are
//! registered at start, and any other kind (a CRD such as `networking.istio.io/v1`
//! `serviceentries`) is one [`FakeApiServer::register`] away. It speaks:
//!
//! - list with `resourceVersion`, `resourceVersionMatch`, `limit` / `continue` (a consistent
//!   snapshot per paged list), `labelSelector`, `fieldSelector` (`metadata.name|namespace`);
//! - watch with `watch=true`, `resourceVersion` (resuming from the event log; `0` or empty sends
//!   the current objects as ADDED first), `allowWatchBookmarks`, `timeoutSeconds`, newline-
//!   delimited `ADDED` / `MODIFIED` / `DELETED` / `BOOKMARK` / `ERROR` events, and label-selector
//!   transitions (an object leaving the selector is DELETED for that watch);
//! - `410 Gone` on demand: [`FakeApiServer::expire`] compacts the history and ends open watches
//!   with an `ERROR` event carrying a `Status` with code 410 (what real API servers send); a watch
//!   or exact list from a compacted version answers the same way, or with an HTTP 410 status when
//!   [`FakeApiServer::set_gone_as_http_status`] asks for it;
//! - GET of one object.
//!
//! Tests change objects with [`FakeApiServer::apply`] / [`FakeApiServer::delete`] (no-op updates
//! change nothing, as on a real server), replay an unchanged object with
//! [`FakeApiServer::touch`], take the server down and back with [`FakeApiServer::stop`] /
//! [`FakeApiServer::restart`] (same port; open connections are cut), and read how many list and
//! watch requests each kind received.

mod http;
pub mod objects;
mod selector;
mod store;

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use ::kube::Resource;
use ::kube::core::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde::Serialize;
use serde_json::Value;
use tokio::net::TcpSocket;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use store::{Notice, Store};

/// The API group of Istio's networking CRDs.
const ISTIO_GROUP: &str = "networking.istio.io";

/// Istio's networking kinds the config store reads, with their plurals.
const ISTIO_NETWORKING: [(&str, &str); 4] = [
    ("ServiceEntry", "serviceentries"),
    ("WorkloadEntry", "workloadentries"),
    ("DestinationRule", "destinationrules"),
    ("VirtualService", "virtualservices"),
];

/// A kind of object the fake serves, named the way its URL path names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceType {
    /// API group; empty for the core group (`/api/v1`).
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Plural resource name in URLs, e.g. `endpointslices`.
    pub plural: String,
    /// The object kind, e.g. `EndpointSlice`.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

impl ResourceType {
    /// Any resource type (a CRD, say).
    pub fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
        }
    }

    /// The resource type of a typed `k8s-openapi` (or `kube::CustomResource`) object.
    pub fn of<K: Resource<DynamicType = ()>>() -> Self
    where
        K::Scope: 'static,
    {
        let namespaced =
            std::any::TypeId::of::<K::Scope>() == std::any::TypeId::of::<NamespaceResourceScope>();
        Self::new(
            &K::group(&()),
            &K::version(&()),
            &K::plural(&()),
            &K::kind(&()),
            namespaced,
        )
    }

    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        match self.group.is_empty() {
            true => self.version.clone(),
            false => format!("{}/{}", self.group, self.version),
        }
    }

    /// `group/version/plural`, the key the router looks types up by.
    pub(crate) fn path_key(&self) -> String {
        format!("{}/{}/{}", self.group, self.version, self.plural)
    }
}

/// List and watch requests one kind has received.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// List requests, each page counted.
    pub lists: usize,
    /// Watch requests.
    pub watches: usize,
}

/// What a test changes on the fake that it cannot do.
#[derive(Debug, thiserror::Error)]
pub enum FakeError {
    /// The kind was never registered.
    #[error("resource {0} is not registered with the fake API server")]
    NotRegistered(String),
    /// The object cannot be stored (no name, not an object, ...).
    #[error("fake API server rejected the object: {0}")]
    Invalid(String),
    /// A typed object did not serialize.
    #[error("cannot serialize the object: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// Behaviour knobs tests turn.
#[derive(Debug, Clone, Default)]
pub(crate) struct Settings {
    /// Answer a watch from a compacted version with HTTP 410 instead of an ERROR event.
    pub(crate) gone_as_http_status: bool,
    /// End every watch after this long, whatever `timeoutSeconds` asked.
    pub(crate) watch_timeout_cap: Option<Duration>,
    /// Serve at most this many items per list page, whatever `limit` asked.
    pub(crate) max_page_size: Option<usize>,
    /// Wait this long before answering each list page (a slow relist).
    pub(crate) list_delay: Duration,
}

/// State shared by the server's tasks and the test.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) store: Mutex<Store>,
    pub(crate) settings: Mutex<Settings>,
    pub(crate) counts: Mutex<std::collections::HashMap<ResourceType, RequestCounts>>,
    pub(crate) open_watches: AtomicUsize,
}

/// One period of listening; dropping `down` (or sending `true`) ends it.
#[derive(Debug)]
struct Listening {
    down: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// The fake API server. Stops listening when dropped.
#[derive(Debug)]
pub struct FakeApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    listening: Mutex<Option<Listening>>,
}

impl FakeApiServer {
    /// Starts a server on `127.0.0.1:0` serving Services, Pods, Nodes, Namespaces and
    /// EndpointSlices (`discovery.k8s.io/v1`).
    pub async fn start() -> io::Result<Self> {
        let mut store = Store::new();
        store.register(ResourceType::of::<Service>());
        store.register(ResourceType::of::<Pod>());
        store.register(ResourceType::of::<Node>());
        store.register(ResourceType::of::<Namespace>());
        store.register(ResourceType::of::<EndpointSlice>());
        let shared = Arc::new(Shared {
            store: Mutex::new(store),
            settings: Mutex::new(Settings::default()),
            counts: Mutex::default(),
            open_watches: AtomicUsize::new(0),
        });
        let server = Self {
            shared,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            listening: Mutex::new(None),
        };
        let addr = server.addr;
        server.listen(addr)
    }

    fn listen(mut self, addr: SocketAddr) -> io::Result<Self> {
        let listening = self.bind(addr)?;
        self.addr = listening.0;
        *self.listening.lock() = Some(listening.1);
        Ok(self)
    }

    fn bind(&self, addr: SocketAddr) -> io::Result<(SocketAddr, Listening)> {
        let socket = TcpSocket::new_v4()?;
        // Rebinding the same port after `stop` must not wait for TIME_WAIT to clear.
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        let listener = socket.listen(128)?;
        let local = listener.local_addr()?;
        let (down, down_rx) = watch::channel(false);
        let task = tokio::spawn(http::serve(listener, self.shared.clone(), down_rx));
        Ok((local, Listening { down, task }))
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig whose current context points at this server with a bearer token.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
             users:\n- name: fake\n  user:\n    token: fake-token\ncontexts:\n- name: fake\n  context:\n    \
             cluster: fake\n    user: fake\n    namespace: default\ncurrent-context: fake\n",
            self.url()
        )
    }

    /// Writes [`Self::kubeconfig_yaml`] to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// Serves another kind (a CRD, say); idempotent.
    pub fn register(&self, rt: ResourceType) {
        self.shared.store.lock().register(rt);
    }

    /// Registers Istio's `networking.istio.io/<version>` kinds the config store reads
    /// (`ServiceEntry`, `WorkloadEntry`, `DestinationRule`, `VirtualService`), as a cluster with
    /// Istio's CRDs installed serves them; returns their resource types in that order.
    pub fn register_istio_networking(&self, version: &str) -> [ResourceType; 4] {
        let rts = ISTIO_NETWORKING
            .map(|(kind, plural)| ResourceType::new(ISTIO_GROUP, version, plural, kind, true));
        for rt in &rts {
            self.register(rt.clone());
        }
        rts
    }

    /// Creates or updates a typed object.
    pub fn apply<K>(&self, obj: &K) -> Result<(), FakeError>
    where
        K: Resource<DynamicType = ()> + Serialize,
        K::Scope: 'static,
    {
        self.apply_json(&ResourceType::of::<K>(), serde_json::to_value(obj)?)
    }

    /// Creates or updates an object of any registered kind.
    pub fn apply_json(&self, rt: &ResourceType, obj: Value) -> Result<(), FakeError> {
        let mut store = self.shared.store.lock();
        if !store.collections.contains_key(rt) {
            return Err(FakeError::NotRegistered(rt.path_key()));
        }
        store.apply(rt, obj).map(drop).map_err(FakeError::Invalid)
    }

    /// Deletes a typed object; `false` if it did not exist. `ns` is ignored for cluster kinds.
    pub fn delete<K>(&self, ns: &str, name: &str) -> bool
    where
        K: Resource<DynamicType = ()>,
        K::Scope: 'static,
    {
        self.delete_json(&ResourceType::of::<K>(), ns, name)
    }

    /// Deletes an object of any registered kind; `false` if it did not exist.
    pub fn delete_json(&self, rt: &ResourceType, ns: &str, name: &str) -> bool {
        self.shared.store.lock().delete(rt, ns, name)
    }

    /// Sends a MODIFIED event for an unchanged object at a new resourceVersion.
    pub fn touch<K>(&self, ns: &str, name: &str) -> Result<(), FakeError>
    where
        K: Resource<DynamicType = ()>,
        K::Scope: 'static,
    {
        self.shared
            .store
            .lock()
            .touch(&ResourceType::of::<K>(), ns, name)
            .map_err(FakeError::Invalid)
    }

    /// Compacts the history of a kind and ends its open watches with an `ERROR` 410 event, so
    /// clients must relist.
    pub fn expire<K>(&self)
    where
        K: Resource<DynamicType = ()>,
        K::Scope: 'static,
    {
        self.expire_type(&ResourceType::of::<K>());
    }

    /// [`Self::expire`] for any registered kind.
    pub fn expire_type(&self, rt: &ResourceType) {
        let mut store = self.shared.store.lock();
        store.compact(rt);
        let rv = store.rv;
        let _ = store.notices.send(Arc::new(Notice::Expire {
            resource: rt.clone(),
            rv,
        }));
    }

    /// Ends the open watches of a kind normally (as a server-side watch timeout does); clients
    /// resume from their last resourceVersion.
    pub fn end_watches<K>(&self)
    where
        K: Resource<DynamicType = ()>,
        K::Scope: 'static,
    {
        let store = self.shared.store.lock();
        let _ = store.notices.send(Arc::new(Notice::End {
            resource: ResourceType::of::<K>(),
        }));
    }

    /// Compacts the history of a kind without touching open watches: a client that resumes a
    /// watch from an older version will be told 410.
    pub fn compact<K>(&self)
    where
        K: Resource<DynamicType = ()>,
        K::Scope: 'static,
    {
        self.shared.store.lock().compact(&ResourceType::of::<K>());
    }

    /// Sends a BOOKMARK at the current resourceVersion to open watches of a kind that allow them.
    pub fn bookmark<K>(&self)
    where
        K: Resource<DynamicType = ()>,
        K::Scope: 'static,
    {
        let store = self.shared.store.lock();
        let _ = store.notices.send(Arc::new(Notice::Bookmark {
            resource: ResourceType::of::<K>(),
            rv: store.rv,
        }));
    }

    /// Answer watches from compacted versions with HTTP 410 rather than an ERROR event. Real API
    /// servers send the event; this tests a client's guard against the other form.
    pub fn set_gone_as_http_status(&self, on: bool) {
        self.shared.settings.lock().gone_as_http_status = on;
    }

    /// Ends every watch after `cap` (a server-side watch timeout), or never when `None`.
    pub fn set_watch_timeout(&self, cap: Option<Duration>) {
        self.shared.settings.lock().watch_timeout_cap = cap;
    }

    /// Serves at most `n` items per list page.
    pub fn set_max_page_size(&self, n: Option<usize>) {
        self.shared.settings.lock().max_page_size = n;
    }

    /// Delays every list page by `delay`.
    pub fn set_list_delay(&self, delay: Duration) {
        self.shared.settings.lock().list_delay = delay;
    }

    /// List and watch requests received for a kind.
    pub fn counts<K>(&self) -> RequestCounts
    where
        K: Resource<DynamicType = ()>,
        K::Scope: 'static,
    {
        self.counts_of(&ResourceType::of::<K>())
    }

    /// List and watch requests received for any kind.
    pub fn counts_of(&self, rt: &ResourceType) -> RequestCounts {
        self.shared
            .counts
            .lock()
            .get(rt)
            .copied()
            .unwrap_or_default()
    }

    /// Watches currently open, all kinds together.
    pub fn open_watches(&self) -> usize {
        self.shared.open_watches.load(Ordering::SeqCst)
    }

    /// Stops listening and cuts every open connection (watches end, new requests are refused).
    /// Objects can still be changed meanwhile.
    pub async fn stop(&self) {
        let listening = self.listening.lock().take();
        if let Some(l) = listening {
            let _ = l.down.send(true);
            let _ = l.task.await;
        }
    }

    /// Listens again on the same address after [`Self::stop`].
    pub async fn restart(&self) -> io::Result<()> {
        if self.listening.lock().is_some() {
            return Ok(());
        }
        let (_, listening) = self.bind(self.addr)?;
        *self.listening.lock() = Some(listening);
        Ok(())
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        if let Some(l) = self.listening.lock().take() {
            let _ = l.down.send(true);
            l.task.abort();
        }
    }
}
