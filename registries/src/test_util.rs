//! The registry conformance test: the one test every registry adapter passes, the way every vector
//! sink passes one harness.
//!
//! An adapter's test implements [`ConformanceDriver`] over a fake of its platform (a fake Consul, a
//! fake API server, the mock's handle) and calls [`check_registry_conformance`]. The harness runs
//! the registry against a real [`RegistrySink`] over a channel and checks the [`Registry`]
//! contract:
//!
//! 1. the initial state, then exactly one `Synced` (and never a second one);
//! 2. every `Upsert` carries the *full* state of its hostname (all endpoints, not a patch), keyed
//!    by hostname, with the registry's `Origin` on the service and on every endpoint;
//! 3. a no-op resync emits nothing (REG-14);
//! 4. one endpoint changed → an upsert of that hostname only;
//! 5. a removed service → `Change::Delete`;
//! 6. a platform failure → `Degraded`, and never a deletion (REG-2, REG-5);
//! 7. heal → `Healthy`, and only the real changes made during the outage.
//!
//! Compiled for this crate's tests and, for other crates, behind the `test-util` feature. It
//! panics with a message saying which rule broke, like any test assertion. It waits with
//! `tokio::time`, so a registry with no real I/O can run it under a paused clock.

pub mod mcp_server;
mod observed;

pub use observed::{Observed, Observer};

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

use crate::model::{Hostname, Origin, ServiceState};
use crate::registry::{
    Change, Registry, RegistryError, RegistryEvent, RegistryMessage, RegistrySink, RegistryStatus,
};

/// What a driver's platform operations may fail with.
pub type DriverError = Box<dyn std::error::Error + Send + Sync>;

/// How long the harness waits for an expected event before failing. Generous, because real-time
/// drivers (fake HTTP servers, polling registries) share CI cores; under a paused clock it costs
/// nothing.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Room for the registry's events. Larger than anything the test produces, so a registry never
/// waits on the harness (the harness checks content, not backpressure).
const EVENT_CAPACITY: usize = 1024;

/// Drives one registry's platform for [`check_registry_conformance`].
///
/// Services are named by a short `name` ("alpha"); the driver decides the hostname the registry
/// will report for it (`alpha.default.svc.cluster.local`, `alpha.service.consul`, ...).
pub trait ConformanceDriver: Send {
    /// The `Origin` every service and endpoint the registry emits must carry.
    fn origin(&self) -> Origin;

    /// The registry under test, reading this driver's platform. Called once, after the initial
    /// services were added; its id must be `origin().registry`.
    fn registry(&mut self) -> Box<dyn Registry>;

    /// How long to watch before concluding nothing more will come: a few poll intervals for a
    /// polling registry, a little longer than any debounce.
    fn quiet_period(&self) -> Duration {
        Duration::from_millis(500)
    }

    /// Adds a service with `endpoints` distinct endpoints; returns its hostname. May be called
    /// before [`Self::registry`] (initial state) and while the platform is failing.
    fn add_service(
        &mut self,
        name: &str,
        endpoints: usize,
    ) -> impl Future<Output = Result<Hostname, DriverError>> + Send;

    /// Changes one endpoint of the service (its address, port or a label), keeping the count.
    fn change_endpoint(
        &mut self,
        name: &str,
    ) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// Removes the service.
    fn remove_service(
        &mut self,
        name: &str,
    ) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// Makes the registry see the same data again (a relist, a resync, a re-write of the same
    /// content) without changing anything.
    fn resync(&mut self) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// Makes the platform fail (unreachable, 5xx, watch errors) until [`Self::heal`].
    fn fail(&mut self) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// Ends the failure.
    fn heal(&mut self) -> impl Future<Output = Result<(), DriverError>> + Send;
}

