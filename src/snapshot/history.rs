//! What changed in recent builds, so a stream catches up by looking at changes, not the mesh.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::envoy::ResourceType;

/// How many builds of change records a snapshot keeps. A stream further behind than this (a proxy
/// stalled through 256 pushes) falls back to comparing its own subscription by
/// [`super::Entry::changed_seq`], which costs its subscription size, never the whole mesh.
pub const HISTORY_LEN: usize = 256;

/// The names one build changed or removed, per type.
#[derive(Debug, Default)]
pub struct ChangeSet {
    /// The snapshot this build produced.
    pub seq: u64,
    /// Names added or whose content changed, per type (indexed by [`ResourceType::index`]).
    pub changed: [Vec<Arc<str>>; ResourceType::COUNT],
    /// Names removed, per type.
    pub removed: [Vec<Arc<str>>; ResourceType::COUNT],
}

impl ChangeSet {
    /// Whether this build changed nothing of type `ty`.
    pub fn is_empty_for(&self, ty: ResourceType) -> bool {
        self.changed[ty.index()].is_empty() && self.removed[ty.index()].is_empty()
    }
}

/// Names of one type touched over a range of builds, with their final fate.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// Exist now and were added or changed in the range.
    pub changed: BTreeSet<Arc<str>>,
    /// Existed at the start of the range (possibly) and are gone now.
    pub removed: BTreeSet<Arc<str>>,
}

impl Changes {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.removed.is_empty()
    }
}

/// The last [`HISTORY_LEN`] change sets; a persistent vector, so each snapshot's copy is cheap.
#[derive(Debug, Clone, Default)]
pub(crate) struct History {
    sets: imbl::Vector<Arc<ChangeSet>>,
}

impl History {
    /// This history plus `set`, dropping the oldest beyond [`HISTORY_LEN`].
    pub(crate) fn with(&self, set: ChangeSet) -> History {
        let mut sets = self.sets.clone();
        sets.push_back(Arc::new(set));
        while sets.len() > HISTORY_LEN {
            sets.pop_front();
        }
        History { sets }
    }

    /// Changes of `ty` in builds `since+1 ..= now`, or `None` if those are not all kept.
    pub(crate) fn since(&self, ty: ResourceType, since: u64, now: u64) -> Option<Changes> {
        let mut out = Changes::default();
        if since >= now {
            return Some(out);
        }
        let oldest = self.sets.front()?.seq;
        if oldest > since + 1 {
            return None;
        }
        for set in self.sets.iter().filter(|s| s.seq > since) {
            for name in &set.changed[ty.index()] {
                out.removed.remove(name);
                out.changed.insert(Arc::clone(name));
            }
            for name in &set.removed[ty.index()] {
                out.changed.remove(name);
                out.removed.insert(Arc::clone(name));
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(seq: u64, changed: &[&str], removed: &[&str]) -> ChangeSet {
        let mut s = ChangeSet {
            seq,
            ..Default::default()
        };
        let i = ResourceType::Cluster.index();
        s.changed[i] = changed.iter().map(|n| Arc::from(*n)).collect();
        s.removed[i] = removed.iter().map(|n| Arc::from(*n)).collect();
        s
    }

    fn names(s: &BTreeSet<Arc<str>>) -> Vec<&str> {
        s.iter().map(|n| &**n).collect()
    }

    #[test]
    fn final_fate_wins() {
        let h = History::default()
            .with(set(1, &["a", "b"], &[]))
            .with(set(2, &[], &["a"]))
            .with(set(3, &["c"], &["b"]))
            .with(set(4, &["b"], &[]));
        let c = h.since(ResourceType::Cluster, 1, 4).unwrap();
        assert_eq!(names(&c.changed), ["b", "c"]);
        assert_eq!(names(&c.removed), ["a"]);
        assert!(h.since(ResourceType::Endpoint, 1, 4).unwrap().is_empty());
        assert!(h.since(ResourceType::Cluster, 4, 4).unwrap().is_empty());
    }

    #[test]
    fn too_old_is_none() {
        let mut h = History::default();
        for seq in 1..=(HISTORY_LEN as u64 + 10) {
            h = h.with(set(seq, &["x"], &[]));
        }
        let now = HISTORY_LEN as u64 + 10;
        assert!(h.since(ResourceType::Cluster, 1, now).is_none());
        assert!(h.since(ResourceType::Cluster, now - 5, now).is_some());
    }
}
