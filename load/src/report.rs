//! Summaries: percentiles, the table printed at the end (tributary, the floor and each peer per
//! measure), and the JSON line for scripts.

use std::collections::BTreeMap;
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

/// One kind of change, measured on tributary and on the floor (which replays what tributary sent).
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
    /// Bytes of every response one proxy received for one change (mean over the changes): what
    /// the floor replays.
    pub bytes_per_client: usize,
    /// The floor replaying the same responses.
    pub floor: Option<Stats>,
    /// Responses the floor's clients received per type (CDS, EDS, LDS, RDS).
    pub floor_responses: [u64; 4],
    /// The floor server's CPU seconds per event.
    pub floor_server_cpu_s: Option<f64>,
}

/// One kind of change as a peer served it.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct PeerChange {
    pub change: &'static str,
    /// `None` when no sample reached every proxy (see `note`).
    pub convergence: Option<Stats>,
    /// Server CPU seconds per event (events the peer did deliver).
    pub server_cpu_s: f64,
    /// Why there is no figure, e.g. the change never reached the proxies.
    pub note: Option<String>,
}

/// A peer control plane (`load/peers/<name>/`) measured in the same run.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct PeerReport {
    pub name: String,
    /// Protocols its library serves, as the peer reported them.
    pub protocols: Vec<String>,
    /// Why it was not measured, or where its run stopped.
    pub note: Option<String>,
    pub storm_s: Option<f64>,
    pub config_bytes_per_client: usize,
    /// RSS once it holds the mesh, before any client.
    pub rss_idle_bytes: u64,
    pub rss_per_client_bytes: Option<f64>,
    pub changes: Vec<PeerChange>,
}

/// A peer's figure for one measure, or a short reason it has none.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Cell {
    pub value: Option<f64>,
    pub note: Option<String>,
}

/// One row of the table: tributary, the floor (where there is one) and every peer.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Measure {
    /// A stable name for scripts (`storm`, `memory`, `endpoint.p50`, `new_service.p50`...).
    pub key: String,
    pub measure: String,
    /// `s`, `ms` or `bytes`.
    pub unit: &'static str,
    pub tributary: f64,
    pub floor: Option<f64>,
    /// tributary ÷ floor.
    pub ratio_to_floor: Option<f64>,
    pub peers: BTreeMap<String, Cell>,
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
    /// Bytes of requests each floor client sent during the storm: the requests tributary's traced
    /// proxy sent (a SotW proxy's EDS requests repeat every cluster name).
    pub floor_ack_bytes: usize,
    pub peers: Vec<PeerReport>,
    pub load_tool_cpu_s: f64,
    pub wall_s: f64,
    pub failed_streams: usize,
}

/// (key, label) of a measure.
fn named(key: &str, label: &str) -> (String, String) {
    (key.to_owned(), label.to_owned())
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}×", a / b)
    } else {
        "-".into()
    }
}

fn fmt_value(unit: &str, v: f64) -> String {
    match unit {
        "s" => format!("{v:.3}s"),
        "ms" => format!("{v:.1}ms"),
        "bytes" => format!("{:.1}KB", v / 1e3),
        _ => format!("{v:.3}"),
    }
}

/// The peer cell of a change measure.
fn change_cell(p: &PeerReport, change: &str, pick: impl Fn(&PeerChange) -> Option<f64>) -> Cell {
    match p.changes.iter().find(|c| c.change == change) {
        Some(c) => match pick(c) {
            Some(v) => Cell {
                value: Some(v),
                note: c.note.clone(),
            },
            None => Cell {
                value: None,
                note: Some(c.note.clone().unwrap_or_else(|| "-".into())),
            },
        },
        None => Cell {
            value: None,
            note: Some(p.note.clone().unwrap_or_else(|| "not measured".into())),
        },
    }
}

/// The peer cell of a whole-run measure.
fn run_cell(p: &PeerReport, v: Option<f64>) -> Cell {
    Cell {
        value: v,
        note: v
            .is_none()
            .then(|| p.note.clone().unwrap_or_else(|| "not measured".into())),
    }
}

