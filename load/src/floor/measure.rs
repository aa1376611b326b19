//! The floor's half of a run: start the floor server with the traced storm and changes, connect
//! the same clients over the same connections, time the storm, then replay each change in the order
//! tributary made them and time each until the last client acknowledged the response that carried
//! it.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;

use super::{sink, trigger};
use crate::probe::{Marker, Probe};
use crate::process::Server;
use crate::replay::{self, Push};
use crate::report::Stats;
use crate::{channels, spawn_clients, wait_for};

/// Time for the clients to settle after the storm before RSS is read, as in tributary's half.
const SETTLE_STORM: Duration = Duration::from_millis(500);
/// Time between two replayed changes, once every response of the previous one arrived.
const SETTLE_PUSH: Duration = Duration::from_millis(100);

/// What the floor's half is run with.
pub(crate) struct FloorSetup<'a> {
    pub delta: bool,
    pub clients: usize,
    pub per_connection: usize,
    pub connections: usize,
    pub is_delta: &'a (dyn Fn(usize) -> bool + Sync),
    /// Where the replay file for the floor server is written.
    pub dir: &'a Path,
}

/// One kind of change on the floor.
#[derive(Debug, Clone)]
pub(crate) struct FloorChange {
    pub kind: String,
    pub convergence: Stats,
    /// Responses the clients received per type during these changes (CDS, EDS, LDS, RDS).
    pub responses: [u64; 4],
    /// The floor server's CPU seconds per change.
    pub server_cpu_s: f64,
}

/// What the floor's half measured.
#[derive(Debug, Clone)]
pub(crate) struct FloorRun {
    pub storm_s: f64,
    pub rss_per_client_bytes: f64,
    pub changes: Vec<FloorChange>,
}

/// Runs the floor's half: `storm`, then `changes` (every change of the run, in order).
pub(crate) async fn measure(
    setup: &FloorSetup<'_>,
    storm: Push,
    changes: Vec<Push>,
) -> anyhow::Result<FloorRun> {
    let n = setup.clients;
    let path = setup.dir.join("floor-replay.json");
    let pushes: Vec<Push> = std::iter::once(storm).chain(changes).collect();
    replay::write(&path, &pushes)?;
    let server = Server::floor(setup.delta, &path)?;
    let rss_idle = server.rss();
    let probe = Probe::new();
    let chans = channels(server.xds, setup.connections).await?;
    let pushes: Arc<[Push]> = pushes.into();
    let mut tasks = JoinSet::new();
    let t0 = Instant::now();
    spawn_clients(&mut tasks, &chans, n, setup.per_connection, |ch, i| {
        sink(
            ch,
            i,
            (setup.is_delta)(i),
            Arc::clone(&pushes),
            Arc::clone(&probe),
        )
    });
    let last = wait_for("floor storm", n, &probe, Probe::synced_count).await?;
    let storm_s = last.saturating_duration_since(t0).as_secs_f64();
    tokio::time::sleep(SETTLE_STORM).await;
    let rss_per_client_bytes = server.rss().saturating_sub(rss_idle) as f64 / n as f64;
    let control = channels(server.xds, 1).await?.remove(0);
    let mut changes: Vec<(FloorChange, Vec<Duration>)> = Vec::new();
    for (k, push) in pushes.iter().enumerate().skip(1) {
        let cpu0 = server.cpu();
        let t = probe.arm(k as u64, Marker::FloorPush);
        trigger(control.clone()).await?;
        let last = wait_for(&format!("floor {}", push.kind), n, &probe, Probe::seen).await?;
        // the responses that follow the one timed reach every client before the next change
        let all = n * push.responses.len();
        let delivered = |p: &Probe| (p.responses().iter().sum::<u64>() as usize, Instant::now());
        wait_for("floor: the rest of the change", all, &probe, delivered).await?;
        tokio::time::sleep(SETTLE_PUSH).await;
        let cpu = server.cpu() - cpu0;
        if changes.last().is_none_or(|(c, _)| c.kind != push.kind) {
            changes.push((
                FloorChange {
                    kind: push.kind.clone(),
                    convergence: Stats::default(),
                    responses: [0; 4],
                    server_cpu_s: 0.0,
                },
                Vec::new(),
            ));
        }
        if let Some((c, samples)) = changes.last_mut() {
            samples.push(last.saturating_duration_since(t));
            c.server_cpu_s += cpu;
            for (a, b) in c.responses.iter_mut().zip(probe.responses()) {
                *a += b;
            }
        }
    }
    tasks.abort_all();
    Ok(FloorRun {
        storm_s,
        rss_per_client_bytes,
        changes: changes
            .into_iter()
            .map(|(mut c, samples)| {
                c.convergence = Stats::of(&samples);
                c.server_cpu_s /= samples.len().max(1) as f64;
                eprintln!("\r  floor {}: p50 {:.1} ms", c.kind, c.convergence.p50_ms);
                c
            })
            .collect(),
    })
}
