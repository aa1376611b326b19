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
//!
//! A transition also keeps the delta responses built from it ([`SharedResponse`]): what a stream
//! owes for nothing but a change is a function of the two maps and its subscription (DELTA-8), so
//! the thousands of streams that share a subscription (`names.rs`) send one response, built and
//! framed once, under one nonce. That nonce is still never reused on a stream (INV-3): a stream's
//! view only moves forward, so it never makes the same transition twice, and each shared response
//! takes a nonce no other response has.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use bytes::Bytes;
use imbl::OrdSet;
use imbl::ordmap::DiffItem;

use super::body::Framed;
use super::response::TooLarge;
use crate::envoy::EncodedResource;
use crate::snapshot::TypeResources;

/// How many recent pairs are kept: the newest change of each type and view, plus a few for streams
/// still catching up from an older map.
const DIFF_CACHE_LEN: usize = 8;

/// Most responses kept per transition: one per subscription shape (a mesh has a few). Past it,
/// streams with another subscription build their own.
const RESPONSES_PER_TRANSITION: usize = 8;

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
    transition: Arc<Transition>,
}

/// What changed from one map to another, and the responses built from it.
pub(crate) struct Transition {
    /// In name order.
    pub changes: Box<[Change]>,
    responses: Mutex<Vec<Arc<SharedResponse>>>,
}

/// The delta response every stream making one transition with one subscription sends.
#[derive(Debug)]
pub(crate) struct SharedResponse {
    /// The subscription it answers; `None` for a wildcard one.
    names: Option<OrdSet<Arc<str>>>,
    /// In name order.
    pub resources: Vec<Arc<EncodedResource>>,
    /// In name order, disjoint from `resources`.
    pub removed: Vec<Arc<str>>,
    /// Its own, taken by every stream that sends it.
    pub nonce: Arc<str>,
    /// Its bytes, once framed, with the type URL they carry.
    framed: OnceLock<(Box<str>, Vec<Bytes>, usize)>,
}

impl Transition {
    /// The response for a subscription to `names` (`None`: wildcard), built by `build` (its
    /// resources and removed names) for the first stream that asks.
    pub(crate) fn response(
        &self,
        names: Option<&OrdSet<Arc<str>>>,
        build: impl FnOnce() -> (Vec<Arc<EncodedResource>>, Vec<Arc<str>>),
    ) -> Arc<SharedResponse> {
        let same = |r: &&Arc<SharedResponse>| match (&r.names, names) {
            (None, None) => true,
            (Some(a), Some(b)) => a.ptr_eq(b),
            _ => false,
        };
        if let Some(r) = lock(&self.responses).iter().find(same) {
            return Arc::clone(r);
        }
        let (resources, removed) = build();
        let made = Arc::new(SharedResponse {
            names: names.cloned(),
            resources,
            removed,
            nonce: shared_nonce(),
            framed: OnceLock::new(),
        });
        let mut responses = lock(&self.responses);
        if let Some(r) = responses.iter().find(same) {
            // Another stream built it meanwhile: one nonce for all.
            return Arc::clone(r);
        }
        if responses.len() < RESPONSES_PER_TRANSITION {
            responses.push(Arc::clone(&made));
        }
        made
    }
}

impl SharedResponse {
    /// Its bytes for `type_url`: framed by `frame` for the first stream, shared after that.
    pub(crate) fn framed(
        &self,
        type_url: &str,
        frame: impl FnOnce() -> Result<(Framed, usize), TooLarge>,
    ) -> Result<(Framed, usize), TooLarge> {
        if let Some((url, chunks, len)) = self.framed.get()
            && **url == *type_url
        {
            let chunks = chunks.clone();
            return Ok((Framed { chunks }, *len));
        }
        let (framed, len) = frame()?;
        let _ = self
            .framed
            .set((type_url.into(), framed.chunks.clone(), len));
        Ok((framed, len))
    }
}

