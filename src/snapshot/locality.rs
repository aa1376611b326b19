//! Load assignments for proxies in a locality: EDS variants built once per snapshot and locality.
//!
//! A load assignment whose DestinationRule has a `localityLbSetting` that applies carries what its
//! variants are made from ([`crate::envoy::rules::LocalityInput`]); its default bytes are what a
//! proxy without a locality gets. A node's locality (`node.locality`) is interned into a small
//! [`LocalityId`], so that the [`super::View`] stays a plain copyable key. The first stream of a
//! locality to ask a snapshot for EDS builds that locality's variant: every located assignment
//! specialised and encoded, the others shared with the default map. Every later stream of that
//! locality shares the result, and the next snapshot starts afresh (its inputs may differ).
//! Work per snapshot is thus (distinct proxy localities) × (located assignments), never per proxy.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use imbl::OrdSet;
use tributary_registries::Locality;

use super::{Entry, TypeResources};
use crate::envoy::{EncodedResource, ResourceType};

/// Most distinct proxy localities the process tells apart. Real meshes have tens to hundreds;
/// node localities are client input, so the table is bounded (SEC-12). Past it, a node is served
/// as a node without a locality and the server logs it.
pub const MAX_PROXY_LOCALITIES: usize = 4096;

/// A proxy locality, interned: the same locality always has the same id in one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LocalityId(u32);

impl LocalityId {
    /// The id of `locality`; `None` for an empty locality, or when [`MAX_PROXY_LOCALITIES`]
    /// others were interned first.
    pub fn intern(locality: Locality) -> Option<Self> {
        if locality.is_empty() {
            return None;
        }
        let mut table = table();
        if let Some(id) = table.ids.get(&locality) {
            return Some(*id);
        }
        if table.all.len() >= MAX_PROXY_LOCALITIES {
            return None;
        }
        let id = LocalityId(u32::try_from(table.all.len()).ok()?);
        table.all.push(Arc::new(locality.clone()));
        table.ids.insert(locality, id);
        Some(id)
    }

    /// The locality this id stands for.
    pub fn locality(self) -> Arc<Locality> {
        let table = table();
        let index = usize::try_from(self.0).unwrap_or(usize::MAX);
        table.all.get(index).cloned().unwrap_or_default()
    }
}

#[derive(Default)]
struct Interned {
    ids: HashMap<Locality, LocalityId>,
    all: Vec<Arc<Locality>>,
}

static LOCALITIES: LazyLock<Mutex<Interned>> = LazyLock::new(Mutex::default);

fn table() -> MutexGuard<'static, Interned> {
    LOCALITIES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The located load assignments of one snapshot and their variants, built lazily per locality.
#[derive(Debug, Default)]
pub(crate) struct LocatedEndpoints {
    /// Names of the load assignments that differ by proxy locality. Persistent, so each snapshot's
    /// copy costs O(1) and the builder updates it in O(change).
    names: OrdSet<Arc<str>>,
    /// Locality → its EDS. Locked only to look up or insert; a variant is built outside the lock.
    cache: Mutex<HashMap<LocalityId, Arc<TypeResources>>>,
    /// How many variants this snapshot built (for tests and debug).
    built: AtomicU64,
}

impl LocatedEndpoints {
    pub(crate) fn new(names: OrdSet<Arc<str>>) -> Self {
        Self {
            names,
            ..Default::default()
        }
    }

    pub(crate) fn names(&self) -> OrdSet<Arc<str>> {
        self.names.clone()
    }

    /// How many locality variants were built from this snapshot.
    pub(crate) fn built(&self) -> u64 {
        self.built.load(Ordering::Relaxed)
    }

    /// The EDS a proxy in `id` sees: `default` with every located assignment specialised. Entries
    /// keep the default's `changed_seq`: a variant changes only when its input does, and an input
    /// change is a change of the default entry (its version covers the input).
    pub(crate) fn for_locality(
        &self,
        id: LocalityId,
        default: &Arc<TypeResources>,
    ) -> Arc<TypeResources> {
        if self.names.is_empty() {
            return Arc::clone(default);
        }
        if let Some(found) = self.lock().get(&id) {
            return Arc::clone(found);
        }
        let locality = id.locality();
        let mut out = TypeResources {
            entries: default.entries.clone(),
            version: default.version.salted(&locality.to_string()),
        };
        for name in &self.names {
            let Some(entry) = default.get(name) else {
                continue;
            };
            let Some(input) = &entry.resource.located else {
                continue;
            };
            let cla = input.apply(&locality);
            if cla == input.cla {
                continue;
            }
            let resource = EncodedResource::encode(ResourceType::Endpoint, name, &cla);
            out.entries.insert(
                Arc::clone(name),
                Entry {
                    resource: Arc::new(resource),
                    changed_seq: entry.changed_seq,
                },
            );
        }
        let out = Arc::new(out);
        let mut cache = self.lock();
        // Two streams of one locality may build at once; both results are equal and one is kept.
        let kept = cache.entry(id).or_insert_with(|| {
            self.built.fetch_add(1, Ordering::Relaxed);
            Arc::clone(&out)
        });
        Arc::clone(kept)
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<LocalityId, Arc<TypeResources>>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests;
