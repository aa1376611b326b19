//! What changed between two maps of one type, worked out once for every delta stream that goes
//! from the same older map to the same newer one.
//!
//! After a change, every delta stream that was up to date compares the map its client holds with
//! the newest one (`delta/state.rs`): thousands of streams, one pair of maps. The walk skips shared
//! subtrees, yet it cost ~1 µs per stream, 6 % of the server's CPU in an endpoint change at 5,000
//! proxies. The first stream works it out; the others find it here.
//!
//! Entries are keyed by the two maps' allocations and hold them weakly: a weak handle keeps the
//! allocation (not its contents) from being freed, so an address cannot stand for another map while
//! its entry exists, and the cache keeps no map alive. A few recent pairs are kept; entries with a
//! map gone are dropped on every insert.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use imbl::ordmap::DiffItem;

use crate::envoy::EncodedResource;
use crate::snapshot::TypeResources;

/// How many recent pairs are kept: the newest change of each type and view, plus a few for streams
/// still catching up from an older map.
const DIFF_CACHE_LEN: usize = 8;

/// One name that differs between the two maps.
#[derive(Debug)]
pub(crate) struct Change {
    pub name: Arc<str>,
    /// Its resource in the newer map; `None` when it was removed.
    pub now: Option<Arc<EncodedResource>>,
}

struct Cached {
    from: Weak<TypeResources>,
    to: Weak<TypeResources>,
    changes: Arc<[Change]>,
}

/// Recently computed differences, newest last.
#[derive(Default)]
pub(crate) struct DiffCache {
    /// Locked only to look up or insert; the walk happens outside the lock.
    recent: Mutex<VecDeque<Cached>>,
}

impl DiffCache {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Cached>> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What differs from `from` to `to`, in name order.
    pub(crate) fn between(
        &self,
        from: &Arc<TypeResources>,
        to: &Arc<TypeResources>,
    ) -> Arc<[Change]> {
        let same = |c: &&Cached| {
            std::ptr::eq(c.from.as_ptr(), Arc::as_ptr(from))
                && std::ptr::eq(c.to.as_ptr(), Arc::as_ptr(to))
        };
        if let Some(c) = self.lock().iter().find(same) {
            return Arc::clone(&c.changes);
        }
        let changes: Arc<[Change]> = from
            .entries
            .diff(&to.entries)
            .map(|item| match item {
                DiffItem::Add(name, e) | DiffItem::Update { new: (name, e), .. } => Change {
                    name: Arc::clone(name),
                    now: Some(Arc::clone(&e.resource)),
                },
                DiffItem::Remove(name, _) => Change {
                    name: Arc::clone(name),
                    now: None,
                },
            })
            .collect();
        let mut recent = self.lock();
        recent.retain(|c| c.from.strong_count() > 0 && c.to.strong_count() > 0);
        if !recent.iter().any(|c| same(&c)) {
            recent.push_back(Cached {
                from: Arc::downgrade(from),
                to: Arc::downgrade(to),
                changes: Arc::clone(&changes),
            });
            while recent.len() > DIFF_CACHE_LEN {
                recent.pop_front();
            }
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;

    use super::*;
    use crate::envoy::ResourceType;
    use crate::snapshot::Entry;

    fn entry(name: &str, content: &str) -> Entry {
        let cluster = Cluster {
            name: name.to_owned(),
            alt_stat_name: content.to_owned(),
            ..Default::default()
        };
        Entry {
            resource: Arc::new(EncodedResource::encode(
                ResourceType::Cluster,
                name,
                &cluster,
            )),
            changed_seq: 0,
        }
    }

    fn map(entries: &[(&str, &str)]) -> TypeResources {
        let mut t = TypeResources::default();
        for (name, content) in entries {
            t.entries.insert(Arc::from(*name), entry(name, content));
        }
        t
    }

    fn names(changes: &[Change]) -> Vec<(&str, bool)> {
        changes
            .iter()
            .map(|c| (&*c.name, c.now.is_some()))
            .collect()
    }

    #[test]
    fn lists_added_changed_and_removed_names_in_order() {
        let a = map(&[("a", "1"), ("b", "1"), ("c", "1")]);
        let mut b = a.clone();
        b.entries.remove("a");
        b.entries.insert(Arc::from("b"), entry("b", "2"));
        b.entries.insert(Arc::from("d"), entry("d", "1"));
        let cache = DiffCache::default();
        let changes = cache.between(&Arc::new(a), &Arc::new(b));
        assert_eq!(names(&changes), [("a", false), ("b", true), ("d", true)]);
    }

    #[test]
    fn the_same_pair_is_worked_out_once_and_no_map_is_kept_alive() {
        let a = Arc::new(map(&[("a", "1")]));
        let b = Arc::new(map(&[("a", "2")]));
        let cache = DiffCache::default();
        let first = cache.between(&a, &b);
        assert!(Arc::ptr_eq(&first, &cache.between(&a, &b)));
        assert!(!Arc::ptr_eq(&first, &cache.between(&b, &a)), "another pair");
        let weak = Arc::downgrade(&b);
        drop(b);
        assert_eq!(weak.strong_count(), 0, "the cache holds maps weakly");
        cache.between(&a, &Arc::new(map(&[("a", "3")])));
        assert_eq!(cache.lock().len(), 1, "entries with a map gone are dropped");
    }

    #[test]
    fn keeps_a_bounded_number_of_pairs() {
        let maps: Vec<_> = (0..20)
            .map(|i| Arc::new(map(&[("a", &i.to_string())])))
            .collect();
        let cache = DiffCache::default();
        for pair in maps.windows(2) {
            cache.between(&pair[0], &pair[1]);
        }
        assert_eq!(cache.lock().len(), DIFF_CACHE_LEN);
    }
}
