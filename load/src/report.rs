//! Summaries: percentiles, the table printed at the end, and the JSON line for scripts.

use std::time::Duration;

use serde::Serialize;

/// p50 / p99 / max of a set of durations, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Stats {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub n: usize,
}

impl Stats {
    pub(crate) fn of(samples: &[Duration]) -> Self {
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| {
            if ms.is_empty() {
                0.0
            } else {
                ms[((ms.len() - 1) as f64 * q).round() as usize]
            }
        };
        Self {
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: at(1.0),
            n: ms.len(),
        }
    }
}

/// One kind of change, measured on tributary and (for endpoint changes) on the floor.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct ChangeResult {
    pub change: &'static str,
    pub convergence: Stats,
    /// Server CPU seconds per event.
    pub server_cpu_s: f64,
    /// Responses the proxies received per type during these events (CDS, EDS, LDS, RDS).
    pub responses: [u64; 4],
    /// Bytes of the response that carried the change, to one proxy.
    pub push_bytes: usize,
}

/// Everything one run measured.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Report {
    pub mesh: String,
    pub clients: usize,
    pub connections: usize,
    pub mode: String,
    pub debounce: String,
    pub storm_s: f64,
    pub storm_floor_s: f64,
    pub config_bytes_per_client: usize,
    pub rss_idle_bytes: u64,
    pub rss_per_client_bytes: f64,
    pub floor_rss_per_client_bytes: f64,
    pub changes: Vec<ChangeResult>,
    pub floor_push: Stats,
    pub load_tool_cpu_s: f64,
    pub wall_s: f64,
    pub failed_streams: usize,
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "-".into()
    }
}

impl Report {
    pub(crate) fn print_table(&self) {
        println!();
        println!(
            "tributary-load: mesh {}, {} {} clients over {} connections, debounce {}",
            self.mesh, self.clients, self.mode, self.connections, self.debounce
        );
        println!(
            "{:<34} {:>12} {:>12} {:>10}",
            "measure", "tributary", "floor", "ratio"
        );
        println!(
            "{:<34} {:>11.3}s {:>11.3}s {:>10}",
            "cold-start storm (last synced)",
            self.storm_s,
            self.storm_floor_s,
            ratio(self.storm_s, self.storm_floor_s)
        );
        println!(
            "{:<34} {:>10.1}KB {:>10.1}KB {:>10}",
            "memory per client (full config)",
            self.rss_per_client_bytes / 1e3,
            self.floor_rss_per_client_bytes / 1e3,
            ratio(self.rss_per_client_bytes, self.floor_rss_per_client_bytes)
        );
        for c in &self.changes {
            let floor = (c.change == "endpoint").then_some(self.floor_push);
            println!(
                "{:<34} {:>10.1}ms {:>12} {:>10}",
                format!("{} change p50 (n={})", c.change, c.convergence.n),
                c.convergence.p50_ms,
                floor.map_or("-".into(), |f| format!("{:.1}ms", f.p50_ms)),
                floor.map_or("-".into(), |f| ratio(c.convergence.p50_ms, f.p50_ms)),
            );
            println!(
                "{:<34} {:>10.1}ms / {:.1}ms",
                "    p99 / max", c.convergence.p99_ms, c.convergence.max_ms
            );
            println!(
                "{:<34} {:>11.3}s   responses cds/eds/lds/rds {:?}, {} B each",
                "    server CPU per event", c.server_cpu_s, c.responses, c.push_bytes
            );
        }
        println!(
            "config per client {} B; server idle RSS {:.1} MB; load tool CPU {:.1}s over {:.1}s wall{}",
            self.config_bytes_per_client,
            self.rss_idle_bytes as f64 / 1e6,
            self.load_tool_cpu_s,
            self.wall_s,
            if self.failed_streams > 0 {
                format!("; {} streams FAILED", self.failed_streams)
            } else {
                String::new()
            }
        );
    }

    pub(crate) fn print_json(&self) {
        match serde_json::to_string(self) {
            Ok(line) => println!("{line}"),
            Err(e) => eprintln!("cannot write JSON: {e}"),
        }
    }
}