impl Report {
    /// Every measure, tributary beside the floor and the peers: the rows of the table and the
    /// `measures` of the JSON line.
    pub(crate) fn measures(&self) -> Vec<Measure> {
        let row = |(key, measure): (String, String),
                   unit: &'static str,
                   tributary: f64,
                   floor: Option<f64>,
                   peer: &dyn Fn(&PeerReport) -> Cell| Measure {
            key,
            measure,
            unit,
            tributary,
            floor,
            ratio_to_floor: floor.filter(|f| *f > 0.0).map(|f| tributary / f),
            peers: self
                .peers
                .iter()
                .map(|p| (p.name.clone(), peer(p)))
                .collect(),
        };
        let mut out = vec![
            row(
                named("storm", "cold-start storm (last synced)"),
                "s",
                self.storm_s,
                Some(self.storm_floor_s),
                &|p| run_cell(p, p.storm_s),
            ),
            row(
                named("memory", "memory per client (full config)"),
                "bytes",
                self.rss_per_client_bytes,
                Some(self.floor_rss_per_client_bytes),
                &|p| run_cell(p, p.rss_per_client_bytes),
            ),
            row(
                named("config", "config received per client"),
                "bytes",
                self.config_bytes_per_client as f64,
                Some(self.config_bytes_per_client as f64),
                &|p| run_cell(p, p.storm_s.map(|_| p.config_bytes_per_client as f64)),
            ),
        ];
        for c in &self.changes {
            let floor = c.floor;
            let key = |what: &str| format!("{}.{what}", c.change.replace(' ', "_"));
            out.push(row(
                (
                    key("p50"),
                    format!("{} change p50 (n={})", c.change, c.convergence.n),
                ),
                "ms",
                c.convergence.p50_ms,
                floor.map(|f| f.p50_ms),
                &|p| change_cell(p, c.change, |pc| pc.convergence.map(|s| s.p50_ms)),
            ));
            out.push(row(
                (key("p99"), format!("{} change p99", c.change)),
                "ms",
                c.convergence.p99_ms,
                floor.map(|f| f.p99_ms),
                &|p| change_cell(p, c.change, |pc| pc.convergence.map(|s| s.p99_ms)),
            ));
            out.push(row(
                (key("cpu"), format!("{} server CPU per event", c.change)),
                "s",
                c.server_cpu_s,
                c.floor_server_cpu_s,
                &|p| {
                    change_cell(p, c.change, |pc| {
                        pc.convergence.is_some().then_some(pc.server_cpu_s)
                    })
                },
            ));
        }
        out
    }

    pub(crate) fn print_table(&self) {
        println!();
        println!(
            "tributary-load: mesh {}, {} {} clients over {} connections, debounce {}",
            self.mesh, self.clients, self.mode, self.connections, self.debounce
        );
        let mut header = format!(
            "{:<34} {:>12} {:>12} {:>8}",
            "measure", "tributary", "floor", "ratio"
        );
        for p in &self.peers {
            header.push_str(&format!(" {:>20}", p.name));
        }
        println!("{header}");
        for m in self.measures() {
            let mut line = format!(
                "{:<34} {:>12} {:>12} {:>8}",
                m.measure,
                fmt_value(m.unit, m.tributary),
                m.floor.map_or("-".into(), |f| fmt_value(m.unit, f)),
                m.floor.map_or("-".into(), |f| ratio(m.tributary, f)),
            );
            for p in &self.peers {
                let cell = m.peers.get(&p.name).cloned().unwrap_or_default();
                let short = |n: &str| n.split(':').next().unwrap_or("-").to_owned();
                let text = match (cell.value, cell.note) {
                    (Some(v), None) => fmt_value(m.unit, v),
                    // some changes of this kind arrived, then one did not
                    (Some(v), Some(n)) => format!("{}, then {}", fmt_value(m.unit, v), short(&n)),
                    (None, Some(n)) => short(&n),
                    (None, None) => "-".into(),
                };
                line.push_str(&format!(" {text:>20}"));
            }
            println!("{line}");
        }
        for c in &self.changes {
            println!(
                "tributary {}: responses cds/eds/lds/rds {:?}, {} B per client per change \
                 ({} B carried it), max {:.1}ms; floor replayed {:?}",
                c.change,
                c.responses,
                c.bytes_per_client,
                c.push_bytes,
                c.convergence.max_ms,
                c.floor_responses
            );
        }
        for g in crate::goals::Goal::of(&self.measures()) {
            println!("goal {g}");
        }
        if self.floor_ack_bytes > 0 {
            println!(
                "floor: each client sent {} B of requests in the storm (tributary's proxy's), read undecoded",
                self.floor_ack_bytes
            );
        }
        for p in &self.peers {
            let notes: Vec<String> = p
                .note
                .iter()
                .cloned()
                .chain(
                    p.changes
                        .iter()
                        .filter_map(|c| c.note.as_ref().map(|n| format!("{}: {n}", c.change))),
                )
                .collect();
            println!(
                "peer {} (serves {}): idle RSS {:.1} MB{}{}",
                p.name,
                p.protocols.join("+"),
                p.rss_idle_bytes as f64 / 1e6,
                if notes.is_empty() { "" } else { "; " },
                notes.join("; ")
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

    /// The report and its [`measures`](Self::measures) as one JSON line.
    pub(crate) fn print_json(&self) {
        #[derive(Serialize)]
        struct Line<'a> {
            #[serde(flatten)]
            report: &'a Report,
            measures: Vec<Measure>,
            memory_per_client: crate::goals::Memory,
            goals: Vec<crate::goals::Goal>,
        }
        let measures = self.measures();
        let line = Line {
            report: self,
            memory_per_client: crate::goals::Memory::of(&measures),
            goals: crate::goals::Goal::of(&measures),
            measures,
        };
        match serde_json::to_string(&line) {
            Ok(line) => println!("{line}"),
            Err(e) => eprintln!("cannot write JSON: {e}"),
        }
    }
}
