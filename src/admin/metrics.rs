//! The process-wide Prometheus recorder, with istiod's histogram buckets, plus the metrics that
//! describe the process itself: `istio_build{component="pilot",tag=<version>}` (the dashboard's
//! "Pilot Versions") and the standard `process_*` family (CPU seconds, resident memory, open file
//! descriptors, threads; `process.rs`), sampled at every scrape.
//!
//! Metric names follow istiod (`pilot_xds_pushes`, ...) so existing dashboards work; like istiod's
//! exporter, counters carry no `_total` suffix (the `process_*` family keeps Prometheus' own
//! names). The `metrics` crate has one global recorder per process, so it is installed once and
//! every admin server (several in one test binary) renders it. Each subsystem names and describes
//! its own metrics (`xds::metrics`, `aggregate::metrics`, `snapshot::metrics`, `runtime::metrics`,
//! `tributary_registries::metrics`); this module registers those descriptions when it installs the
//! recorder.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Snapshot builds are much faster than pushes; finer buckets make them readable.
const BUILD_BUCKETS: &[f64] = &[0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0];
/// The `component` label of `istio_build`, as istiod's: the dashboard filters on it.
const BUILD_COMPONENT: &str = "pilot";

/// The recorder's handle, installing the recorder on first use.
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new();
        let recorder = buckets(builder).build_recorder();
        let handle = recorder.handle();
        // Another recorder may already be installed (a test harness): then render ours, empty.
        let _ = metrics::set_global_recorder(recorder);
        describe();
        crate::xds::metrics::register_error_series();
        metrics::gauge!("istio_build", "component" => BUILD_COMPONENT, "tag" => env!("CARGO_PKG_VERSION"))
            .set(1.0);
        handle
    })
}

/// Every subsystem's descriptions (HELP lines), and this module's.
fn describe() {
    crate::xds::metrics::describe();
    crate::aggregate::metrics::describe();
    crate::snapshot::metrics::describe();
    crate::runtime::metrics::describe();
    tributary_registries::metrics::describe();
    super::process::describe();
    super::tasks::describe();
    metrics::describe_gauge!(
        "istio_build",
        "Istio component build info (tag: tributary's version)."
    );
}

fn buckets(b: PrometheusBuilder) -> PrometheusBuilder {
    let set = |b: PrometheusBuilder, name: &str, buckets: &[f64]| {
        b.set_buckets_for_metric(Matcher::Full(name.to_string()), buckets)
            .expect("bucket lists are constant and non-empty")
    };
    // istiod times debounces in the buckets of its push timings.
    let b = set(b, "pilot_debounce_time", &crate::xds::metrics::TIME_BUCKETS);
    set(b, "tributary_snapshot_build_seconds", BUILD_BUCKETS)
}

/// The current metrics in Prometheus text format.
pub fn render() -> String {
    let h = handle();
    super::process::sample();
    super::tasks::sample();
    h.run_upkeep();
    let mut text = h.render();
    // The families every push records, counted per thread (`xds/metrics/pushes.rs`).
    crate::xds::metrics::render(&mut text);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every family in the output has a HELP line (each subsystem describes what it records).
    #[test]
    fn build_and_process_metrics_render_with_help() {
        let text = render();
        let tag = format!(
            "istio_build{{component=\"pilot\",tag=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&tag), "{text}");
        for family in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_threads",
        ] {
            assert!(text.contains(&format!("\n{family} ")), "{family} in {text}");
            assert!(text.contains(&format!("# HELP {family} ")), "HELP {family}");
        }
    }
    /// The metric names `text` emits (`counter!`, `gauge!`, `histogram!`) or describes
    /// (`describe_*!`): the first string literal after each macro's opening parenthesis, when it
    /// reads as a metric name.
    fn metric_names(text: &str, describe: bool) -> Vec<String> {
        let mut names = Vec::new();
        for kind in ["counter!(", "gauge!(", "histogram!("] {
            for (at, _) in text.match_indices(kind) {
                if text[..at].ends_with("describe_") != describe {
                    continue;
                }
                let rest = text[at + kind.len()..].trim_start();
                let name = rest.strip_prefix('"').and_then(|r| r.split('"').next());
                if let Some(name) = name.filter(|n| {
                    !n.is_empty() && n.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                }) {
                    names.push(name.to_string());
                }
            }
        }
        names
    }

    /// The non-test Rust sources under `dir`.
    fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("source directory reads") {
            let path = entry.expect("directory entry").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if path.is_dir() {
                if name != "tests" {
                    sources(&path, out);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" {
                out.push(path);
            }
        }
    }

    /// Each subsystem names and describes its metrics in one place: every metric is emitted from
    /// a file that also describes it, and none is emitted undescribed (a `/metrics` family
    /// without HELP).
    #[test]
    fn every_emitted_metric_is_described_where_it_is_emitted() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        sources(&root.join("src"), &mut files);
        sources(&root.join("registries/src"), &mut files);
        let mut emitted = 0;
        for file in files {
            let text = std::fs::read_to_string(&file).expect("source reads");
            let described = metric_names(&text, true);
            for name in metric_names(&text, false) {
                emitted += 1;
                assert!(
                    described.contains(&name),
                    "{} emits `{name}` without describing it there",
                    file.display()
                );
            }
        }
        assert!(emitted > 20, "the scan found the metrics ({emitted})");
    }
}
