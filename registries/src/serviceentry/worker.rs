//! The registry task: owns what both sources hold, rebuilds the catalog when either changes, and
//! reports to the aggregate only what really changed.
//!
//! File events are debounced (an editor's save is several events); CRD events that are already
//! waiting are applied together before one rebuild. The rebuild is whole (every object converted
//! again) and cheap next to a push; what goes out is the per-hostname diff against what was
//! delivered, so a no-op rescan or relist sends nothing (REG-3, REG-14).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;
use tracing::{info, warn};

use super::catalog::{self, Pods};
use super::cluster::{ClusterEvent, ClusterObject, Scope};
use super::convert::Context;
use super::files::Directory;
use super::files::watch::{DirWatch, watch_dir};
use super::parse::{Document, Problem, parse_document};
use super::store::{Entry, Place};
use super::types::{Kind, ObjectKey};
use crate::config_store::RulePublisher;
use crate::model::{Hostname, ServiceState};
use crate::registry::{Change, RegistryError, RegistrySink, RegistryStatus, Rejection};
use crate::support::pending::{recv, sleep};

/// Quiet time after a file event before reading the directory: a save is several events
/// (truncate + write, or write temp + rename), and 50 ms lets it finish while staying well under
/// the aggregate's own 100 ms debounce.
pub const FILE_DEBOUNCE: Duration = Duration::from_millis(50);

/// Longest a burst of file events can postpone a read, so a directory written continuously is
/// still picked up.
pub const FILE_DEBOUNCE_MAX: Duration = Duration::from_millis(500);

/// The file source as the worker drives it.
pub(crate) struct FileSource {
    pub(crate) dir: Directory,
    watch: Option<(DirWatch, mpsc::Receiver<()>)>,
    interval: Duration,
    rescan_at: Instant,
    reload_at: Option<Instant>,
    burst_started: Option<Instant>,
}

impl FileSource {
    /// Watches and reads the directory; an unreadable directory at start is a config error.
    pub(crate) fn open(dir: Directory, interval: Duration) -> Result<Self, RegistryError> {
        let mut source = Self {
            dir,
            watch: None,
            interval,
            rescan_at: Instant::now(),
            reload_at: None,
            burst_started: None,
        };
        source.rescan();
        if let Some(problem) = source.dir.problem() {
            return Err(RegistryError::Config(problem.to_string()));
        }
        Ok(source)
    }

    /// Reads the directory (watching it first if need be); whether anything changed.
    fn rescan(&mut self) -> bool {
        self.reload_at = None;
        self.burst_started = None;
        self.rescan_at = crate::duration::deadline(Instant::now(), self.interval);
        // Watch before reading, so that a change between the two is not missed.
        if self.watch.is_none() {
            match watch_dir(self.dir.path()) {
                Ok(w) => self.watch = Some(w),
                // Also when the directory is gone, which the read below reports.
                Err(e) => {
                    tracing::debug!(error = %e, interval = %humantime::format_duration(self.interval),
                    "no directory watch; relying on periodic rescans until one can be set up")
                }
            }
        }
        let changed = self.dir.rescan();
        if self.dir.problem().is_some() {
            // The watch may follow a directory that moved away; start again once it is back.
            self.watch = None;
        }
        changed
    }

    fn touched(&mut self) {
        let now = Instant::now();
        let started = *self.burst_started.get_or_insert(now);
        self.reload_at = Some((now + FILE_DEBOUNCE).min(started + FILE_DEBOUNCE_MAX));
    }
}

/// Where a [`ClusterSource`]'s objects come from, for messages.
#[derive(Debug, Clone)]
pub(crate) enum Feed {
    /// A cluster's CRDs: `networking.istio.io/v1 in cluster Kubernetes`.
    Crds { api: String },
    /// An xDS config server: `xds://host:port`.
    Xds { address: String },
}

impl Feed {
    fn place(&self, kind: Kind) -> Place {
        match self {
            Feed::Crds { api } => Place::Cluster { api: api.clone() },
            Feed::Xds { address } => Place::Xds {
                address: address.clone(),
                collection: crate::istio_api::COLLECTIONS
                    .iter()
                    .find(|c| c.kind == kind.name())
                    .map_or("", |c| c.type_url),
            },
        }
    }
}

/// The CRD source (or the xDS source, which reports the same events) as the worker holds it.
pub(crate) struct ClusterSource {
    feed: Feed,
    events: mpsc::Receiver<ClusterEvent>,
    /// The CRD watch task, aborted when the worker ends.
    _task: AbortOnDropHandle<()>,
    entries: BTreeMap<ObjectKey, Entry>,
    pods: Pods,
    /// Scopes that have not listed yet.
    pending: BTreeSet<Scope>,
    health: Option<String>,
}

