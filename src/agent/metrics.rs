//! The agent's own metrics, appended to Envoy's on `/stats/prometheus`.
//!
//! The agent is its own process, so these are plain atomics rendered as Prometheus text, not the
//! control plane's recorder.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Counters and gauges of one agent.
#[derive(Debug, Default)]
pub(super) struct AgentMetrics {
    /// Envoy started again after an abnormal exit.
    pub restarts: AtomicU64,
    /// Hot restarts (a new epoch taking over from a running Envoy).
    pub hot_restarts: AtomicU64,
    /// Drain-then-restart rotations (where hot restart is off or failed).
    pub cold_rotations: AtomicU64,
    /// The running Envoy's restart epoch.
    pub epoch: AtomicU64,
}

impl AgentMetrics {
    /// Prometheus text; `update_times` are Envoy's `*.update_time` gauges (ms since the Unix
    /// epoch), from which the age of the newest config is derived.
    pub(super) fn render(&self, update_times: &BTreeMap<String, u64>) -> String {
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, value: String| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {value}");
        };
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
        family(
            "tributary_agent_envoy_restarts_total",
            "counter",
            "Envoy started again after an abnormal exit.",
            get(&self.restarts),
        );
        family(
            "tributary_agent_envoy_hot_restarts_total",
            "counter",
            "Hot restarts of Envoy (certificate rotations).",
            get(&self.hot_restarts),
        );
        family(
            "tributary_agent_envoy_cold_rotations_total",
            "counter",
            "Certificate rotations done by drain-then-restart.",
            get(&self.cold_rotations),
        );
        family(
            "tributary_agent_envoy_epoch",
            "gauge",
            "The running Envoy's restart epoch.",
            get(&self.epoch),
        );
        if let Some(age) = seconds_since_last_config(update_times, SystemTime::now()) {
            family(
                "tributary_agent_seconds_since_last_config",
                "gauge",
                "Seconds since Envoy last accepted a CDS or LDS update.",
                format!("{age:.3}"),
            );
        }
        out
    }
}

/// Seconds since the newest of Envoy's `update_time` gauges; `None` before any config.
fn seconds_since_last_config(update_times: &BTreeMap<String, u64>, now: SystemTime) -> Option<f64> {
    let newest = update_times.values().copied().filter(|&ms| ms > 0).max()?;
    let now_ms = now.duration_since(UNIX_EPOCH).ok()?.as_millis() as f64;
    Some(((now_ms - newest as f64) / 1000.0).max(0.0))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn renders_counters_and_config_age() {
        let m = AgentMetrics::default();
        m.restarts.fetch_add(2, Ordering::Relaxed);
        let text = m.render(&BTreeMap::new());
        assert!(
            text.contains("tributary_agent_envoy_restarts_total 2\n"),
            "{text}"
        );
        assert!(!text.contains("seconds_since_last_config"), "no config yet");
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        let times = BTreeMap::from([
            ("cluster_manager.cds.update_time".to_string(), 990_000),
            ("listener_manager.lds.update_time".to_string(), 995_500),
        ]);
        assert_eq!(seconds_since_last_config(&times, now), Some(4.5));
    }
}
