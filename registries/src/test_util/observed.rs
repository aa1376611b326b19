//! What a registry has reported so far, folded the way the aggregate folds it. The adapters' own
//! tests drive their registry and then look here (the conformance harness keeps its own stricter
//! record, which also checks origins and REG-5).

use std::collections::BTreeMap;

use crate::model::{Hostname, ServiceState};
use crate::registry::{Change, RegistryEvent, RegistryStatus, Rejection};

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
