//! Subscribed name sets shared between streams.
//!
//! Thousands of proxies subscribe to the same EDS names (every cluster they received, the same for
//! every proxy of a mesh), each in a set of its own: the names are shared `Arc`s already, but every
//! stream's set had its own tree nodes (~16 bytes per name and the nodes' slack: 50–70 KB per
//! stream for 2,000 clusters). A set applied to a subscription is looked up here by its content; a
//! stream whose set equals one another stream holds takes a clone of that one instead, a persistent
//! set whose nodes are then shared, so the stream holds the set's root, not a copy. A later change
//! to the stream's set copies only the path it touches.
//!
//! When thousands of streams hold one shared set, they also change it the same way: a new service
//! makes every proxy add its cluster to the EDS subscription. The last few such changes are
//! remembered with the shared set each made ([`SharedNames::recall`]), so every stream but the
//! first takes the result instead of walking its request against the set and hashing the result
//! (~20 % of the server's CPU for a new service at 5,000 SotW proxies, ~12 % at 5,000 delta ones).
//!
//! Bounded: at most [`MAX_SETS`] sets and [`MAX_NAMES`] names in all are remembered; past either,
//! the table starts over (sharing is an optimisation; a forgotten set only means the next stream
//! with it keeps its own until it is remembered again). Small sets are not worth a lookup.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use imbl::OrdSet;

/// Most distinct sets remembered: a mesh has a few subscription shapes (one per proxy kind and
/// namespace scope), not thousands.
const MAX_SETS: usize = 256;

/// Most names remembered over all sets (~16 MB of set nodes at the worst), so distinct sets from
/// misbehaving clients cannot make the table grow without bound.
const MAX_NAMES: usize = 1_000_000;

/// Sets smaller than this are kept per stream: their nodes cost less than the lookup.
pub(crate) const MIN_SHARED_LEN: usize = 32;

/// Changes to shared sets remembered: the streams that make one change make it within one push.
const RECENT_CHANGES: usize = 8;

/// A request's lists, as far as a change to a set goes: their name count and hash. SotW: the
/// `resource_names` list's key; delta: [`delta_key`].
pub(crate) type RequestKey = (usize, u128);

/// What a request did to a shared set: the set it became (shared) and what that added and removed.
#[derive(Clone)]
pub(crate) struct Changed {
    pub names: OrdSet<Arc<str>>,
    pub added: Arc<[Arc<str>]>,
    pub removed: Arc<[Arc<str>]>,
    /// SotW: whether the list named `*` (a delta wildcard is read from the request itself).
    pub wildcard: bool,
}

struct Recent {
    before: OrdSet<Arc<str>>,
    request: RequestKey,
    changed: Changed,
}

/// The table of shared name sets, one per server.
#[derive(Default)]
pub(crate) struct SharedNames {
    inner: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    /// Sets by a 128-bit hash of their (sorted) names.
    sets: HashMap<u128, OrdSet<Arc<str>>>,
    names: usize,
    /// The last [`RECENT_CHANGES`] changes made to a set of `sets`, newest last.
    recent: VecDeque<Recent>,
}

impl SharedNames {
    /// Replaces `names` with an equal set already remembered, or remembers it. Costs one pass over
    /// the names (hash) plus a comparison that skips shared subtrees; call it when a set changed,
    /// not on every request.
    pub(crate) fn share(&self, names: &mut OrdSet<Arc<str>>) {
        if names.len() < MIN_SHARED_LEN {
            return;
        }
        if self.lock().sets.values().any(|s| s.ptr_eq(names)) {
            // Taken from here already (`find`): no need to hash it.
            return;
        }
        let key = set_hash(names.iter().map(|n| &**n));
        // Compared outside the lock: a clone of a persistent set is a pointer copy.
        let found = self.lock().sets.get(&key).cloned();
        if let Some(shared) = found {
            if shared.ptr_eq(names) {
                return;
            }
            if shared == *names {
                *names = shared;
                return;
            }
        }
        let mut table = self.lock();
        if table.sets.len() >= MAX_SETS || table.names + names.len() > MAX_NAMES {
            table.sets.clear();
            table.names = 0;
            table.recent.clear();
        }
        if let Some(old) = table.sets.insert(key, names.clone()) {
            table.names -= old.len();
        }
        table.names += names.len();
    }

    /// The remembered set equal to `sorted` (sorted, without repeats), if any: a stream's first
    /// list that other streams hold already takes their set whole, building nothing (every proxy
    /// of a storm names the same clusters). One pass to hash, one to compare.
    pub(crate) fn find(&self, sorted: &[&str]) -> Option<OrdSet<Arc<str>>> {
        if sorted.len() < MIN_SHARED_LEN {
            return None;
        }
        let key = set_hash(sorted.iter().copied());
        let found = self.lock().sets.get(&key).cloned()?;
        let equal =
            found.len() == sorted.len() && found.iter().zip(sorted).all(|(a, b)| **a == **b);
        equal.then_some(found)
    }

    /// What `request` did to `before` when another stream holding the same shared set made it,
    /// if that is remembered. The result depends only on the set and the lists, so it is taken
    /// as it is.
    pub(crate) fn recall(&self, before: &OrdSet<Arc<str>>, request: RequestKey) -> Option<Changed> {
        if before.len() < MIN_SHARED_LEN {
            return None;
        }
        let table = self.lock();
        let recent = table.recent.iter().rev();
        recent
            .filter(|r| r.request == request && r.before.ptr_eq(before))
            .map(|r| r.changed.clone())
            .next()
    }

