//! The aggregate task: the one owner of every registry's state.
//!
//! It receives [`RegistryMessage`]s, re-merges only the hostnames they touch, drops no-op changes
//! (REG-14), feeds real ones to the [`Debouncer`], and hands due batches to the snapshot builder as
//! [`PushRequest`]s, one at a time. Nothing is pushed before every registry has synced or its sync
//! timeout has passed (TRANS-11, BUG-9); then the first push carries the whole mesh.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep_until};
use tracing::{error, info, warn};
use tributary_registries::duration::deadline;
use tributary_registries::{
    Change, Hostname, RegistryEvent, RegistryId, RegistryMessage, RegistryStatus, ServiceState,
};

use super::debounce::{ChangeKind, DebounceSettings, Debouncer, Due};
use super::merge::{MergedService, merge};
use super::status::{RegistriesView, RegistryInfo, SyncState};

/// What the snapshot builder is asked to do: rebuild these hostnames from their merged state.
#[derive(Debug)]
pub struct PushRequest {
    /// Hostnames with their merged state now; `None` means the hostname is gone.
    pub hosts: Vec<(Hostname, Option<Arc<MergedService>>)>,
    /// Whether service attributes may have changed (else endpoints only).
    pub service_change: bool,
    /// When the oldest change in this push arrived.
    pub triggered_at: std::time::Instant,
    /// Dropped or completed by the builder when the push is done; the next batch waits for it.
    pub done: oneshot::Sender<()>,
}

/// Settings of the aggregate.
#[derive(Debug, Clone)]
pub struct AggregateSettings {
    /// Registries in merge order; the first one wins service attributes.
    pub registries: Vec<RegistryId>,
    /// Debounce settings.
    pub debounce: DebounceSettings,
    /// How long to wait for each registry's initial sync before serving without it, loudly.
    pub sync_timeout: Duration,
}

/// A change to the set of registries, from config reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AggregateCommand {
    /// The registry was removed from the config: delete everything it reported.
    Remove(RegistryId),
    /// The registry restarts with new settings. What it reported stays served until the new
    /// instance reports `Synced`; then the hostnames it did not report again are deleted, so a
    /// settings change never empties the mesh in between.
    Restart(RegistryId),
}

/// A command with the sender that hears once the aggregate applied it.
type AckedCommand = (AggregateCommand, oneshot::Sender<()>);

/// The aggregate's receiving end of reload commands.
pub type CommandReceiver = mpsc::Receiver<AckedCommand>;

/// Sends reload commands to the aggregate task and waits until each is applied.
///
/// Registry events and commands travel on two channels, so without the wait a restarted
/// registry's first listing can reach the aggregate before the `Restart` that tells it to replace
/// the old instance's state, and the old instance's hostnames would then never be deleted.
#[derive(Debug, Clone)]
pub struct CommandSender(mpsc::Sender<AckedCommand>);

impl CommandSender {
    /// A command channel holding up to `capacity` unapplied commands.
    pub fn channel(capacity: usize) -> (Self, CommandReceiver) {
        let (tx, rx) = mpsc::channel(capacity);
        (Self(tx), rx)
    }

    /// Sends `cmd` and returns once the aggregate has applied it, or once the aggregate is gone.
    pub async fn apply(&self, cmd: AggregateCommand) {
        let (applied, done) = oneshot::channel();
        if self.0.send((cmd, applied)).await.is_ok() {
            let _ = done.await;
        }
    }
}

/// The aggregate's state, owned by its task.
pub struct Aggregate {
    settings: AggregateSettings,
    /// Hostname → the states registries reported for it, keyed by registry position in merge order.
    states: HashMap<Hostname, BTreeMap<usize, ServiceState>>,
    merged: HashMap<Hostname, Arc<MergedService>>,
    registries: Vec<RegistryInfo>,
    debouncer: Debouncer,
    /// Set once every registry synced (or timed out) and the whole mesh went out.
    serving: bool,
    started: Instant,
    view: RegistriesView,
    /// Reload commands, if the runtime reloads config.
    commands: Option<CommandReceiver>,
    /// Restarting registries (by position) and the hostnames they have not re-reported yet.
    restarting: HashMap<usize, HashSet<Hostname>>,
}

impl Aggregate {
    /// A new aggregate publishing its registry status to `view`.
    pub fn new(settings: AggregateSettings, view: RegistriesView) -> Self {
        let registries = settings
            .registries
            .iter()
            .map(|id| RegistryInfo::new(id.clone()))
            .collect();
        Self {
            debouncer: Debouncer::new(settings.debounce),
            settings,
            states: HashMap::new(),
            merged: HashMap::new(),
            registries,
            serving: false,
            started: Instant::now(),
            view,
            commands: None,
            restarting: HashMap::new(),
        }
    }

    /// Also takes registry add/remove/restart commands from `commands` (config reload).
    pub fn with_commands(mut self, commands: CommandReceiver) -> Self {
        self.commands = Some(commands);
        self
    }