impl ClusterSource {
    pub(crate) fn new(
        feed: Feed,
        scopes: Vec<Scope>,
        events: mpsc::Receiver<ClusterEvent>,
        task: AbortOnDropHandle<()>,
    ) -> Self {
        Self {
            pending: scopes.into_iter().collect(),
            feed,
            events,
            _task: task,
            entries: BTreeMap::new(),
            pods: Pods::new(),
            health: None,
        }
    }

    fn apply(&mut self, event: ClusterEvent) {
        match event {
            ClusterEvent::Health(h) => self.health = h,
            ClusterEvent::Applied(o) => self.apply_object(o, None),
            ClusterEvent::Deleted {
                kind: Some(kind),
                namespace,
                name,
            } => {
                let gone = self.entries.remove(&ObjectKey {
                    kind,
                    namespace,
                    name,
                });
                if gone.is_some() {
                    crate::metrics::config_event(kind.name(), crate::metrics::ObjectEvent::Delete);
                }
            }
            ClusterEvent::Deleted {
                kind: None,
                namespace,
                name,
            } => {
                self.pods.remove(&(namespace, name));
            }
            ClusterEvent::Listed(scope, objects) => {
                // REG-1: the relist replaces the scope's contents at once; objects it no longer
                // has are gone, the others keep their last valid versions.
                let (old, kept): (BTreeMap<_, _>, BTreeMap<_, _>) =
                    std::mem::take(&mut self.entries)
                        .into_iter()
                        .partition(|(k, _)| scope.covers(Some(k.kind), &k.namespace));
                self.entries = kept;
                self.pods.retain(|(ns, _), _| !scope.covers(None, ns));
                for o in objects {
                    self.apply_object(o, Some(&old));
                }
                self.pending.remove(&scope);
            }
        }
    }

    fn apply_object(&mut self, o: ClusterObject, old: Option<&BTreeMap<ObjectKey, Entry>>) {
        let (kind, namespace, name, text) = match o {
            ClusterObject::Undecodable {
                kind,
                namespace,
                name,
                message,
            } => (kind, namespace, name, Err(message)),
            ClusterObject::Pod {
                namespace,
                name,
                workload,
            } => {
                match workload {
                    Some(w) => self.pods.insert((namespace, name), w),
                    None => self.pods.remove(&(namespace, name)),
                };
                return;
            }
            ClusterObject::Config {
                kind,
                namespace,
                name,
                text,
            } => (kind, namespace, name, Ok(text)),
        };
        let key = ObjectKey {
            kind,
            namespace,
            name,
        };
        let place = self.feed.place(kind);
        let previous = self.entries.get(&key).or_else(|| old?.get(&key)).cloned();
        crate::metrics::config_event(
            key.kind.name(),
            crate::metrics::ObjectEvent::upsert(previous.is_some()),
        );
        let parsed = text.and_then(|text| {
            parse_document(&text, None, &key.namespace, false).map_err(|e| e.message)
        });
        let entry = match parsed {
            Ok(Document::Object(parsed)) => Entry::new(*parsed, place, previous.as_ref()),
            Ok(Document::Empty | Document::Ignored) => return,
            Err(message) => Entry {
                key: key.clone(),
                place,
                valid: previous.and_then(|p| p.valid),
                problems: vec![Problem {
                    field: String::new(),
                    line: None,
                    message,
                }],
            },
        };
        self.entries.insert(key, entry);
    }
}

/// The registry task.
pub(crate) struct Worker {
    ctx: Context,
    sink: RegistrySink,
    files: Option<FileSource>,
    cluster: Option<ClusterSource>,
    delivered: BTreeMap<Hostname, ServiceState>,
    rejected: Vec<Rejection>,
    status: RegistryStatus,
    synced: bool,
    /// Where the valid traffic rules go.
    rules: Option<RulePublisher>,
}

impl Worker {
    pub(crate) fn new(
        ctx: Context,
        sink: RegistrySink,
        files: Option<FileSource>,
        cluster: Option<ClusterSource>,
    ) -> Self {
        Self {
            ctx,
            sink,
            files,
            cluster,
            delivered: BTreeMap::new(),
            rejected: Vec::new(),
            status: RegistryStatus::Healthy,
            synced: false,
            rules: None,
        }
    }

    /// Publishes the valid traffic rules to `rules` on every rebuild.
    pub(crate) fn with_rules(mut self, rules: Option<RulePublisher>) -> Self {
        self.rules = rules;
        self
    }

