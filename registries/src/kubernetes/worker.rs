//! The registry task: runs one task per cluster, merges their shards per hostname and reports the
//! merged state to the aggregate.
//!
//! Merge: the same Service in several clusters is one service. Attributes come from the first
//! cluster that has it (the primary, then the others by id), VIPs are kept per cluster, endpoints
//! are the union (each tagged with its cluster), service accounts the union. A hostname is
//! reported only when its merged state changed.
//!
//! Clusters come and go with the kubeconfig directory (REG-9, BUG-15): a new file starts a
//! cluster, whose services join when it has synced; a removed file stops the cluster and removes
//! exactly its shards; a changed file starts the cluster again with the new credentials beside
//! the old task, and swaps the new shards in only when the new task has synced, so a rotation
//! with unchanged data reports nothing and a rotation to broken credentials keeps the old data
//! (reported as degraded).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;
use tracing::{Instrument, info, warn};

use super::cluster::{self, ClusterEvent, ClusterReport, ClusterRun, ClusterSettings};
use super::remote;
use crate::model::{ClusterId, Hostname, ServiceState};
use crate::registry::{Change, RegistryError, RegistrySink, RegistryStatus};
use crate::support::kube_client::Credentials;

/// Reports waiting for the worker; cluster tasks wait when it is full.
pub(crate) const REPORT_CAPACITY: usize = 256;

/// Quiet time after a directory event before rescanning: a Secret update or `mv` is several
/// events, and reading half-way through one would start a cluster twice.
pub(crate) const DIR_DEBOUNCE: Duration = Duration::from_millis(200);

/// Where a cluster's credentials came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The registry's own cluster, or one listed in the config: fixed.
    Configured,
    /// A file in the kubeconfig directory.
    Directory,
}

/// A task plus what it reported.
struct Run {
    generation: u64,
    /// Aborted when the run is dropped (replaced by a newer generation, or the worker ends).
    _task: AbortOnDropHandle<()>,
    shards: HashMap<Hostname, ServiceState>,
    synced: bool,
    health: Option<String>,
}

struct Entry {
    source: Source,
    credentials: Credentials,
    /// The run whose shards are served.
    active: Run,
    /// A run with new credentials, waiting for its sync to replace `active`.
    pending: Option<Run>,
}

/// The worker's inputs besides the sink.
pub(crate) struct WorkerSetup {
    pub(crate) settings: Arc<ClusterSettings>,
    pub(crate) primary: ClusterId,
    /// Configured clusters, primary first.
    pub(crate) configured: Vec<(ClusterId, Credentials)>,
    pub(crate) dir: Option<PathBuf>,
    pub(crate) remote_sync_timeout: Duration,
}

pub(crate) struct Worker {
    setup: WorkerSetup,
    sink: RegistrySink,
    clusters: BTreeMap<ClusterId, Entry>,
    /// Unusable kubeconfig files (or the directory itself), by cluster id.
    dir_errors: BTreeMap<String, String>,
    merged: BTreeMap<Hostname, ServiceState>,
    reports_tx: mpsc::Sender<ClusterReport>,
    reports: mpsc::Receiver<ClusterReport>,
    next_generation: u64,
    /// Clusters known at start; `Synced` waits for them (remote ones up to the timeout).
    initial: BTreeSet<ClusterId>,
    synced_sent: bool,
    status: RegistryStatus,
}

impl Worker {
    pub(crate) fn new(setup: WorkerSetup, sink: RegistrySink) -> Self {
        let (reports_tx, reports) = mpsc::channel(REPORT_CAPACITY);
        Self {
            setup,
            sink,
            clusters: BTreeMap::new(),
            dir_errors: BTreeMap::new(),
            merged: BTreeMap::new(),
            reports_tx,
            reports,
            next_generation: 1,
            initial: BTreeSet::new(),
            synced_sent: false,
            status: RegistryStatus::Healthy,
        }
    }

    fn spawn(&mut self, cluster: &ClusterId, credentials: &Credentials) -> Run {
        let generation = self.next_generation;
        self.next_generation += 1;
        let run = ClusterRun {
            cluster: cluster.clone(),
            generation,
            credentials: credentials.clone(),
        };
        let span = tracing::info_span!("kube_cluster", cluster = %cluster, generation);
        let task = AbortOnDropHandle::new(tokio::spawn(
            cluster::run(run, self.setup.settings.clone(), self.reports_tx.clone())
                .instrument(span),
        ));
        Run {
            generation,
            _task: task,
            shards: HashMap::new(),
            synced: false,
            health: None,
        }
    }

    fn add(&mut self, id: ClusterId, credentials: Credentials, source: Source) {
        info!(cluster = %id, ?source, "starting cluster");
        let active = self.spawn(&id, &credentials);
        self.clusters.insert(
            id,
            Entry {
                source,
                credentials,
                active,
                pending: None,
            },
        );
    }