    /// Runs until every registry sender is gone.
    pub async fn run(
        mut self,
        mut events: mpsc::Receiver<RegistryMessage>,
        pushes: mpsc::Sender<PushRequest>,
    ) {
        self.publish_view();
        let mut commands = self.commands.take();
        let mut in_flight: Option<oneshot::Receiver<()>> = None;
        loop {
            if !self.serving && self.all_synced_or_timed_out() {
                self.serving = true;
                self.publish_view();
                self.debouncer.clear();
                info!(
                    services = self.merged.len(),
                    "all registries synced; serving the mesh"
                );
                let hosts = self.merged.keys().cloned().collect();
                let due = Due {
                    hosts,
                    service_change: true,
                    first: self.started,
                    events: 0,
                };
                in_flight = self.push(due, &pushes).await;
                if in_flight.is_none() {
                    return;
                }
            }
            let due_at = match (&in_flight, self.serving) {
                (None, true) => self.debouncer.next_due(),
                _ => None,
            };
            let sync_deadline =
                (!self.serving).then(|| deadline(self.started, self.settings.sync_timeout));
            tokio::select! {
                biased;
                _ = async { in_flight.as_mut().expect("guarded").await }, if in_flight.is_some() => {
                    in_flight = None;
                }
                msg = events.recv() => match msg {
                    Some(msg) => self.apply(msg),
                    None => return,
                },
                cmd = async { commands.as_mut().expect("guarded").recv().await }, if commands.is_some() => match cmd {
                    Some((cmd, applied)) => {
                        self.command(cmd);
                        let _ = applied.send(());
                    }
                    None => commands = None,
                },
                _ = sleep_until(due_at.unwrap_or_else(Instant::now)), if due_at.is_some() => {
                    if let Some(due) = self.debouncer.take_due(Instant::now()) {
                        in_flight = self.push(due, &pushes).await;
                        if in_flight.is_none() {
                            return;
                        }
                    }
                }
                _ = sleep_until(sync_deadline.unwrap_or_else(Instant::now)), if sync_deadline.is_some() => {
                    self.time_out_unsynced();
                }
            }
        }
    }

    /// Sends a batch to the builder; `None` if the builder is gone (shutting down).
    async fn push(
        &mut self,
        due: Due,
        pushes: &mpsc::Sender<PushRequest>,
    ) -> Option<oneshot::Receiver<()>> {
        let hosts = due
            .hosts
            .into_iter()
            .map(|h| {
                let m = self.merged.get(&h).cloned();
                (h, m)
            })
            .collect::<Vec<_>>();
        let waited = due.first.elapsed();
        let reason = if due.service_change {
            "service"
        } else {
            "endpoint"
        };
        super::metrics::push_started(waited, reason, self.merged.len());
        tracing::debug!(
            hosts = hosts.len(),
            events = due.events,
            waited_ms = waited.as_millis() as u64,
            reason,
            "push debounce fired"
        );
        let (done, done_rx) = oneshot::channel();
        let request = PushRequest {
            hosts,
            service_change: due.service_change,
            triggered_at: std::time::Instant::now()
                .checked_sub(waited)
                .unwrap_or_else(std::time::Instant::now),
            done,
        };
        pushes.send(request).await.ok()?;
        Some(done_rx)
    }

    fn position(&mut self, id: &RegistryId) -> usize {
        if let Some(i) = self.registries.iter().position(|r| &r.id == id) {
            return i;
        }
        warn!(registry = %id, "event from a registry that is not configured; merging it last");
        self.registries.push(RegistryInfo::new(id.clone()));
        self.registries.len() - 1
    }

    /// Applies one reload command.
    pub fn command(&mut self, cmd: AggregateCommand) {
        match cmd {
            AggregateCommand::Remove(id) => {
                let pos = self.position(&id);
                self.restarting.remove(&pos);
                for host in self.hosts_of(pos) {
                    self.apply_change(pos, Change::Delete(host));
                }
                // A removed registry never blocks readiness.
                if matches!(self.registries[pos].sync, SyncState::Pending) {
                    self.registries[pos].sync = SyncState::Synced {
                        at: SystemTime::now(),
                    };
                }
                info!(registry = %id, "registry removed by config reload");
            }
            AggregateCommand::Restart(id) => {
                let pos = self.position(&id);
                let hosts = self.hosts_of(pos).into_iter().collect();
                self.restarting.insert(pos, hosts);
                info!(registry = %id, "registry restarting with new settings");
            }
        }
        self.publish_view();
    }

    fn hosts_of(&self, pos: usize) -> Vec<Hostname> {
        self.states
            .iter()
            .filter(|(_, per)| per.contains_key(&pos))
            .map(|(h, _)| h.clone())
            .collect()
    }

