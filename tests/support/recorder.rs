//! A minimal global `metrics` recorder so tests can read counters and gauges.
//!
//! Tests run in parallel and share it, so assertions read *increases* of counters they caused
//! (`at least`), never absolute values.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

#[derive(Default)]
struct Store {
    values: Mutex<HashMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<HashMap<String, Arc<HistCount>>>,
}

#[derive(Default)]
struct HistCount(AtomicU64);

impl HistogramFn for HistCount {
    fn record(&self, _value: f64) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn key_string(key: &Key) -> String {
    let mut labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    labels.sort();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

struct TestRecorder(Arc<Store>);

impl Recorder for TestRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let h = Arc::clone(
            self.0
                .histograms
                .lock()
                .unwrap()
                .entry(key_string(key))
                .or_default(),
        );
        Histogram::from_arc(h)
    }
}

impl TestRecorder {
    fn cell(&self, key: &Key) -> Arc<AtomicU64> {
        Arc::clone(
            self.0
                .values
                .lock()
                .unwrap()
                .entry(key_string(key))
                .or_default(),
        )
    }
}

static STORE: OnceLock<Arc<Store>> = OnceLock::new();

/// Installs the recorder once per test binary.
pub fn install() {
    STORE.get_or_init(|| {
        let store = Arc::new(Store::default());
        metrics::set_global_recorder(TestRecorder(Arc::clone(&store)))
            .expect("no other recorder in tests");
        store
    });
}

/// A counter's value, e.g. `counter("pilot_xds_expired_nonce{type=eds}")`.
pub fn counter(key: &str) -> u64 {
    install();
    STORE
        .get()
        .unwrap()
        .values
        .lock()
        .unwrap()
        .get(key)
        .map_or(0, |v| v.load(Ordering::Relaxed))
}

/// A gauge's value.
pub fn gauge(key: &str) -> f64 {
    f64::from_bits(counter(key))
}

/// How many samples a histogram has recorded.
pub fn histogram_count(key: &str) -> u64 {
    install();
    STORE
        .get()
        .unwrap()
        .histograms
        .lock()
        .unwrap()
        .get(key)
        .map_or(0, |h| h.0.load(Ordering::Relaxed))
}
