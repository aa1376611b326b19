//! Tests of the running Consul registry against the fake Consul (real HTTP on loopback, real
//! time: the paused-clock tests of pacing and backoff are in `watch` and in `support`'s
//! `rate_limit` and `backoff`).

mod conformance;
mod faults;
mod index;
mod mapping;
mod scale;

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::fake::{FakeConsul, Instance};
use super::{ConsulConfig, ConsulRegistry};
use crate::model::{Hostname, ServiceState};
use crate::registry::{
    Change, Registry, RegistryError, RegistryEvent, RegistryMessage, RegistrySink, RegistryStatus,
};

/// Longest wait for an expected event. Generous: three engineers' builds share two cores.
const EVENT_TIMEOUT: Duration = Duration::from_secs(15);

/// A config for `fake` that reacts fast: short waits and backoff, so faults show and heal quickly.
pub(super) fn config(fake: &FakeConsul) -> ConsulConfig {
    ConsulConfig {
        name: "consul-test".into(),
        address: Some(fake.url()),
        wait: Duration::from_secs(2),
        min_query_interval: Duration::from_millis(10),
        backoff: super::BackoffConfig {
            initial: Duration::from_millis(50),
            max: Duration::from_millis(400),
        },
        ..ConsulConfig::default()
    }
}

pub(super) fn host(service: &str) -> Hostname {
    Hostname::new(&format!("{service}.service.consul")).unwrap()
}

/// `n` instances of `service` at 10.0.<k>.<i>, port 8080.
pub(super) fn register(fake: &FakeConsul, service: &str, n: usize, k: u8) {
    for i in 1..=n {
        let id = format!("{service}-{i}");
        fake.register(Instance::new(service, &id, &format!("10.0.{k}.{i}"), 8080));
    }
}

/// One data change the registry sent.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Logged {
    Upsert(Hostname),
    Delete(Hostname),
}

/// A running Consul registry and what it sent, as the aggregate would see it.
pub(super) struct Running {
    rx: mpsc::Receiver<RegistryMessage>,
    task: JoinHandle<Result<(), RegistryError>>,
    pub(super) view: BTreeMap<Hostname, ServiceState>,
    pub(super) status: RegistryStatus,
    pub(super) synced: bool,
    pub(super) log: Vec<Logged>,
    /// Every status the registry reported, in order.
    pub(super) statuses: Vec<RegistryStatus>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Running {
    pub(super) fn start(config: ConsulConfig) -> Running {
        let registry = Box::new(ConsulRegistry::new(config));
        let (tx, rx) = mpsc::channel(1024);
        let sink = RegistrySink::new(registry.id(), tx);
        Running {
            rx,
            task: tokio::spawn(registry.run(sink)),
            view: BTreeMap::new(),
            status: RegistryStatus::Healthy,
            synced: false,
            log: Vec::new(),
            statuses: Vec::new(),
        }
    }

    /// Starts and waits for `Synced`.
    pub(super) async fn synced(config: ConsulConfig) -> Running {
        let mut r = Self::start(config);
        r.wait_for("Synced", |r| r.synced).await;
        r
    }

    fn apply(&mut self, event: RegistryEvent) {
        match event {
            RegistryEvent::Synced => {
                assert!(!self.synced, "Synced is sent once");
                self.synced = true;
            }
            RegistryEvent::Status(s) => {
                self.statuses.push(s.clone());
                self.status = s;
            }
            RegistryEvent::Rejected(_) => {}
            RegistryEvent::Changes(changes) => {
                assert!(!changes.is_empty(), "no empty batches");
                for c in changes {
                    match c {
                        Change::Upsert(state) => {
                            let h = state.service.hostname.clone();
                            self.log.push(Logged::Upsert(h.clone()));
                            self.view.insert(h, state);
                        }
                        Change::Delete(h) => {
                            assert_eq!(
                                self.status,
                                RegistryStatus::Healthy,
                                "REG-5/REG-8: no deletion while degraded ({h})"
                            );
                            self.log.push(Logged::Delete(h.clone()));
                            self.view.remove(&h);
                        }
                    }
                }
            }
        }
    }

    async fn next(&mut self, within: Duration) -> Option<RegistryEvent> {
        match tokio::time::timeout(within, self.rx.recv()).await {
            Err(_) => None,
            Ok(Some(m)) => Some(m.event),
            Ok(None) => panic!("the registry stopped: {:?}", (&mut self.task).await),
        }
    }

    /// Applies events until `done` holds; panics after [`EVENT_TIMEOUT`].
    pub(super) async fn wait_for(&mut self, what: &str, done: impl Fn(&Running) -> bool) {
        let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
        while !done(self) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Some(e) => self.apply(e),
                None => panic!(
                    "timed out waiting for {what}; log {:?}, status {:?}, synced {}",
                    self.log, self.status, self.synced
                ),
            }
        }
    }

    /// Applies whatever arrives within `quiet`.
    pub(super) async fn settle(&mut self, quiet: Duration) {
        while let Some(e) = self.next(quiet).await {
            self.apply(e);
        }
    }

    /// Waits for the registry to be degraded.
    pub(super) async fn wait_degraded(&mut self) -> String {
        self.wait_for("Degraded", |r| {
            matches!(r.status, RegistryStatus::Degraded { .. })
        })
        .await;
        match &self.status {
            RegistryStatus::Degraded { reason } => reason.clone(),
            RegistryStatus::Healthy => unreachable!("waited for it"),
        }
    }

    /// The endpoints of `service` as (address, healthy).
    pub(super) fn endpoints(&self, service: &str) -> Vec<(String, bool)> {
        self.view
            .get(&host(service))
            .map(|s| {
                s.endpoints
                    .iter()
                    .map(|e| (e.address.clone(), e.health == crate::model::Health::Healthy))
                    .collect()
            })
            .unwrap_or_default()
    }
}
