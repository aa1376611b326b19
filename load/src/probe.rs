//! What the simulated proxies report: when each one first held the full config, and when each one
//! received and acknowledged the change being measured.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// The change a measurement waits for.
#[derive(Debug, Clone)]
pub(crate) enum Marker {
    /// A response of `type_url` carrying resource `name` (an endpoint change: its CLA).
    Carries {
        type_url: &'static str,
        name: String,
    },
    /// The response that makes hostname `host` routable: a route configuration (RDS) response
    /// with a virtual host of `host`, or for a VHDS proxy the `VirtualHost` response carrying one
    /// (a new service).
    Routable { host: String },
    /// The response after which `host` is no longer routable: an RDS response whose route
    /// configurations have no virtual host of `host`, or for a VHDS proxy the `VirtualHost`
    /// response that removes one (a deleted service).
    Unroutable { host: String },
    /// The floor server's next push (its sink clients match pushes by epoch, not by content).
    FloorPush,
}

/// Shared by every simulated proxy of one run.
pub(crate) struct Probe {
    base: Instant,
    marker: RwLock<Option<(u64, Marker)>>,
    seen: AtomicUsize,
    seen_last_ns: AtomicU64,
    /// Size of the first response that carried the marker (to size the floor's push).
    marker_bytes: AtomicUsize,
    synced: AtomicUsize,
    synced_last_ns: AtomicU64,
    /// Bytes of config each proxy held when it synced (the first one's, to size the floor's storm).
    synced_bytes: AtomicUsize,
    /// Responses received per type (CDS, EDS, LDS, RDS) since the marker was armed.
    responses: [AtomicU64; 4],
    /// Streams that failed, with the first error.
    pub failed: AtomicUsize,
    pub first_error: RwLock<Option<String>>,
}

impl Probe {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            base: Instant::now(),
            marker: RwLock::new(None),
            seen: AtomicUsize::new(0),
            seen_last_ns: AtomicU64::new(0),
            marker_bytes: AtomicUsize::new(0),
            synced: AtomicUsize::new(0),
            synced_last_ns: AtomicU64::new(0),
            synced_bytes: AtomicUsize::new(0),
            responses: Default::default(),
            failed: AtomicUsize::new(0),
            first_error: RwLock::new(None),
        })
    }

    fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    fn at(&self, ns: u64) -> Instant {
        self.base + Duration::from_nanos(ns)
    }

    /// Starts waiting for `marker` (epoch `epoch`); returns when it was armed.
    pub(crate) fn arm(&self, epoch: u64, marker: Marker) -> Instant {
        self.seen.store(0, Ordering::SeqCst);
        self.marker_bytes.store(0, Ordering::SeqCst);
        for r in &self.responses {
            r.store(0, Ordering::SeqCst);
        }
        *self.marker.write().unwrap_or_else(|e| e.into_inner()) = Some((epoch, marker));
        Instant::now()
    }

    /// The armed marker, for a proxy to test a response against.
    pub(crate) fn marker(&self) -> Option<(u64, Marker)> {
        self.marker
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A proxy received a response of type `i` (CDS, EDS, LDS, RDS order).
    pub(crate) fn response(&self, i: usize) {
        if let Some(r) = self.responses.get(i) {
            r.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Responses per type since the marker was armed.
    pub(crate) fn responses(&self) -> [u64; 4] {
        [0, 1, 2, 3].map(|i| self.responses[i].load(Ordering::SeqCst))
    }

    /// A proxy received and acknowledged the marker in a response of `bytes`.
    pub(crate) fn saw(&self, bytes: usize) {
        let _ = self
            .marker_bytes
            .compare_exchange(0, bytes, Ordering::SeqCst, Ordering::SeqCst);
        self.seen_last_ns.fetch_max(self.now_ns(), Ordering::SeqCst);
        self.seen.fetch_add(1, Ordering::SeqCst);
    }

    /// How many proxies saw the armed marker, and when the last one did.
    pub(crate) fn seen(&self) -> (usize, Instant) {
        (
            self.seen.load(Ordering::SeqCst),
            self.at(self.seen_last_ns.load(Ordering::SeqCst)),
        )
    }

    pub(crate) fn marker_bytes(&self) -> usize {
        self.marker_bytes.load(Ordering::SeqCst)
    }

    /// A proxy holds its full config (all four types, EDS for every cluster), `bytes` of it.
    pub(crate) fn synced(&self, bytes: usize) {
        let _ = self
            .synced_bytes
            .compare_exchange(0, bytes, Ordering::SeqCst, Ordering::SeqCst);
        self.synced_last_ns
            .fetch_max(self.now_ns(), Ordering::SeqCst);
        self.synced.fetch_add(1, Ordering::SeqCst);
    }

    /// How many proxies are synced, and when the last one was.
    pub(crate) fn synced_count(&self) -> (usize, Instant) {
        (
            self.synced.load(Ordering::SeqCst),
            self.at(self.synced_last_ns.load(Ordering::SeqCst)),
        )
    }

    pub(crate) fn synced_bytes(&self) -> usize {
        self.synced_bytes.load(Ordering::SeqCst)
    }

    /// A proxy's stream failed.
    pub(crate) fn fail(&self, error: String) {
        self.failed.fetch_add(1, Ordering::SeqCst);
        let mut first = self.first_error.write().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert(error);
    }
}
