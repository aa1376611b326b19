//! Where the current snapshot lives: `arc-swap` for lock-free reads, a `watch` to wake streams.

use std::sync::Arc;

use arc_swap::ArcSwapOption;
use tokio::sync::watch;

use super::Snapshot;

/// Holds the newest snapshot. Cheap to clone; every clone sees the same snapshot.
///
/// Until the first snapshot is published (registries not yet synced) [`SnapshotStore::load`] is
/// `None`, and xDS streams are refused with `UNAVAILABLE` (TRANS-11).
#[derive(Clone)]
pub struct SnapshotStore {
    inner: Arc<Inner>,
}

struct Inner {
    current: ArcSwapOption<Snapshot>,
    /// Carries the newest `seq`. Streams wait on it, then load the snapshot: a stream that misses
    /// intermediate values simply sees the latest one.
    seq: watch::Sender<u64>,
}

impl Default for SnapshotStore {
    fn default() -> Self {
        Self::new()
    }
}

impl SnapshotStore {
    /// An empty store: nothing published yet.
    pub fn new() -> Self {
        let (seq, _) = watch::channel(0);
        Self {
            inner: Arc::new(Inner {
                current: ArcSwapOption::empty(),
                seq,
            }),
        }
    }

    /// The newest snapshot, or `None` before the first one.
    pub fn load(&self) -> Option<Arc<Snapshot>> {
        self.inner.current.load_full()
    }

    /// Wakes on every publish. Subscribe *before* loading, so a publish between the two is never
    /// missed (TRANS-14).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.seq.subscribe()
    }

    /// Makes `snapshot` the one every reader sees, and wakes the streams.
    pub fn publish(&self, snapshot: Arc<Snapshot>) {
        let seq = snapshot.seq;
        self.inner.current.store(Some(snapshot));
        self.inner.seq.send_replace(seq);
    }

    /// Whether a snapshot has been published (the server is ready to serve xDS).
    pub fn is_ready(&self) -> bool {
        self.inner.current.load().is_some()
    }
}
