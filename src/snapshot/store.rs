//! Where the current snapshot lives: `arc-swap` for lock-free reads, and a bell that wakes every
//! listening stream on each publish.
//!
//! The bell holds one waker per stream, registered once for the stream's life. tokio's `watch`
//! (used before) has each waiter join the channel's waiter list anew after every change, a lock
//! and a list insert per stream per change, then a walk to unlink them all on the next send: ~3 %
//! of the server's CPU in an endpoint change at 5,000 delta proxies. A stream's waker for new
//! snapshots never changes (`xds/own_waker.rs` gives each branch a fixed one), so nothing needs to
//! re-register: a publish stores the snapshot, then wakes each listener, which reads the newest
//! snapshot's `seq` (a listener that misses intermediate values simply sees the latest one).

use std::sync::Arc;
use std::task::Waker;

use arc_swap::ArcSwapOption;
use parking_lot::Mutex;
use slab::Slab;

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
    /// Woken on every publish. Locked to add or remove one, and for the wake-ups of one publish
    /// (each a flag and a task schedule, no I/O).
    listeners: Mutex<Slab<Waker>>,
}

/// A waker registered with [`SnapshotStore::listen`]; dropping this removes it.
pub struct Listener {
    inner: Arc<Inner>,
    key: usize,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.inner.listeners.lock().remove(self.key);
    }
}

impl Default for SnapshotStore {
    fn default() -> Self {
        Self::new()
    }
}

impl SnapshotStore {
    /// An empty store: nothing published yet.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                current: ArcSwapOption::empty(),
                listeners: Mutex::new(Slab::new()),
            }),
        }
    }

    /// The newest snapshot, or `None` before the first one.
    pub fn load(&self) -> Option<Arc<Snapshot>> {
        self.inner.current.load_full()
    }

    /// The newest snapshot's `seq` (0 before the first).
    pub fn seq(&self) -> u64 {
        self.inner.current.load().as_ref().map_or(0, |s| s.seq)
    }

    /// Wakes `waker` on every publish until the listener is dropped. Listen *before* reading
    /// [`Self::seq`] or loading, so a publish between the two is never missed (TRANS-14).
    pub fn listen(&self, waker: Waker) -> Listener {
        let key = self.inner.listeners.lock().insert(waker);
        Listener {
            inner: Arc::clone(&self.inner),
            key,
        }
    }

    /// Makes `snapshot` the one every reader sees, and wakes the listeners.
    pub fn publish(&self, snapshot: Arc<Snapshot>) {
        self.inner.current.store(Some(snapshot));
        for (_, waker) in self.inner.listeners.lock().iter() {
            waker.wake_by_ref();
        }
    }

    /// Whether a snapshot has been published (the server is ready to serve xDS).
    pub fn is_ready(&self) -> bool {
        self.inner.current.load().is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;

    use super::*;
    use crate::envoy::fixtures::http_route;
    use crate::snapshot::{BuildInput, SnapshotBuilder};

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Three successive snapshots (seq 1, 2, 3): one route configuration naming another host each time.
    fn snapshots() -> Vec<Arc<Snapshot>> {
        let mut builder = SnapshotBuilder::new();
        ["a.demo", "b.demo", "c.demo"]
            .map(|host| {
                let input = BuildInput {
                    upserts: vec![http_route(80, &[host])],
                    ..Default::default()
                };
                builder.build(input).expect("a change")
            })
            .into()
    }

    #[test]
    fn every_publish_wakes_each_listener_until_it_is_dropped() {
        let store = SnapshotStore::new();
        let [s1, s2, s3] = <[_; 3]>::try_from(snapshots()).expect("three snapshots");
        let (a, b) = (Arc::new(Count::default()), Arc::new(Count::default()));
        let la = store.listen(Waker::from(Arc::clone(&a)));
        let lb = store.listen(Waker::from(Arc::clone(&b)));
        assert_eq!(store.seq(), 0);
        store.publish(s1);
        store.publish(s2);
        assert_eq!(
            (a.0.load(Ordering::SeqCst), b.0.load(Ordering::SeqCst)),
            (2, 2)
        );
        assert_eq!(store.seq(), 2);
        drop(la);
        store.publish(s3);
        assert_eq!(
            (a.0.load(Ordering::SeqCst), b.0.load(Ordering::SeqCst)),
            (2, 3)
        );
        drop(lb);
        assert!(store.inner.listeners.lock().is_empty());
        assert_eq!(store.load().map(|s| s.seq), Some(3));
    }
}
