//! The whole-type `resources` bytes of recent versions, shared by every wildcard stream.
//!
//! A wildcard LDS/CDS response carries every resource of the type (SOTW-24), and every wildcard
//! stream with the same bind address sends exactly the same bytes for the same type version
//! (versions are content-derived and entries are in name order). So those bytes are concatenated
//! once per version and shared: such a response is then two chunks, a per-stream header and this
//! one shared `Bytes`, which is the `raw` floor of `docs/floor.md` (no per-stream list
//! of per-resource handles while a large response is in flight).
//!
//! Delta responses that carry every resource of the type (a wildcard CDS stream's first response,
//! the EDS answer to a proxy subscribing to every cluster it received) share their entries the
//! same way. Otherwise such a response is two chunks per resource, and h2 queues each chunk as a
//! frame of its own: thousands per stream in a reconnect storm, each with its bookkeeping.
//!
//! A set lives only as long as the type version it was built from is held somewhere (a snapshot
//! in the store or a stream walking an older one): each entry keeps a weak handle to its
//! [`TypeResources`], entries whose handle died are dropped on every insert and whenever a stream
//! ends ([`FullSetCache::prune`]). Without that the cache kept up to [`FULL_SET_CACHE_LEN`] sets
//! of versions nobody would ask for again after every client left (MEM-1).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::{BufMut, Bytes, BytesMut};

use crate::envoy::ResourceType;
use crate::snapshot::{TypeResources, TypeVersion, View};

/// How many recent (type, bind address, version) sets are kept. A push needs the newest one per
/// type; a few more cover streams still walking an older snapshot and nodes with their own bind
/// address. Each entry is one full type (up to a few MiB), so keep this small.
const FULL_SET_CACHE_LEN: usize = 8;

/// Which wire form of the entries: SotW `resources` entries or delta `Resource` entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Sotw,
    Delta,
}

type Key = (ResourceType, View, TypeVersion, Form);

/// One built set, and the type version it was built from while that is alive.
struct Cached {
    key: Key,
    of: Weak<TypeResources>,
    bytes: Bytes,
}

impl Cached {
    fn alive(&self) -> bool {
        self.of.strong_count() > 0
    }
}

/// Recently built full sets, newest last.
#[derive(Default)]
pub(crate) struct FullSetCache {
    /// Locked only to look up or insert; concatenation happens outside the lock.
    recent: Mutex<VecDeque<Cached>>,
}

impl FullSetCache {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Cached>> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops the sets whose type version no snapshot or stream holds any more.
    pub(crate) fn prune(&self) {
        self.lock().retain(Cached::alive);
    }

    /// The concatenated SotW `resources` entries of `res` (type `ty`, as seen with `bind`).
    pub(crate) fn get(&self, ty: ResourceType, view: View, res: &Arc<TypeResources>) -> Bytes {
        self.get_or_build((ty, view, res.version, Form::Sotw), res)
    }

    /// The concatenated delta `resources` entries ([`crate::envoy::EncodedResource::delta_entry`])
    /// of `res`, in name order.
    pub(crate) fn get_delta(
        &self,
        ty: ResourceType,
        view: View,
        res: &Arc<TypeResources>,
    ) -> Bytes {
        self.get_or_build((ty, view, res.version, Form::Delta), res)
    }

    fn get_or_build(&self, key: Key, res: &Arc<TypeResources>) -> Bytes {
        if let Some(hit) = self.lock().iter_mut().find(|c| c.key == key) {
            // The same version in a newer snapshot is a new `Arc`: follow the one asked with.
            hit.of = Arc::downgrade(res);
            return hit.bytes.clone();
        }
        // Two streams may build the same set at once; both results are identical and one wins.
        let resources = || res.entries.values().map(|e| &e.resource);
        let bytes = match key.3 {
            Form::Sotw => {
                let len = resources().map(|r| r.sotw_entry().len()).sum();
                let mut buf = BytesMut::with_capacity(len);
                resources().for_each(|r| buf.put_slice(r.sotw_entry()));
                buf.freeze()
            }
            Form::Delta => {
                let len = resources().map(|r| r.delta_entry_len()).sum();
                let mut buf = BytesMut::with_capacity(len);
                for r in resources() {
                    r.delta_entry().iter().for_each(|c| buf.put_slice(c));
                }
                buf.freeze()
            }
        };
        let mut recent = self.lock();
        recent.retain(Cached::alive);
        if !recent.iter().any(|c| c.key == key) {
            recent.push_back(Cached {
                key,
                of: Arc::downgrade(res),
                bytes: bytes.clone(),
            });
            while recent.len() > FULL_SET_CACHE_LEN {
                recent.pop_front();
            }
        }
        bytes
    }
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;

    use super::*;
    use crate::envoy::EncodedResource;
    use crate::snapshot::{BuildInput, SnapshotBuilder};

    fn cluster(name: &str) -> EncodedResource {
        let c = Cluster {
            name: name.into(),
            ..Default::default()
        };
        EncodedResource::encode(ResourceType::Cluster, name, &c)
    }

    #[test]
    fn full_sets_are_the_entries_in_name_order_built_once_per_form() {
        let snap = SnapshotBuilder::new()
            .build(BuildInput {
                upserts: vec![cluster("b"), cluster("a")],
                ..Default::default()
            })
            .expect("a change");
        let res = snap.resources_for(ResourceType::Cluster, crate::snapshot::View::Envoy);
        let cache = FullSetCache::default();
        let delta = cache.get_delta(ResourceType::Cluster, crate::snapshot::View::Envoy, &res);
        let sotw = cache.get(ResourceType::Cluster, crate::snapshot::View::Envoy, &res);
        let (mut want_delta, mut want_sotw) = (Vec::new(), Vec::new());
        for e in res.entries.values() {
            e.resource
                .delta_entry()
                .iter()
                .for_each(|c| want_delta.extend_from_slice(c));
            want_sotw.extend_from_slice(e.resource.sotw_entry());
        }
        assert_eq!(&delta[..], &want_delta[..]);
        assert_eq!(&sotw[..], &want_sotw[..]);
        let again = cache.get_delta(
            ResourceType::Cluster,
            crate::snapshot::View::Envoy,
            &Arc::clone(&res),
        );
        assert_eq!(again.as_ptr(), delta.as_ptr(), "built once, then shared");
        drop(again);
        cache.prune();
        assert_eq!(cache.lock().len(), 2, "kept while the snapshot lives");
        drop(res);
        drop(snap);
        cache.prune();
        assert!(
            cache.lock().is_empty(),
            "MEM-1: dropped with the last snapshot"
        );
    }
}
