//! Load assignments for proxies in a locality: EDS variants built once per snapshot and locality.
//!
//! A load assignment whose DestinationRule has a `localityLbSetting` that applies carries what its
//! variants are made from ([`crate::envoy::rules::LocalityInput`]); its default bytes are what a
//! proxy without a locality gets. A node's locality (`node.locality`) is interned into a small
//! [`LocalityId`], so that the [`super::View`] stays a plain copyable key. The first stream of a
//! locality to ask a snapshot for EDS builds that locality's variant: every located assignment
//! specialised and encoded, the others shared with the default map. Every later stream of that
//! locality shares the result. The next snapshot builds each locality's variant from the previous
//! one and what changed in between, so the work per snapshot is (distinct proxy localities) ×
//! (changed located assignments), never per proxy.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use imbl::OrdSet;
use imbl::ordmap::DiffItem;
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

/// A locality's variant in the previous snapshot, and the default map it was built from.
type Prior = (Arc<TypeResources>, Arc<TypeResources>);

/// The located load assignments of one snapshot and their variants, built lazily per locality.
#[derive(Debug, Default)]
pub(crate) struct LocatedEndpoints {
    /// Names of the load assignments that differ by proxy locality. Persistent, so each snapshot's
    /// copy costs O(1) and the builder updates it in O(change).
    names: OrdSet<Arc<str>>,
    /// Locality → its EDS. Locked only to look up or insert; a variant is built outside the lock.
    cache: Mutex<HashMap<LocalityId, Arc<TypeResources>>>,
    /// The variants the previous snapshot built, each taken (and so dropped) when this snapshot
    /// builds the same locality from it by difference.
    prior: Mutex<HashMap<LocalityId, Prior>>,
    /// How many variants this snapshot built (for tests and debug).
    built: AtomicU64,
}

impl LocatedEndpoints {
    /// The located set of the next snapshot: `names`, building on what `prev` (with EDS
    /// `prev_default`) built.
    pub(crate) fn next(
        names: OrdSet<Arc<str>>,
        prev: Option<(&LocatedEndpoints, &Arc<TypeResources>)>,
    ) -> Self {
        let prior = match prev {
            Some((p, default)) => lock(&p.cache)
                .iter()
                .map(|(id, v)| (*id, (Arc::clone(default), Arc::clone(v))))
                .collect(),
            None => HashMap::new(),
        };
        Self {
            names,
            prior: Mutex::new(prior),
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
    ///
    /// Built from the previous snapshot's variant of the locality when there is one: only what
    /// changed in the default map since is specialised again, so the cost follows the change and
    /// the result shares structure with what the locality's streams hold.
    pub(crate) fn for_locality(
        &self,
        id: LocalityId,
        default: &Arc<TypeResources>,
    ) -> Arc<TypeResources> {
        if self.names.is_empty() {
            return Arc::clone(default);
        }
        if let Some(found) = lock(&self.cache).get(&id) {
            return Arc::clone(found);
        }
        let locality = id.locality();
        let specialise =
            |entries: &mut imbl::OrdMap<Arc<str>, Entry>, name: &Arc<str>, e: &Entry| {
                let entry = match &e.resource.located {
                    Some(input) => {
                        let cla = input.apply(&locality);
                        if cla == input.cla {
                            e.clone()
                        } else {
                            Entry {
                                resource: Arc::new(EncodedResource::encode(
                                    ResourceType::Endpoint,
                                    name,
                                    &cla,
                                )),
                                changed_seq: e.changed_seq,
                            }
                        }
                    }
                    None => e.clone(),
                };
                entries.insert(Arc::clone(name), entry);
            };
        let prior = lock(&self.prior).remove(&id);
        let entries = match prior {
            Some((old_default, old_variant)) => {
                let mut entries = old_variant.entries.clone();
                for item in old_default.entries.diff(&default.entries) {
                    match item {
                        DiffItem::Add(name, e) | DiffItem::Update { new: (name, e), .. } => {
                            specialise(&mut entries, name, e);
                        }
                        DiffItem::Remove(name, _) => {
                            entries.remove(name);
                        }
                    }
                }
                entries
            }
            None => {
                let mut entries = default.entries.clone();
                for name in &self.names {
                    if let Some(e) = default.get(name) {
                        specialise(&mut entries, name, e);
                    }
                }
                entries
            }
        };
        let out = Arc::new(TypeResources {
            entries,
            version: default.version.salted(&locality.to_string()),
        });
        let mut cache = lock(&self.cache);
        // Two streams of one locality may build at once; both results are equal and one is kept.
        let kept = cache.entry(id).or_insert_with(|| {
            self.built.fetch_add(1, Ordering::Relaxed);
            Arc::clone(&out)
        });
        Arc::clone(kept)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
