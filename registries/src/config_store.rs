//! The config store's rule side: every config source (each `config_sources:` entry and each
//! `service_entry` registry, the short form) publishes the valid `DestinationRule`s and
//! `VirtualService`s it holds; the store merges them, in config order, into the one
//! [`RuleSet`] the snapshot builder watches.
//!
//! Precedence: an object with the same kind, namespace and name in two sources is taken from the
//! source listed first (the same rule the ServiceEntry registry applies between its files and its
//! cluster); the other copy is logged once. A source that is removed by a config reload takes its
//! rules with it; a source that restarts keeps serving its last rules until the new instance
//! publishes. Publishing what is already served wakes nobody.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

use crate::model::RegistryId;
use crate::rules::RuleSet;

/// The rules of every source, merged. Cheap to clone (a handle).
#[derive(Debug, Clone)]
pub struct ConfigStore {
    shared: Arc<Mutex<Shared>>,
}

#[derive(Debug)]
struct Shared {
    /// Source precedence: config order.
    order: Vec<RegistryId>,
    sources: BTreeMap<RegistryId, Arc<RuleSet>>,
    tx: watch::Sender<Arc<RuleSet>>,
    /// Objects defined in two sources, already logged.
    shadowed: BTreeSet<String>,
}

/// What one source uses to publish its rules.
#[derive(Debug, Clone)]
pub struct RulePublisher {
    id: RegistryId,
    store: ConfigStore,
}

impl ConfigStore {
    /// An empty store, and the receiver the snapshot builder watches.
    pub fn new() -> (ConfigStore, watch::Receiver<Arc<RuleSet>>) {
        let (tx, rx) = watch::channel(Arc::new(RuleSet::default()));
        let shared = Shared {
            order: Vec::new(),
            sources: BTreeMap::new(),
            tx,
            shadowed: BTreeSet::new(),
        };
        let store = ConfigStore {
            shared: Arc::new(Mutex::new(shared)),
        };
        (store, rx)
    }

    /// Another receiver of the merged rules.
    pub fn subscribe(&self) -> watch::Receiver<Arc<RuleSet>> {
        self.lock().tx.subscribe()
    }

    /// The merged rules now.
    pub fn current(&self) -> Arc<RuleSet> {
        self.lock().tx.borrow().clone()
    }

    /// Sets the source precedence (config order); sources not in it come after, by id.
    pub fn set_order(&self, order: Vec<RegistryId>) {
        let mut s = self.lock();
        s.order = order;
        s.merge();
    }

    /// The publisher for source `id`.
    pub fn publisher(&self, id: RegistryId) -> RulePublisher {
        RulePublisher {
            id,
            store: self.clone(),
        }
    }

    /// Forgets source `id` and its rules (the source was removed from the config).
    pub fn remove(&self, id: &RegistryId) {
        let mut s = self.lock();
        if s.sources.remove(id).is_some() {
            s.merge();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl RulePublisher {
    /// Replaces this source's rules.
    pub fn publish(&self, rules: RuleSet) {
        let mut s = self.store.lock();
        if s.sources.get(&self.id).is_some_and(|r| **r == rules) {
            return;
        }
        s.sources.insert(self.id.clone(), Arc::new(rules));
        s.merge();
    }

    /// The source this publisher speaks for.
    pub fn id(&self) -> &RegistryId {
        &self.id
    }
}

impl Shared {
    fn merge(&mut self) {
        let mut ids: Vec<&RegistryId> = self
            .order
            .iter()
            .filter(|id| self.sources.contains_key(*id))
            .collect();
        ids.extend(self.sources.keys().filter(|id| !self.order.contains(id)));
        let mut merged = RuleSet::default();
        let mut seen: BTreeMap<(&str, String), &RegistryId> = BTreeMap::new();
        let mut shadowed = Vec::new();
        for id in ids {
            let Some(rules) = self.sources.get(id) else {
                continue;
            };
            for dr in &rules.destination_rules {
                match seen.get(&("DestinationRule", dr.key())) {
                    Some(first) => {
                        shadowed.push((format!("DestinationRule {}", dr.key()), id, *first))
                    }
                    None => {
                        seen.insert(("DestinationRule", dr.key()), id);
                        merged.destination_rules.push(dr.clone());
                    }
                }
            }
            for vs in &rules.virtual_services {
                match seen.get(&("VirtualService", vs.key())) {
                    Some(first) => {
                        shadowed.push((format!("VirtualService {}", vs.key()), id, *first))
                    }
                    None => {
                        seen.insert(("VirtualService", vs.key()), id);
                        merged.virtual_services.push(vs.clone());
                    }
                }
            }
        }
        let now: BTreeSet<String> = shadowed.iter().map(|(o, _, _)| o.clone()).collect();
        for (object, id, first) in &shadowed {
            if !self.shadowed.contains(object) {
                tracing::warn!(%object, source = %id, served_from = %first,
                    "config object defined in two config sources; the first listed is served");
            }
        }
        self.shadowed = now;
        self.tx.send_if_modified(|current| {
            let changed = **current != merged;
            if changed {
                *current = Arc::new(merged);
            }
            changed
        });
    }
}

#[cfg(test)]
mod tests;