    /// Runs until the sink closes.
    pub(crate) async fn run(mut self) -> Result<(), RegistryError> {
        for (id, creds) in std::mem::take(&mut self.setup.configured) {
            self.initial.insert(id.clone());
            self.add(id, creds, Source::Configured);
        }
        let mut dir_events = None;
        let mut _dir_watch = None;
        if let Some(dir) = self.setup.dir.clone() {
            let (watch, events) =
                remote::watch_dir(&dir).map_err(|e| RegistryError::Config(e.to_string()))?;
            _dir_watch = Some(watch);
            dir_events = Some(events);
            let affected = self.rescan();
            self.initial.extend(
                self.clusters
                    .iter()
                    .filter(|(_, e)| e.source == Source::Directory)
                    .map(|(id, _)| id.clone()),
            );
            self.emit(affected).await?;
        }
        self.publish_status().await?;
        let remote_deadline =
            crate::duration::deadline(Instant::now(), self.setup.remote_sync_timeout);
        let mut remote_waited = false;
        loop {
            let waiting = !self.synced_sent && !remote_waited;
            let deadline = async move {
                match waiting {
                    true => tokio::time::sleep_until(remote_deadline).await,
                    false => std::future::pending().await,
                }
            };
            let dir_signal = async {
                match dir_events.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                report = self.reports.recv() => {
                    // The worker holds a sender, so the channel never closes.
                    let Some(report) = report else { return Ok(()) };
                    let affected = self.on_report(report);
                    self.emit(affected).await?;
                }
                signal = dir_signal => {
                    if signal.is_none() {
                        dir_events = None;
                        continue;
                    }
                    // Let a burst of file events settle, then read the directory once.
                    if let Some(rx) = dir_events.as_mut() {
                        tokio::time::sleep(DIR_DEBOUNCE).await;
                        while rx.try_recv().is_ok() {}
                    }
                    let affected = self.rescan();
                    self.emit(affected).await?;
                }
                _ = deadline => {
                    remote_waited = true;
                    let late: Vec<&ClusterId> = self.initial.iter()
                        .filter(|id| self.clusters.get(*id).is_some_and(|e| !e.active.synced))
                        .collect();
                    if !late.is_empty() {
                        warn!(clusters = ?late, timeout = ?self.setup.remote_sync_timeout,
                            "remote clusters have not synced; reporting synced without them");
                    }
                    self.initial.retain(|id| *id == self.setup.primary);
                }
            }
            self.publish_status().await?;
            self.maybe_synced().await?;
        }
    }

    /// Applies one report; returns the hostnames whose merged state may have changed.
    fn on_report(&mut self, r: ClusterReport) -> BTreeSet<Hostname> {
        let mut affected = BTreeSet::new();
        let Some(entry) = self.clusters.get_mut(&r.cluster) else {
            return affected;
        };
        if entry.active.generation == r.generation {
            let run = &mut entry.active;
            match r.event {
                ClusterEvent::Shards(changes) => {
                    for (host, state) in changes {
                        match state {
                            Some(s) => run.shards.insert(host.clone(), s),
                            None => run.shards.remove(&host),
                        };
                        affected.insert(host);
                    }
                }
                ClusterEvent::Synced => run.synced = true,
                ClusterEvent::Health(h) => run.health = h,
            }
        } else if let Some(run) = entry
            .pending
            .as_mut()
            .filter(|p| p.generation == r.generation)
        {
            match r.event {
                ClusterEvent::Shards(changes) => {
                    for (host, state) in changes {
                        match state {
                            Some(s) => run.shards.insert(host, s),
                            None => run.shards.remove(&host),
                        };
                    }
                }
                ClusterEvent::Health(h) => run.health = h,
                ClusterEvent::Synced => {
                    run.synced = true;
                    if let Some(new) = entry.pending.take() {
                        info!(cluster = %r.cluster, "new credentials synced; swapping the cluster's shards");
                        affected.extend(entry.active.shards.keys().cloned());
                        affected.extend(new.shards.keys().cloned());
                        // Dropping the old run aborts its task.
                        entry.active = new;
                    }
                }
            }
        }
        affected
    }