    /// Shares `names`, the set a request with key `request` just made of `before` by adding
    /// `added` and removing `removed` ([`Self::share`]); when `before` is a shared set, remembers
    /// that for [`Self::recall`]. `wildcard`: see [`Changed::wildcard`].
    pub(crate) fn share_change(
        &self,
        before: &OrdSet<Arc<str>>,
        request: RequestKey,
        names: &mut OrdSet<Arc<str>>,
        (added, removed): (&[Arc<str>], &[Arc<str>]),
        wildcard: bool,
    ) {
        self.share(names);
        if before.len() < MIN_SHARED_LEN || names.len() < MIN_SHARED_LEN {
            return;
        }
        let mut table = self.lock();
        if !table.sets.values().any(|s| s.ptr_eq(before)) {
            // A set of the stream's own: no other stream holds it to make the same change.
            return;
        }
        if table.recent.len() == RECENT_CHANGES {
            table.recent.pop_front();
        }
        table.recent.push_back(Recent {
            before: before.clone(),
            request,
            changed: Changed {
                names: names.clone(),
                added: added.into(),
                removed: removed.into(),
                wildcard,
            },
        });
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table is only ever left consistent (plain inserts and clears); a panic elsewhere
        // while it was held does not make it wrong.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The [`RequestKey`] of a delta request's `subscribe` and `unsubscribe` lists: never equal to a
/// SotW list's (the lists are separated by a length no name has).
pub(crate) fn delta_key(subscribe: &[String], unsubscribe: &[String]) -> RequestKey {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for list in [subscribe, unsubscribe] {
        for n in list {
            h.update(&(n.len() as u64).to_le_bytes());
            h.update(n.as_bytes());
        }
        h.update(&u64::MAX.to_le_bytes());
    }
    (subscribe.len() + unsubscribe.len(), h.digest128())
}

/// A hash of a set's names in order, each length-prefixed so no two sets share an encoding.
fn set_hash<'a>(names: impl Iterator<Item = &'a str>) -> u128 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for n in names {
        h.update(&(n.len() as u64).to_le_bytes());
        h.update(n.as_bytes());
    }
    h.digest128()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(range: std::ops::Range<usize>) -> OrdSet<Arc<str>> {
        range
            .map(|i| Arc::from(format!("outbound|80||svc-{i}")))
            .collect()
    }

    #[test]
    fn equal_sets_share_their_nodes() {
        let table = SharedNames::default();
        let mut a = set(0..2_000);
        let mut b = set(0..2_000);
        assert!(!a.ptr_eq(&b));
        table.share(&mut a);
        table.share(&mut b);
        assert!(a.ptr_eq(&b), "the second stream holds the first one's set");
        assert_eq!(b, set(0..2_000));
    }

    #[test]
    fn different_and_small_sets_stay_their_own() {
        let table = SharedNames::default();
        let mut a = set(0..2_000);
        let mut b = set(1..2_001);
        table.share(&mut a);
        table.share(&mut b);
        assert!(!a.ptr_eq(&b));
        assert_eq!(b, set(1..2_001));
        let mut small = set(0..4);
        let mut small2 = set(0..4);
        table.share(&mut small);
        table.share(&mut small2);
        assert!(
            !small.ptr_eq(&small2),
            "below MIN_SHARED_LEN nothing is looked up"
        );
    }

    #[test]
    fn a_sorted_list_finds_the_equal_set() {
        let table = SharedNames::default();
        let mut a = set(0..2_000);
        table.share(&mut a);
        let names: Vec<Arc<str>> = a.iter().cloned().collect();
        let mut listed: Vec<&str> = names.iter().map(|n| &**n).collect();
        let found = table.find(&listed).expect("the same names");
        assert!(found.ptr_eq(&a), "taken whole, not rebuilt");
        listed.pop();
        assert!(table.find(&listed).is_none(), "one name fewer");
        assert!(table.find(&listed[..4]).is_none(), "below MIN_SHARED_LEN");
    }

    #[test]
    fn a_change_is_remembered_only_for_a_shared_set() {
        let table = SharedNames::default();
        let key = delta_key(&["new".to_string()], &[]);
        let added: Vec<Arc<str>> = vec![Arc::from("new")];
        let change = (&added[..], &[][..]);
        // The stream's own set: nobody else holds it, so nothing is remembered.
        let own = set(0..100);
        let mut after = own.update(Arc::from("new"));
        table.share_change(&own, key, &mut after, change, false);
        assert!(table.recall(&own, key).is_none());
        // A shared one: the change is remembered, for that set and that request only.
        let mut shared = set(0..100);
        table.share(&mut shared);
        let mut after = shared.update(Arc::from("new"));
        table.share_change(&shared, key, &mut after, change, false);
        let done = table.recall(&shared, key).expect("remembered");
        assert!(done.names.ptr_eq(&after));
        assert_eq!(&*done.added, &added[..]);
        assert!(
            table
                .recall(&shared, delta_key(&[], &["new".to_string()]))
                .is_none()
        );
        assert!(
            table.recall(&set(0..100), key).is_none(),
            "an equal set of its own"
        );
    }

    #[test]
    fn the_table_is_bounded() {
        let table = SharedNames::default();
        for i in 0..MAX_SETS + 10 {
            let mut s = set(i..i + MIN_SHARED_LEN);
            table.share(&mut s);
        }
        let t = table.lock();
        assert!(t.sets.len() <= MAX_SETS);
        assert!(t.recent.len() <= RECENT_CHANGES);
        assert_eq!(t.names, t.sets.values().map(OrdSet::len).sum::<usize>());
    }
}
