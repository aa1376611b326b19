//! The one task that owns a Consul registry's state: it runs the services-list watch, starts and
//! stops one watch per service, converts what they read, and sends the aggregate only real
//! changes.
//!
//! - **Sync**: nothing is sent until the list and every listed service were read once; then the
//!   whole state goes out as one batch, then `Synced`.
//! - **No-op answers** (a wait timeout, an idempotent write, a re-read after an index reset) give
//!   the same converted state and send nothing (REG-6, REG-14).
//! - **Failures**: any failing watch makes the registry `Degraded` (the reason names it). Upserts
//!   from healthy watches still flow, but **no deletion is sent while degraded** (REG-5, REG-8):
//!   a service that vanished is held and deleted once every watch is healthy again. An error is
//!   never read as "no services" or "no instances": failing watches report no data at all.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};
use tracing::Instrument;

use super::client::Client;
use super::config::ConsulConfig;
use super::convert::Mapping;
use super::watch::{self, Event, HealthSource, ListSource, Outcome, Shared};
use super::wire::{HealthEntry, ServiceList};
use crate::model::{Hostname, ServiceState};
use crate::registry::{Change, RegistryError, RegistrySink, RegistryStatus};

/// Watch reports waiting for the registry task. Watches wait when it is behind (back-pressure);
/// 1,024 absorbs one report from every watch of a large catalog at once.
const EVENTS_CAPACITY: usize = 1024;

/// At most this many reports are applied before changes are sent, so a burst becomes one batch
/// without delaying the first change for long.
const EVENT_BATCH: usize = 1024;

/// How many failing watches the Degraded reason names.
const REASONS_SHOWN: usize = 3;

/// Which watch failed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum WatchKey {
    List,
    Service(Arc<str>),
}

/// A service the list names and this registry serves.
#[derive(Debug)]
struct Watched {
    hostname: Hostname,
    generation: u64,
    abort: AbortHandle,
    /// Read at least once.
    read: bool,
    /// What its last read converts to.
    state: Option<ServiceState>,
}

/// The state-owning task of one Consul registry.
pub(super) struct Worker {
    client: Client,
    mapping: Mapping,
    config: Arc<ConsulConfig>,
    shared: Arc<Shared>,
    sink: RegistrySink,
    tx: mpsc::Sender<Event>,
    rx: mpsc::Receiver<Event>,
    tasks: JoinSet<()>,
    list_read: bool,
    services: BTreeMap<Arc<str>, Watched>,
    /// Hostname → the services that map to it (normally one).
    owners: BTreeMap<Hostname, BTreeSet<Arc<str>>>,
    /// What the aggregate has.
    sent: BTreeMap<Hostname, ServiceState>,
    /// Hostnames whose state may differ from `sent`.
    dirty: BTreeSet<Hostname>,
    failing: BTreeMap<WatchKey, String>,
    status: RegistryStatus,
    synced: bool,
    generation: u64,
    /// Service names already reported as unusable, so each is logged once.
    rejected: BTreeSet<String>,
}

impl Worker {
    /// A worker for `config` (validated), talking through `client`.
    pub(super) fn new(config: ConsulConfig, client: Client, sink: RegistrySink) -> Self {
        let (tx, rx) = mpsc::channel(EVENTS_CAPACITY);
        Self {
            mapping: Mapping::new(&config),
            shared: Arc::new(Shared::new(&config)),
            config: Arc::new(config),
            client,
            sink,
            tx,
            rx,
            tasks: JoinSet::new(),
            list_read: false,
            services: BTreeMap::new(),
            owners: BTreeMap::new(),
            sent: BTreeMap::new(),
            dirty: BTreeSet::new(),
            failing: BTreeMap::new(),
            status: RegistryStatus::Healthy,
            synced: false,
            generation: 0,
            rejected: BTreeSet::new(),
        }
    }

