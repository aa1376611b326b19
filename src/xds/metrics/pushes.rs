//! The metrics every push records, counted per thread and summed when `/metrics` is scraped.
//!
//! `pilot_xds_pushes`, `pilot_xds_config_size_bytes` and `pilot_xds_push_time` are recorded for
//! every response a stream hands over, and `pilot_proxy_convergence_time` once per push: 5,000
//! times per change at 5,000 proxies. Through the `metrics` recorder each record wrote cache lines
//! both cores write (the counter, and a histogram's sample queue behind an epoch pin): ~6 % of the
//! server's CPU in an endpoint change. And the exporter keeps every histogram sample (24 bytes
//! with its timestamp) until the next scrape, so a server nobody scrapes grew by ~70 bytes per
//! push (size, time and convergence), without bound.
//!
//! Here each thread counts into a [`Tally`] of its own, in istiod's buckets, behind a lock that
//! only that thread and a scrape take; [`render`] sums the tallies (a thread that exits leaves its
//! counts to the sum) and writes the families in the exporter's text format. Names, labels,
//! buckets and meaning are istiod's, as before.

use std::fmt::Write;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use parking_lot::Mutex;

use crate::envoy::ResourceType;

/// istiod's buckets for push timings, in seconds (`pilot/pkg/xds/monitoring.go`).
pub(crate) const TIME_BUCKETS: [f64; 9] = [0.01, 0.1, 0.5, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0];
/// istiod's buckets for `pilot_proxy_convergence_time`.
const CONVERGENCE_BUCKETS: [f64; 8] = [0.1, 0.5, 1.0, 3.0, 5.0, 10.0, 20.0, 30.0];
/// istiod's buckets for `pilot_xds_config_size_bytes`.
const SIZE_BUCKETS: [f64; 6] = [1.0, 1e4, 1e6, 4e6, 1e7, 4e7];

/// A response of `ty`, `bytes` long, was handed to a stream `took` after its build started.
pub(crate) fn pushed(ty: ResourceType, bytes: usize, took: Duration) {
    let i = ty.index();
    record(|t| {
        t.pushes[i] += 1;
        t.size[i].record(&SIZE_BUCKETS, bytes as f64);
        t.time[i].record(&TIME_BUCKETS, took.as_secs_f64());
    });
}

/// A push for a snapshot reached a stream `elapsed` after the snapshot's trigger.
pub(crate) fn converged(elapsed: Duration) {
    record(|t| {
        t.convergence
            .record(&CONVERGENCE_BUCKETS, elapsed.as_secs_f64())
    });
}

/// Writes the four families, summed over every thread, in Prometheus' text format (the families
/// with nothing recorded yet are left out, as the exporter leaves them out).
pub(crate) fn render(out: &mut String) {
    let sum = sum();
    let types = || {
        ResourceType::ALL
            .into_iter()
            .filter(|t| sum.pushes[t.index()] > 0)
    };
    if types().next().is_some() {
        family(out, "pilot_xds_pushes", "counter", PUSHES_HELP);
        for ty in types() {
            let _ = writeln!(
                out,
                "pilot_xds_pushes{{type=\"{}\"}} {}",
                ty.short(),
                sum.pushes[ty.index()]
            );
        }
        out.push('\n');
        let name = "pilot_xds_config_size_bytes";
        per_type(out, name, SIZE_HELP, &SIZE_BUCKETS, &sum.size, types());
        let name = "pilot_xds_push_time";
        per_type(out, name, TIME_HELP, &TIME_BUCKETS, &sum.time, types());
    }
    if sum.convergence.count > 0 {
        let name = "pilot_proxy_convergence_time";
        family(out, name, "histogram", CONVERGENCE_HELP);
        sum.convergence.write(out, name, "", &CONVERGENCE_BUCKETS);
        out.push('\n');
    }
}

// istiod's help texts.
const PUSHES_HELP: &str = "Pilot build and send errors for lds, rds, cds and eds.";
const SIZE_HELP: &str = "Distribution of configuration sizes pushed to clients";
const TIME_HELP: &str = "Total time in seconds Pilot takes to push lds, rds, cds and eds.";
const CONVERGENCE_HELP: &str =
    "Delay in seconds between config change and a proxy receiving all required configuration.";

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A histogram family with one series per type of `types`.
fn per_type<const N: usize>(
    out: &mut String,
    name: &str,
    help: &str,
    bounds: &[f64; N],
    series: &[Buckets<N>; ResourceType::COUNT],
    types: impl Iterator<Item = ResourceType>,
) {
    family(out, name, "histogram", help);
    for ty in types {
        let label = format!("type=\"{}\"", ty.short());
        series[ty.index()].write(out, name, &label, bounds);
    }
    out.push('\n');
}

