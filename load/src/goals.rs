//! The goals of issue 14 (`docs/floor.md`, "Goals"), computed from a run's measures: the storm and
//! every change within 1.5× of the floor that moved the same bytes, and server memory per client
//! within the floor's plus 16 KiB. The `run --json` line carries them; `tributary-load check`
//! recomputes them from the line's `measures` and says which are met.

use std::fmt;
use std::io::Read as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::report::Measure;

/// A time goal: tributary within this multiple of the floor.
pub(crate) const RATIO_BOUND: f64 = 1.5;
/// The memory goal: tributary's memory per client within the floor's plus this many bytes.
pub(crate) const MEMORY_HEADROOM_BYTES: f64 = 16.0 * 1024.0;
/// The measure holding memory per client.
const MEMORY_KEY: &str = "memory";
/// Time goals: (measure key, goal name).
const RATIO_GOALS: [(&str, &str); 4] = [
    ("storm", "cold-start storm ≤ 1.5× floor"),
    ("endpoint.p50", "endpoint change p50 ≤ 1.5× floor"),
    ("new_service.p50", "new service p50 ≤ 1.5× floor"),
    ("delete_service.p50", "delete service p50 ≤ 1.5× floor"),
];
const MEMORY_GOAL: &str = "memory per client ≤ floor + 16 KiB";

/// Why a run's JSON cannot be checked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
    /// The file could not be read.
    #[error("cannot read {path}: {error}")]
    Read { path: String, error: std::io::Error },
    /// No line of it is a JSON object.
    #[error("{0} holds no JSON line: pass the output of `tributary-load run --json`")]
    NoJson(String),
    /// The JSON line is not a run report with keyed measures.
    #[error(
        "{path} is not a run report of this tool (each measure needs key, tributary, floor): {error}"
    )]
    Parse {
        path: String,
        error: serde_json::Error,
    },
}

/// One measure as the goals read it (a row of the JSON line's `measures`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Row {
    pub key: String,
    pub tributary: f64,
    pub floor: Option<f64>,
}

impl From<&Measure> for Row {
    fn from(m: &Measure) -> Self {
        Self {
            key: m.key.clone(),
            tributary: m.tributary,
            floor: m.floor,
        }
    }
}

/// Memory per client: tributary's, the floor's, and the bound for tributary.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Memory {
    pub tributary: Option<f64>,
    pub floor: Option<f64>,
    /// `floor` + 16 KiB.
    pub bound: Option<f64>,
}

impl Memory {
    pub(crate) fn of(measures: &[Measure]) -> Self {
        Self::of_rows(&rows(measures))
    }

    fn of_rows(rows: &[Row]) -> Self {
        let row = rows.iter().find(|r| r.key == MEMORY_KEY);
        let floor = row.and_then(|r| r.floor);
        Self {
            tributary: row.map(|r| r.tributary),
            floor,
            bound: floor.map(|f| f + MEMORY_HEADROOM_BYTES),
        }
    }
}

/// One goal and whether the run met it. A goal the run could not measure (no floor figure) is
/// missed, with no value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Goal {
    pub name: String,
    /// The ratio to the floor, or memory per client in bytes.
    pub value: Option<f64>,
    pub bound: Option<f64>,
    pub met: bool,
}

fn rows(measures: &[Measure]) -> Vec<Row> {
    measures.iter().map(Row::from).collect()
}

impl Goal {
    pub(crate) fn of(measures: &[Measure]) -> Vec<Goal> {
        Self::of_rows(&rows(measures))
    }

    /// Every goal, in a fixed order, from a run's measures.
    pub(crate) fn of_rows(rows: &[Row]) -> Vec<Goal> {
        let mut out: Vec<Goal> = RATIO_GOALS
            .iter()
            .map(|(key, name)| {
                let value = rows
                    .iter()
                    .find(|r| r.key == *key)
                    .and_then(|r| r.floor.filter(|f| *f > 0.0).map(|f| r.tributary / f));
                Goal::new(name, value, Some(RATIO_BOUND))
            })
            .collect();
        let memory = Memory::of_rows(rows);
        out.push(Goal::new(MEMORY_GOAL, memory.tributary, memory.bound));
        out
    }

    fn new(name: &str, value: Option<f64>, bound: Option<f64>) -> Self {
        Self {
            name: name.to_owned(),
            value,
            bound,
            met: matches!((value, bound), (Some(v), Some(b)) if v <= b),
        }
    }
}

impl fmt::Display for Goal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = if self.met { "met" } else { "MISSED" };
        match (self.value, self.bound) {
            (Some(v), Some(b)) => write!(f, "{}: {verdict} ({v:.2} vs bound {b:.2})", self.name),
            _ => write!(f, "{}: {verdict} (not measured)", self.name),
        }
    }
}

/// The goals of the run whose JSON line is in `text` (the last line that is a JSON object, so the
/// whole output of `run --json` may be given). `path` names it in errors.
pub(crate) fn goals_of(text: &str, path: &str) -> Result<Vec<Goal>, CheckError> {
    #[derive(Deserialize)]
    struct Line {
        measures: Vec<Row>,
    }
    let line = text
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| CheckError::NoJson(path.to_owned()))?;
    let line: Line = serde_json::from_str(line).map_err(|error| CheckError::Parse {
        path: path.to_owned(),
        error,
    })?;
    Ok(Goal::of_rows(&line.measures))
}

/// `tributary-load check`: prints each goal of the run at `path` (`-`: standard input); true if
/// every one is met.
pub(crate) fn check_file(path: &Path) -> Result<bool, CheckError> {
    let name = path.display().to_string();
    let read_err = |error| CheckError::Read {
        path: name.clone(),
        error,
    };
    let text = if name == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(read_err)?;
        s
    } else {
        std::fs::read_to_string(path).map_err(read_err)?
    };
    let goals = goals_of(&text, &name)?;
    for g in &goals {
        println!("{g}");
    }
    Ok(goals.iter().all(|g| g.met))
}

#[cfg(test)]
mod tests;