    /// Runs until the sink closes.
    pub(super) async fn run(mut self) -> Result<(), RegistryError> {
        let source = ListSource(self.client.clone());
        let span = tracing::info_span!("consul_watch", watch = "services");
        self.tasks.spawn(
            watch::run(
                source,
                Arc::clone(&self.shared),
                self.tx.clone(),
                Event::List,
            )
            .instrument(span),
        );
        loop {
            tokio::select! {
                event = self.rx.recv() => {
                    // The worker holds a sender, so the channel never closes while it runs.
                    let Some(event) = event else { return Ok(()) };
                    self.apply(event);
                    for _ in 1..EVENT_BATCH {
                        match self.rx.try_recv() {
                            Ok(event) => self.apply(event),
                            Err(_) => break,
                        }
                    }
                    self.flush().await?;
                }
                Some(done) = self.tasks.join_next() => {
                    if let Err(e) = done && e.is_panic() {
                        tracing::error!(error = %e, "a consul watch panicked; its service is no longer watched");
                    }
                }
            }
        }
    }

    fn apply(&mut self, event: Event) {
        match event {
            Event::List(outcome) => match outcome {
                Outcome::Data(list) => {
                    self.failing.remove(&WatchKey::List);
                    self.list_read = true;
                    self.set_list(list);
                }
                Outcome::Recovered => {
                    self.failing.remove(&WatchKey::List);
                }
                Outcome::Failed(reason) => {
                    self.failing.insert(WatchKey::List, reason);
                }
            },
            Event::Service {
                name,
                generation,
                outcome,
            } => {
                if self.services.get(&name).map(|w| w.generation) != Some(generation) {
                    return; // A stopped watch's last word.
                }
                let key = WatchKey::Service(Arc::clone(&name));
                match outcome {
                    Outcome::Data(entries) => {
                        self.failing.remove(&key);
                        self.set_instances(&name, &entries);
                    }
                    Outcome::Recovered => {
                        self.failing.remove(&key);
                    }
                    Outcome::Failed(reason) => {
                        self.failing.insert(key, reason);
                    }
                }
            }
        }
    }

    /// Starts watches for new services and stops those of services that are gone.
    fn set_list(&mut self, list: ServiceList) {
        let wanted: BTreeSet<&str> = list
            .keys()
            .map(String::as_str)
            .filter(|n| !self.config.skip_services.iter().any(|s| s == n))
            .collect();
        let gone: Vec<Arc<str>> = self
            .services
            .keys()
            .filter(|n| !wanted.contains(&***n))
            .cloned()
            .collect();
        for name in gone {
            self.stop(&name);
        }
        for name in wanted {
            if !self.services.contains_key(name) {
                self.start(name);
            }
        }
        self.shared.set_service_watches(self.services.len());
    }

    fn start(&mut self, name: &str) {
        let hostname = match self.config.hostname(name) {
            Ok(h) => h,
            Err(e) => {
                if self.rejected.insert(name.to_string()) {
                    tracing::warn!(service = name, error = %e, "consul service skipped: its name gives no valid hostname");
                }
                return;
            }
        };
        let name: Arc<str> = Arc::from(name);
        self.generation += 1;
        let generation = self.generation;
        let source = HealthSource {
            client: self.client.clone(),
            name: Arc::clone(&name),
        };
        let label = Arc::clone(&name);
        let span = tracing::info_span!("consul_watch", service = %name);
        let abort = self.tasks.spawn(
            watch::run(
                source,
                Arc::clone(&self.shared),
                self.tx.clone(),
                move |outcome| Event::Service {
                    name: Arc::clone(&label),
                    generation,
                    outcome,
                },
            )
            .instrument(span),
        );
        let owners = self.owners.entry(hostname.clone()).or_default();
        owners.insert(Arc::clone(&name));
        if owners.len() > 1 {
            tracing::warn!(%hostname, services = %owners.iter().map(|o| &**o).collect::<Vec<_>>().join(", "), "several consul services map to one hostname; the first by name is served");
        }
        self.services.insert(
            name,
            Watched {
                hostname,
                generation,
                abort,
                read: false,
                state: None,
            },
        );
    }

