//! A minimal global `metrics` recorder so tests can read counters and gauges, and the families
//! tributary renders itself (`rendered`).
//!
//! Tests run in parallel and share it, so assertions read *increases* of counters they caused
//! (`at least`), never absolute values.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

#[derive(Default)]
struct Store {
    values: Mutex<HashMap<String, Arc<AtomicU64>>>,
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

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        // No test reads a recorder histogram; the push families are read with `rendered`.
        Histogram::noop()
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

/// A series of the families tributary counts per thread and renders itself at scrape time
/// (`pilot_xds_pushes`, `pilot_xds_config_size_bytes`, `pilot_xds_push_time`,
/// `pilot_proxy_convergence_time`; `src/xds/metrics/pushes.rs`), read from `/metrics`' text as
/// Prometheus writes it, e.g. `rendered("pilot_xds_pushes{type=\"cds\"}")`; 0 when absent.
pub fn rendered(series: &str) -> f64 {
    install();
    let text = tributary::admin::metrics::render();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.parse().expect("a sample value"))
}