/// Runs the conformance test against the registry `driver` builds. Panics on the first broken
/// rule, naming it.
pub async fn check_registry_conformance<D: ConformanceDriver>(mut driver: D) {
    let origin = driver.origin();
    let alpha = step(driver.add_service("alpha", 2).await, "add alpha");
    let beta = step(driver.add_service("beta", 1).await, "add beta");

    let registry = driver.registry();
    assert_eq!(
        registry.id(),
        origin.registry,
        "the registry's id is the origin's registry"
    );
    let (tx, rx) = mpsc::channel(EVENT_CAPACITY);
    let sink = RegistrySink::new(origin.registry.clone(), tx);
    let task = AbortOnDropHandle::new(tokio::spawn(registry.run(sink)));
    let mut h = Harness {
        rx,
        task,
        origin,
        quiet: driver.quiet_period(),
        view: BTreeMap::new(),
        status: RegistryStatus::Healthy,
        synced: false,
        log: Vec::new(),
    };

    // 1. Initial state, then Synced.
    h.wait_for("the initial state then Synced", |h| h.synced)
        .await;
    h.assert_endpoints(&alpha, 2, "initial state");
    h.assert_endpoints(&beta, 1, "initial state");
    assert_eq!(
        h.view.len(),
        2,
        "initial state is exactly alpha and beta: {:?}",
        h.view.keys()
    );
    assert!(
        !h.log.iter().any(|c| matches!(c, Logged::Delete(_))),
        "no deletions in the initial state: {:?}",
        h.log
    );

    // 3. A no-op resync emits nothing (REG-14).
    step(driver.resync().await, "resync");
    h.expect_quiet("a no-op resync").await;

    // 4. One endpoint changes: a full upsert of that hostname only.
    let before = h.view[&alpha].clone();
    step(
        driver.change_endpoint("alpha").await,
        "change an endpoint of alpha",
    );
    let mark = h.log.len();
    h.wait_for("an upsert of alpha after an endpoint change", |h| {
        h.view.get(&alpha) != Some(&before)
    })
    .await;
    h.assert_endpoints(&alpha, 2, "an upsert carries the full state, not a patch");
    h.assert_only(mark, &[&alpha], "changing one endpoint of alpha");

    // A new service.
    let mark = h.log.len();
    let gamma = step(driver.add_service("gamma", 3).await, "add gamma");
    h.wait_for("an upsert of gamma", |h| h.view.contains_key(&gamma))
        .await;
    h.wait_for("gamma with its 3 endpoints", |h| {
        h.view.get(&gamma).is_some_and(|s| s.endpoints.len() == 3)
    })
    .await;
    h.assert_only(mark, &[&gamma], "adding gamma");

    // 5. A removed service is deleted.
    let mark = h.log.len();
    step(driver.remove_service("beta").await, "remove beta");
    h.wait_for("Change::Delete of beta", |h| !h.view.contains_key(&beta))
        .await;
    assert!(
        h.log[mark..].contains(&Logged::Delete(beta.clone())),
        "removal is a Change::Delete: {:?}",
        &h.log[mark..]
    );
    h.assert_only(mark, &[&beta], "removing beta");

    // 6. Failure: Degraded, no deletions; a change made meanwhile waits for healing.
    let mark = h.log.len();
    step(driver.fail().await, "make the platform fail");
    h.wait_for("Degraded after a platform failure", |h| {
        matches!(h.status, RegistryStatus::Degraded { .. })
    })
    .await;
    let delta = step(
        driver.add_service("delta", 1).await,
        "add delta during the failure",
    );
    h.settle("the failure").await;
    assert!(
        !h.log[mark..].iter().any(|c| matches!(c, Logged::Delete(_))),
        "a failing registry never deletes (REG-5): {:?}",
        &h.log[mark..]
    );

    // 7. Heal: Healthy, then only the real change.
    step(driver.heal().await, "heal the platform");
    h.wait_for("Healthy and delta after healing", |h| {
        h.status == RegistryStatus::Healthy && h.view.contains_key(&delta)
    })
    .await;
    h.expect_quiet("after healing").await;
    h.assert_only(mark, &[&delta], "the outage and healing");
    h.assert_endpoints(&alpha, 2, "final state");
    h.assert_endpoints(&gamma, 3, "final state");
    h.assert_endpoints(&delta, 1, "final state");
    assert_eq!(
        h.view.len(),
        3,
        "final state is alpha, gamma, delta: {:?}",
        h.view.keys()
    );
}

fn step<T>(result: Result<T, DriverError>, what: &str) -> T {
    match result {
        Ok(v) => v,
        Err(e) => panic!("conformance driver could not {what}: {e}"),
    }
}

/// One data change the registry reported, for "only real changes" checks.
#[derive(Debug, Clone, PartialEq)]
enum Logged {
    Upsert(Hostname),
    Delete(Hostname),
}

impl Logged {
    fn hostname(&self) -> &Hostname {
        match self {
            Logged::Upsert(h) | Logged::Delete(h) => h,
        }
    }
}