    /// Reads the kubeconfig directory and starts, stops or re-credentials clusters to match.
    fn rescan(&mut self) -> BTreeSet<Hostname> {
        let mut affected = BTreeSet::new();
        let Some(dir) = self.setup.dir.clone() else {
            return affected;
        };
        let found = match remote::scan(&dir) {
            Ok(f) => {
                self.dir_errors.remove("");
                f
            }
            Err(e) => {
                // Never read an unreadable directory as "no clusters".
                warn!(error = %e, "keeping the current remote clusters");
                self.dir_errors.insert(String::new(), e.to_string());
                return affected;
            }
        };
        let gone: Vec<ClusterId> = self
            .clusters
            .iter()
            .filter(|(id, e)| e.source == Source::Directory && !found.contains_key(*id))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            if let Some(entry) = self.clusters.remove(&id) {
                info!(cluster = %id, "kubeconfig removed; removing the cluster's endpoints");
                affected.extend(entry.active.shards.keys().cloned());
            }
            self.initial.remove(&id);
        }
        self.dir_errors
            .retain(|id, _| id.is_empty() || found.contains_key(&ClusterId::new(id)));
        for (id, creds) in found {
            let key = id.as_str().to_string();
            let creds = match creds {
                Ok(c) => c,
                Err(e) => {
                    warn!(cluster = %id, error = %e, "unusable kubeconfig; keeping what the cluster had");
                    self.dir_errors.insert(key, e);
                    continue;
                }
            };
            match self.clusters.get(&id).map(|e| e.source) {
                Some(Source::Configured) => {
                    self.dir_errors.insert(
                        key,
                        format!("kubeconfig for cluster {id} in the directory conflicts with a configured cluster; ignored"),
                    );
                }
                None => {
                    self.dir_errors.remove(&key);
                    self.add(id, creds, Source::Directory);
                }
                Some(Source::Directory) => {
                    self.dir_errors.remove(&key);
                    let same = self
                        .clusters
                        .get(&id)
                        .is_some_and(|e| e.credentials == creds);
                    if !same {
                        info!(cluster = %id, "kubeconfig changed; starting the cluster with the new credentials");
                        let run = self.spawn(&id, &creds);
                        if let Some(e) = self.clusters.get_mut(&id) {
                            e.credentials = creds;
                            e.pending = Some(run);
                        }
                    }
                }
            }
        }
        affected
    }

    /// Clusters in merge order: the primary, then the others by id.
    fn order(&self) -> Vec<&Entry> {
        let primary = self.clusters.get(&self.setup.primary);
        primary
            .into_iter()
            .chain(
                self.clusters
                    .iter()
                    .filter(|(id, _)| **id != self.setup.primary)
                    .map(|(_, e)| e),
            )
            .collect()
    }

    fn merge(&self, host: &Hostname) -> Option<ServiceState> {
        let mut merged: Option<ServiceState> = None;
        for entry in self.order() {
            let Some(state) = entry.active.shards.get(host) else {
                continue;
            };
            match merged.as_mut() {
                None => merged = Some(state.clone()),
                Some(m) => {
                    for (cluster, vips) in &state.service.vips {
                        m.service
                            .vips
                            .entry(cluster.clone())
                            .or_insert_with(|| vips.clone());
                    }
                    m.endpoints.extend(state.endpoints.iter().cloned());
                    m.service
                        .service_accounts
                        .extend(state.service.service_accounts.iter().cloned());
                }
            }
        }
        if let Some(m) = merged.as_mut() {
            m.service.service_accounts.sort();
            m.service.service_accounts.dedup();
        }
        merged
    }

    async fn emit(&mut self, hosts: BTreeSet<Hostname>) -> Result<(), RegistryError> {
        let mut changes = Vec::new();
        for host in hosts {
            match self.merge(&host) {
                Some(state) => {
                    if self.merged.get(&host) != Some(&state) {
                        self.merged.insert(host, state.clone());
                        changes.push(Change::Upsert(state));
                    }
                }
                None => {
                    if self.merged.remove(&host).is_some() {
                        changes.push(Change::Delete(host));
                    }
                }
            }
        }
        self.sink.changes(changes).await
    }

    async fn publish_status(&mut self) -> Result<(), RegistryError> {
        let mut reasons: Vec<String> = Vec::new();
        for (id, e) in &self.clusters {
            reasons.extend(e.active.health.clone());
            if let Some(h) = e.pending.as_ref().and_then(|p| p.health.clone()) {
                reasons.push(format!(
                    "new credentials of cluster {id} do not work yet: {h}"
                ));
            }
        }
        reasons.extend(self.dir_errors.values().cloned());
        let status = RegistryStatus::from_reasons(&reasons);
        if status != self.status {
            self.status = status.clone();
            self.sink.status(status).await?;
        }
        Ok(())
    }

    async fn maybe_synced(&mut self) -> Result<(), RegistryError> {
        if self.synced_sent {
            return Ok(());
        }
        let all = self
            .initial
            .iter()
            .all(|id| self.clusters.get(id).is_none_or(|e| e.active.synced));
        if all {
            info!(services = self.merged.len(), "kubernetes registry synced");
            self.synced_sent = true;
            self.sink.synced().await?;
        }
        Ok(())
    }
}