    /// Runs until the sink closes.
    pub(crate) async fn run(mut self) -> Result<(), RegistryError> {
        self.publish(true).await?;
        loop {
            let files = self.files.as_mut();
            let (reload_at, rescan_at) = match &files {
                Some(f) => (f.reload_at, Some(f.rescan_at)),
                None => (None, None),
            };
            let dir_events = files.and_then(|f| f.watch.as_mut().map(|(_, rx)| rx));
            let cluster_events = self.cluster.as_mut().map(|c| &mut c.events);
            // Whether the objects may have changed (else only health may have).
            let rebuild = tokio::select! {
                signal = recv(dir_events) => {
                    match (signal, self.files.as_mut()) {
                        (Some(()), Some(f)) => f.touched(),
                        // The watch ended: read again, which starts a new one.
                        (None, Some(f)) => {
                            f.watch = None;
                            f.touched();
                        }
                        (_, None) => {}
                    }
                    false
                }
                () = sleep(reload_at) => self.rescan(),
                () = sleep(rescan_at) => self.rescan(),
                event = recv(cluster_events) => {
                    let Some(c) = self.cluster.as_mut() else { continue };
                    match event {
                        Some(event) => {
                            c.apply(event);
                            while let Ok(more) = c.events.try_recv() {
                                c.apply(more);
                            }
                        }
                        // The watch task ended (it only does when the worker is gone).
                        None => return Ok(()),
                    }
                    true
                }
            };
            self.publish(rebuild).await?;
        }
    }

    fn rescan(&mut self) -> bool {
        self.files.as_mut().is_some_and(FileSource::rescan)
    }

    /// Sends the status if it changed; with `rebuild`, the changes, the rejections if they
    /// changed, and `Synced` once every source has listed.
    async fn publish(&mut self, rebuild: bool) -> Result<(), RegistryError> {
        let reasons: Vec<&str> = self
            .files
            .iter()
            .filter_map(|f| f.dir.problem())
            .chain(self.cluster.iter().filter_map(|c| c.health.as_deref()))
            .collect();
        let status = RegistryStatus::from_reasons(&reasons);
        if status != self.status {
            self.status = status.clone();
            self.sink.status(status).await?;
        }
        if !rebuild {
            return Ok(());
        }
        let entries = self
            .files
            .iter()
            .flat_map(|f| f.dir.entries())
            .chain(self.cluster.iter().flat_map(|c| c.entries.values()));
        let empty = Pods::new();
        let pods = self.cluster.as_ref().map_or(&empty, |c| &c.pods);
        let built = catalog::build(entries, pods, &self.ctx);
        let changes = diff(&self.delivered, &built.services);
        self.delivered = built.services;
        // Rules first: a route's new subsets must reach the builder no later than the endpoint
        // changes that the same edit made.
        if let Some(rules) = &self.rules {
            rules.publish(built.rules);
        }
        self.sink.changes(changes).await?;
        let mut rejected = built.rejections;
        rejected.extend(self.files.iter().flat_map(|f| f.dir.rejections()));
        rejected.sort();
        if rejected != self.rejected {
            log_rejections(&self.rejected, &rejected);
            self.rejected = rejected.clone();
            self.sink.rejected(rejected).await?;
        }
        // What is known goes out before every source has listed (so that, should the cluster never
        // answer, the aggregate's sync timeout still serves the files); `Synced` waits for all.
        let listed = self.cluster.as_ref().is_none_or(|c| c.pending.is_empty());
        if !self.synced && listed {
            self.synced = true;
            info!(
                services = self.delivered.len(),
                rejected = self.rejected.len(),
                "ServiceEntry registry synced"
            );
            self.sink.synced().await?;
        }
        Ok(())
    }
}

/// Logs each rejection once, when it appears, and says when one is gone.
fn log_rejections(old: &[Rejection], new: &[Rejection]) {
    for r in new.iter().filter(|r| !old.contains(r)) {
        warn!(object = %r.object, source = %r.source, field = %r.field, error = %r.message,
            serving_previous = r.serving_previous, "config object rejected");
    }
    let still: BTreeSet<&str> = new.iter().map(|r| r.object.as_str()).collect();
    for r in old.iter().filter(|r| !still.contains(r.object.as_str())) {
        info!(object = %r.object, "config object no longer rejected");
    }
}

/// The changes that turn `old` into `new`: an upsert for every hostname whose state differs, a
/// delete for every hostname gone. Equal states produce nothing (REG-14).
fn diff(
    old: &BTreeMap<Hostname, ServiceState>,
    new: &BTreeMap<Hostname, ServiceState>,
) -> Vec<Change> {
    let gone = old
        .keys()
        .filter(|h| !new.contains_key(*h))
        .map(|h| Change::Delete(h.clone()));
    let changed = new
        .iter()
        .filter(|(h, s)| old.get(*h) != Some(*s))
        .map(|(_, s)| Change::Upsert(s.clone()));
    gone.chain(changed).collect()
}