/// A nonce no other response has: stream nonces start with the stream's serial in hex, these
/// with `s`.
fn shared_nonce() -> Arc<str> {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    Arc::from(format!("s{:x}", NEXT.fetch_add(1, Ordering::Relaxed)))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Recently computed differences, newest last.
#[derive(Default)]
pub(crate) struct DiffCache {
    /// Locked only to look up or insert; the walk happens outside the lock.
    recent: Mutex<VecDeque<Cached>>,
}

impl DiffCache {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Cached>> {
        lock(&self.recent)
    }

    /// What differs from `from` to `to`, in name order, and the responses built from it.
    pub(crate) fn between(
        &self,
        from: &Arc<TypeResources>,
        to: &Arc<TypeResources>,
    ) -> Arc<Transition> {
        let same = |c: &&Cached| {
            std::ptr::eq(c.from.as_ptr(), Arc::as_ptr(from))
                && std::ptr::eq(c.to.as_ptr(), Arc::as_ptr(to))
        };
        if let Some(c) = self.lock().iter().find(same) {
            return Arc::clone(&c.transition);
        }
        let changes: Box<[Change]> = from
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
        let transition = Arc::new(Transition {
            changes,
            responses: Mutex::default(),
        });
        let mut recent = self.lock();
        recent.retain(|c| c.from.strong_count() > 0 && c.to.strong_count() > 0);
        if !recent.iter().any(|c| same(&c)) {
            recent.push_back(Cached {
                from: Arc::downgrade(from),
                to: Arc::downgrade(to),
                transition: Arc::clone(&transition),
            });
            while recent.len() > DIFF_CACHE_LEN {
                recent.pop_front();
            }
        }
        transition
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
        let t = cache.between(&Arc::new(a), &Arc::new(b));
        assert_eq!(names(&t.changes), [("a", false), ("b", true), ("d", true)]);
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

    #[test]
    fn one_response_per_subscription_and_transition_with_a_nonce_of_its_own() {
        let a = Arc::new(map(&[("a", "1"), ("b", "1")]));
        let b = Arc::new(map(&[("a", "2"), ("b", "1")]));
        let cache = DiffCache::default();
        let t = cache.between(&a, &b);
        let set: OrdSet<Arc<str>> = ["a", "b"].map(Arc::from).into_iter().collect();
        let other = set.clone().update(Arc::from("c"));
        let mut built = 0;
        let mut build = || {
            built += 1;
            (Vec::new(), vec![Arc::<str>::from("x")])
        };
        let first = t.response(Some(&set), &mut build);
        let again = cache
            .between(&a, &b)
            .response(Some(&set.clone()), &mut build);
        assert!(Arc::ptr_eq(&first, &again), "the same set: one response");
        let wildcard = t.response(None, &mut build);
        let another = t.response(Some(&other), &mut build);
        assert_eq!(built, 3, "built once per subscription");
        let nonces: std::collections::BTreeSet<&str> =
            [&first, &wildcard, &another].map(|r| &*r.nonce).into();
        assert_eq!(nonces.len(), 3, "each response its own nonce");
        assert!(nonces.iter().all(|n| n.starts_with('s')));
    }

    #[test]
    fn a_shared_response_is_framed_once_per_type_url() {
        let a = Arc::new(map(&[("a", "1")]));
        let b = Arc::new(map(&[("a", "2")]));
        let t = DiffCache::default().between(&a, &b);
        let r = t.response(None, || (Vec::new(), Vec::new()));
        let frame = |tag: &'static [u8]| {
            move || {
                Ok((
                    Framed {
                        chunks: vec![Bytes::from_static(tag)],
                    },
                    tag.len(),
                ))
            }
        };
        let (first, _) = r.framed("url", frame(b"one")).unwrap();
        let (again, _) = r.framed("url", frame(b"two")).unwrap();
        assert_eq!(again.chunks, first.chunks, "the first stream's bytes");
        assert_eq!(first.chunks[0].as_ptr(), again.chunks[0].as_ptr(), "shared");
        let (other, _) = r.framed("other", frame(b"three")).unwrap();
        assert_eq!(
            &other.chunks[0][..],
            b"three",
            "another URL is framed for itself"
        );
    }
}