struct Harness {
    rx: mpsc::Receiver<RegistryMessage>,
    /// The registry task, aborted when the harness ends, pass or fail.
    task: AbortOnDropHandle<Result<(), RegistryError>>,
    origin: Origin,
    quiet: Duration,
    /// The registry's state as the aggregate would see it.
    view: BTreeMap<Hostname, ServiceState>,
    status: RegistryStatus,
    synced: bool,
    log: Vec<Logged>,
}

impl Harness {
    /// The next event within `within`, or `None` on timeout. Panics if the registry stopped.
    async fn next(&mut self, within: Duration) -> Option<RegistryEvent> {
        match tokio::time::timeout(within, self.rx.recv()).await {
            Err(_) => None,
            Ok(Some(msg)) => {
                assert_eq!(
                    msg.registry, self.origin.registry,
                    "messages are tagged with the registry id"
                );
                Some(msg.event)
            }
            Ok(None) => {
                let result = (&mut self.task).await;
                panic!("the registry stopped: {result:?}");
            }
        }
    }

    fn apply(&mut self, event: RegistryEvent) {
        match event {
            RegistryEvent::Synced => {
                assert!(!self.synced, "Synced is sent exactly once");
                self.synced = true;
            }
            RegistryEvent::Status(status) => self.status = status,
            // Rejected config objects are not part of the data contract checked here.
            RegistryEvent::Rejected(_) => {}
            RegistryEvent::Changes(changes) => {
                assert!(!changes.is_empty(), "no empty Changes batches");
                for change in changes {
                    self.apply_change(change);
                }
            }
        }
    }

    fn apply_change(&mut self, change: Change) {
        match change {
            Change::Upsert(state) => {
                let host = state.service.hostname.clone();
                assert_eq!(
                    state.service.origin, self.origin,
                    "service {host} carries the registry's origin"
                );
                for ep in &state.endpoints {
                    assert_eq!(
                        ep.origin, self.origin,
                        "endpoint {} of {host} carries the registry's origin",
                        ep.address
                    );
                }
                self.log.push(Logged::Upsert(host.clone()));
                self.view.insert(host, state);
            }
            Change::Delete(host) => {
                assert!(
                    matches!(self.status, RegistryStatus::Healthy),
                    "a degraded registry never deletes (REG-5): {host}"
                );
                self.log.push(Logged::Delete(host.clone()));
                self.view.remove(&host);
            }
        }
    }

    /// Applies events until `done` holds; panics after [`EVENT_TIMEOUT`].
    async fn wait_for(&mut self, what: &str, done: impl Fn(&Harness) -> bool) {
        let deadline = tokio::time::Instant::now() + EVENT_TIMEOUT;
        while !done(self) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Some(event) => self.apply(event),
                None => panic!(
                    "timed out waiting for {what}; saw {:?}, status {:?}, synced {}",
                    self.log, self.status, self.synced
                ),
            }
        }
    }

    /// Applies whatever arrives within the quiet period.
    async fn settle(&mut self, what: &str) {
        while let Some(event) = self.next(self.quiet).await {
            tracing::debug!(?event, what, "event while settling");
            self.apply(event);
        }
    }

    /// Panics if any data change arrives within the quiet period.
    async fn expect_quiet(&mut self, what: &str) {
        let mark = self.log.len();
        self.settle(what).await;
        assert_eq!(
            &self.log[mark..],
            &[] as &[Logged],
            "{what} must emit no changes (REG-14)"
        );
    }

    /// Panics if any change since `mark` touched a hostname outside `allowed`.
    fn assert_only(&self, mark: usize, allowed: &[&Hostname], what: &str) {
        let allowed: BTreeSet<&Hostname> = allowed.iter().copied().collect();
        let extra: Vec<&Logged> = self.log[mark..]
            .iter()
            .filter(|c| !allowed.contains(c.hostname()))
            .collect();
        assert!(
            extra.is_empty(),
            "{what} must only change {allowed:?}, but also changed {extra:?}"
        );
    }

    fn assert_endpoints(&self, host: &Hostname, count: usize, what: &str) {
        let state = self
            .view
            .get(host)
            .unwrap_or_else(|| panic!("{what}: {host} is missing; have {:?}", self.view.keys()));
        assert_eq!(
            state.endpoints.len(),
            count,
            "{what}: {host} has {count} endpoints: {:?}",
            state.endpoints
        );
    }
}