/// Samples counted into fixed buckets: `counts[i]` holds those in `(bounds[i-1], bounds[i]]`.
#[derive(Clone, Copy)]
struct Buckets<const N: usize> {
    counts: [u64; N],
    count: u64,
    sum: f64,
}

impl<const N: usize> Default for Buckets<N> {
    fn default() -> Self {
        Self {
            counts: [0; N],
            count: 0,
            sum: 0.0,
        }
    }
}

impl<const N: usize> Buckets<N> {
    fn record(&mut self, bounds: &[f64; N], value: f64) {
        if let Some(i) = bounds.iter().position(|b| value <= *b) {
            self.counts[i] += 1;
        }
        self.count += 1;
        self.sum += value;
    }

    fn add(&mut self, other: &Self) {
        for (a, b) in self.counts.iter_mut().zip(other.counts) {
            *a += b;
        }
        self.count += other.count;
        self.sum += other.sum;
    }

    /// The `_bucket` lines (cumulative, as Prometheus reads them), `_sum` and `_count` of one
    /// series; `label` is its label set without braces (`""`: none).
    fn write(&self, out: &mut String, name: &str, label: &str, bounds: &[f64; N]) {
        let sep = if label.is_empty() { "" } else { "," };
        let mut below = 0;
        for (bound, n) in bounds.iter().zip(self.counts) {
            below += n;
            let _ = writeln!(out, "{name}_bucket{{{label}{sep}le=\"{bound}\"}} {below}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{label}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = |l: &str| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{{{l}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {}", braces(label), self.sum);
        let _ = writeln!(out, "{name}_count{} {}", braces(label), self.count);
    }
}

/// What one thread recorded.
#[derive(Clone, Default)]
struct Tally {
    pushes: [u64; ResourceType::COUNT],
    size: [Buckets<{ SIZE_BUCKETS.len() }>; ResourceType::COUNT],
    time: [Buckets<{ TIME_BUCKETS.len() }>; ResourceType::COUNT],
    convergence: Buckets<{ CONVERGENCE_BUCKETS.len() }>,
}

impl Tally {
    fn add(&mut self, other: &Self) {
        for (a, b) in self.pushes.iter_mut().zip(other.pushes) {
            *a += b;
        }
        for (a, b) in self.size.iter_mut().zip(&other.size) {
            a.add(b);
        }
        for (a, b) in self.time.iter_mut().zip(&other.time) {
            a.add(b);
        }
        self.convergence.add(&other.convergence);
    }
}

/// The tallies of the live threads, and the sum of those of threads that exited.
#[derive(Default)]
struct Tallies {
    live: Vec<Arc<Mutex<Tally>>>,
    retired: Tally,
}

/// What every thread recorded, summed.
fn sum() -> Tally {
    let all = TALLIES.lock();
    let mut sum = all.retired.clone();
    for t in &all.live {
        sum.add(&t.lock());
    }
    sum
}

/// Locked by a scrape and by a thread's first record and exit; a thread's own [`Tally`] is locked
/// after this one, never before.
static TALLIES: LazyLock<Mutex<Tallies>> = LazyLock::new(Mutex::default);

/// This thread's tally, listed in [`TALLIES`] while the thread lives.
struct Local(Arc<Mutex<Tally>>);

impl Local {
    fn register() -> Self {
        let tally = Arc::default();
        TALLIES.lock().live.push(Arc::clone(&tally));
        Local(tally)
    }
}

impl Drop for Local {
    /// The thread exits: its counts go to `retired`, so the sum never goes down.
    fn drop(&mut self) {
        let mut all = TALLIES.lock();
        all.live.retain(|t| !Arc::ptr_eq(t, &self.0));
        let mine = self.0.lock();
        all.retired.add(&mine);
    }
}

thread_local! {
    static LOCAL: Local = Local::register();
}

fn record(f: impl Fn(&mut Tally)) {
    // A thread already tearing down its locals counts into `retired` directly.
    if LOCAL.try_with(|l| f(&mut l.0.lock())).is_err() {
        f(&mut TALLIES.lock().retired);
    }
}

#[cfg(test)]
mod tests;