    /// Applies one registry message.
    pub fn apply(&mut self, msg: RegistryMessage) {
        let pos = self.position(&msg.registry);
        let now = SystemTime::now();
        self.registries[pos].last_event = Some(now);
        match msg.event {
            RegistryEvent::Changes(changes) => {
                for change in changes {
                    if let Some(stale) = self.restarting.get_mut(&pos) {
                        stale.remove(change.hostname());
                    }
                    self.apply_change(pos, change);
                }
            }
            RegistryEvent::Synced => {
                if let Some(stale) = self.restarting.remove(&pos) {
                    // The restarted registry's listing is complete: what it did not report again
                    // is gone.
                    for host in stale {
                        self.apply_change(pos, Change::Delete(host));
                    }
                    // REL-1: a restarted instance that listed its platform completely is healthy,
                    // whatever killed the one before it.
                    let info = &mut self.registries[pos];
                    if let RegistryStatus::Degraded { reason } = &info.status {
                        info!(registry = %info.id, previous = %reason, "restarted registry synced; healthy again");
                        info.status = RegistryStatus::Healthy;
                        info.degraded_since = None;
                    }
                }
                let info = &mut self.registries[pos];
                if !matches!(info.sync, SyncState::Synced { .. }) {
                    info!(registry = %info.id, services = info.services, "registry synced");
                    info.sync = SyncState::Synced { at: now };
                }
            }
            RegistryEvent::Status(status) => {
                let info = &mut self.registries[pos];
                match (&status, &info.status) {
                    (RegistryStatus::Degraded { reason }, RegistryStatus::Healthy) => {
                        error!(registry = %info.id, %reason, "registry degraded; serving its last known state");
                        info.degraded_since = Some(now);
                    }
                    (RegistryStatus::Healthy, RegistryStatus::Degraded { .. }) => {
                        info!(registry = %info.id, "registry healthy again");
                        info.degraded_since = None;
                    }
                    _ => {}
                }
                info.status = status;
            }
            RegistryEvent::Rejected(rejected) => {
                let info = &mut self.registries[pos];
                // The registry logs each rejection as it happens; this is the summary.
                if rejected.len() != info.rejected.len() {
                    info!(registry = %info.id, rejected = rejected.len(), "rejected config objects changed");
                }
                info.rejected = rejected;
            }
        }
        self.publish_view();
    }

    fn apply_change(&mut self, pos: usize, change: Change) {
        let host = change.hostname().clone();
        super::metrics::registry_change(
            self.registries[pos].id.as_str(),
            matches!(change, Change::Delete(_)),
        );
        let per_registry = self.states.entry(host.clone()).or_default();
        let kind = match change {
            Change::Upsert(state) => {
                // istiod's kinds: a registry update that leaves the service as it was is `eds`.
                let inbound = match per_registry.get(&pos) {
                    Some(old) if old.service == state.service => "eds",
                    _ => "svc",
                };
                super::metrics::inbound_update(inbound);
                if per_registry.insert(pos, state).is_none() {
                    self.registries[pos].services += 1;
                }
                "svc"
            }
            Change::Delete(_) => {
                super::metrics::inbound_update("svcdelete");
                if per_registry.remove(&pos).is_some() {
                    self.registries[pos].services -= 1;
                }
                "svcdelete"
            }
        };
        let merged = merge(per_registry.values()).map(Arc::new);
        if per_registry.is_empty() {
            self.states.remove(&host);
        }
        let old = match &merged {
            Some(m) => self.merged.insert(host.clone(), Arc::clone(m)),
            None => self.merged.remove(&host),
        };
        let change_kind = match (&old, &merged) {
            (None, None) => return,
            (Some(o), Some(n)) if o == n => return, // REG-14: no-op resync, no push.
            (Some(o), Some(n)) if o.service == n.service && o.conflicts == n.conflicts => {
                ChangeKind::Endpoints
            }
            _ => ChangeKind::Service,
        };
        if let Some(n) = &merged {
            let new_conflicts = n
                .conflicts
                .iter()
                .filter(|c| old.as_ref().is_none_or(|o| !o.conflicts.contains(c)));
            for conflict in new_conflicts {
                warn!(hostname = %host, conflict = %conflict, "registries disagree");
            }
        }
        tracing::trace!(hostname = %host, kind, ?change_kind, "hostname changed");
        self.debouncer.record(host, change_kind, Instant::now());
    }

    fn all_synced_or_timed_out(&self) -> bool {
        self.registries
            .iter()
            .all(|r| !matches!(r.sync, SyncState::Pending))
    }

    fn time_out_unsynced(&mut self) {
        for info in &mut self.registries {
            if matches!(info.sync, SyncState::Pending) {
                error!(
                    registry = %info.id,
                    timeout_s = self.settings.sync_timeout.as_secs_f64(),
                    "registry did not sync in time; serving without its full state. Is its platform reachable?"
                );
                info.sync = SyncState::TimedOut {
                    at: SystemTime::now(),
                };
            }
        }
        self.publish_view();
    }

    fn publish_view(&self) {
        for info in &self.registries {
            let synced = matches!(info.sync, SyncState::Synced { .. });
            let degraded = matches!(info.status, RegistryStatus::Degraded { .. });
            // REG-2: "registry stale since", as a Unix time to alert on (`time() - x > 300`); 0
            // while healthy.
            let since = info
                .degraded_since
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0.0, |d| d.as_secs_f64());
            super::metrics::registry_state(
                info.id.as_str(),
                synced,
                degraded,
                since,
                info.rejected.len(),
            );
        }
        self.view.publish(self.registries.clone(), self.serving);
    }
}