    fn stop(&mut self, name: &Arc<str>) {
        let Some(w) = self.services.remove(name) else {
            return;
        };
        w.abort.abort();
        self.failing.remove(&WatchKey::Service(Arc::clone(name)));
        if let Some(owners) = self.owners.get_mut(&w.hostname) {
            owners.remove(name);
            if owners.is_empty() {
                self.owners.remove(&w.hostname);
            }
        }
        self.dirty.insert(w.hostname);
    }

    fn set_instances(&mut self, name: &Arc<str>, entries: &[HealthEntry]) {
        let Some(w) = self.services.get_mut(name) else {
            return;
        };
        let conversion = self.mapping.convert(&w.hostname, entries, w.state.as_ref());
        w.read = true;
        if conversion.state != w.state {
            for note in &conversion.notes {
                tracing::warn!(service = %name, "{note}");
            }
            w.state = conversion.state;
            self.dirty.insert(w.hostname.clone());
        }
    }

    /// What should be served for `host`: the state of its first owner that has one.
    fn desired(&self, host: &Hostname) -> Option<&ServiceState> {
        self.owners
            .get(host)?
            .iter()
            .find_map(|n| self.services.get(n)?.state.as_ref())
    }

    /// Sends status and changes, as far as sync and health allow.
    async fn flush(&mut self) -> Result<(), RegistryError> {
        let status = self.current_status();
        if status != self.status {
            self.status = status.clone();
            self.sink.status(status).await?;
        }
        if !self.synced {
            if !self.list_read || self.services.values().any(|w| !w.read) {
                return Ok(());
            }
            self.synced = true;
            let hosts: Vec<Hostname> = self.owners.keys().cloned().collect();
            let changes = self.changes(hosts, true);
            self.dirty.clear();
            tracing::info!(services = self.sent.len(), "consul registry synced");
            self.sink.changes(changes).await?;
            return self.sink.synced().await;
        }
        let dirty = std::mem::take(&mut self.dirty);
        let deletions_allowed = self.status == RegistryStatus::Healthy;
        let changes = self.changes(dirty, deletions_allowed);
        self.sink.changes(changes).await
    }

    /// The changes that bring `sent` to the desired state of `hosts`. Deletions that are not
    /// allowed stay dirty.
    fn changes(
        &mut self,
        hosts: impl IntoIterator<Item = Hostname>,
        deletions_allowed: bool,
    ) -> Vec<Change> {
        let mut changes = Vec::new();
        for host in hosts {
            match (self.desired(&host).cloned(), self.sent.contains_key(&host)) {
                (Some(state), _) => {
                    if self.sent.get(&host) != Some(&state) {
                        self.sent.insert(host, state.clone());
                        changes.push(Change::Upsert(state));
                    }
                }
                (None, true) if deletions_allowed => {
                    self.sent.remove(&host);
                    changes.push(Change::Delete(host));
                }
                (None, true) => {
                    self.dirty.insert(host);
                }
                (None, false) => {}
            }
        }
        changes
    }

    fn current_status(&self) -> RegistryStatus {
        if self.failing.is_empty() {
            return RegistryStatus::Healthy;
        }
        let total = self.services.len() + 1;
        let shown: Vec<String> = self
            .failing
            .iter()
            .take(REASONS_SHOWN)
            .map(|(key, reason)| match key {
                WatchKey::List => format!("services list: {reason}"),
                WatchKey::Service(name) => format!("service {name:?}: {reason}"),
            })
            .collect();
        RegistryStatus::Degraded {
            reason: format!(
                "{} of {total} Consul watches failing; serving the last good state. {}",
                self.failing.len(),
                shown.join("; ")
            ),
        }
    }
}
