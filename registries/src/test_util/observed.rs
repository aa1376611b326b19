//! What a registry has reported so far, folded the way the aggregate folds it. The adapters' own
//! tests drive their registry and then look here (the conformance harness keeps its own stricter
//! record, which also checks origins and REG-5).

use std::collections::BTreeMap;
use std::marker::PhantomData;

use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;

use crate::model::{Hostname, ServiceState};
use crate::registry::{
    Change, Registry, RegistryError, RegistryEvent, RegistryMessage, RegistrySink, RegistryStatus,
    Rejection,
};

/// Room for a registry's events in the adapters' tests: more than any test produces.
const EVENTS: usize = 1024;

/// A registry running on its own task (aborted on drop), the channel of what it reports, and
/// the fold of what has been read from it (the `Observer` derefs to its [`Observed`]). `A` only
/// tells the adapters' harnesses apart, so that each adds its own methods (`impl Observer<Kube>`).
pub struct Observer<A> {
    /// What the registry reported and the test has not read yet.
    pub rx: mpsc::Receiver<RegistryMessage>,
    /// The registry's task.
    pub task: AbortOnDropHandle<Result<(), RegistryError>>,
    seen: Observed,
    adapter: PhantomData<A>,
}

impl<A> Observer<A> {
    /// Runs `registry` on a task of its own.
    pub fn launch(registry: Box<dyn Registry>) -> Self {
        let (tx, rx) = mpsc::channel(EVENTS);
        let sink = RegistrySink::new(registry.id(), tx);
        Self {
            rx,
            task: AbortOnDropHandle::new(tokio::spawn(registry.run(sink))),
            seen: Observed::default(),
            adapter: PhantomData,
        }
    }

    /// Folds in one event read from [`Self::rx`].
    pub fn apply(&mut self, event: RegistryEvent) {
        self.seen.apply(event);
    }
}

impl<A> std::ops::Deref for Observer<A> {
    type Target = Observed;

    fn deref(&self) -> &Observed {
        &self.seen
    }
}

/// The state a registry's events add up to.
#[derive(Debug)]
pub struct Observed {
    /// Every hostname's latest state.
    pub view: BTreeMap<Hostname, ServiceState>,
    /// The latest status (`Healthy` until one is reported).
    pub status: RegistryStatus,
    /// The latest list of rejected objects.
    pub rejected: Vec<Rejection>,
    /// Whether `Synced` was reported.
    pub synced: bool,
    /// Every change, in order.
    pub log: Vec<Change>,
}

impl Default for Observed {
    fn default() -> Self {
        Self {
            view: BTreeMap::new(),
            status: RegistryStatus::Healthy,
            rejected: Vec::new(),
            synced: false,
            log: Vec::new(),
        }
    }
}

impl Observed {
    /// Folds in one event. Panics on a second `Synced` or an empty batch of changes.
    pub fn apply(&mut self, event: RegistryEvent) {
        match event {
            RegistryEvent::Synced => {
                assert!(!self.synced, "Synced is sent once");
                self.synced = true;
            }
            RegistryEvent::Status(s) => self.status = s,
            RegistryEvent::Rejected(r) => self.rejected = r,
            RegistryEvent::Changes(changes) => {
                assert!(!changes.is_empty(), "no empty batches");
                for c in changes {
                    match &c {
                        Change::Upsert(s) => {
                            self.view.insert(s.service.hostname.clone(), s.clone());
                        }
                        Change::Delete(h) => {
                            self.view.remove(h);
                        }
                    }
                    self.log.push(c);
                }
            }
        }
    }
}
