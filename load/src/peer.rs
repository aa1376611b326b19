//! Peer control planes in the same run: each one a small server on another Rust xDS library
//! (`load/peers/<name>/`, its own workspace), started as a child process like tributary, given
//! exactly the resources tributary served (`recorder.rs`) through its library's own snapshot API,
//! and measured with the same simulated proxies, the same storm and the same changes.
//!
//! The load tool talks to a peer over the control protocol of `load/peers/control.rs`: one
//! [`control::Update`] with every type and the node ids first, then, at each change, the types whose
//! resources differ from the previous state, each under a new version.

use std::io::{BufReader, BufWriter};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use prost::Message;
use tokio::task::JoinSet;

use crate::probe::{Marker, Probe};
use crate::process::{self, Server};
use crate::recorder::{Recorded, TYPES};
use crate::report::{PeerChange, PeerReport, Stats};
use crate::{channels, proxy, spawn_clients, wait_until};

#[path = "../peers/control.rs"]
mod control;

/// The peers the load tool knows: the names of their crates under `load/peers/`.
pub(crate) const PEERS: [&str; 2] = ["rust-control-plane", "nebucloud-xds"];

/// Time for a change's stragglers (other types of the same push) between two changes, as in
/// tributary's half of the run.
const SETTLE: Duration = Duration::from_millis(300);

/// One change as the peers replay it: what the proxies wait for and the state after it.
pub(crate) struct Step {
    pub kind: &'static str,
    pub marker: Marker,
    pub state: Recorded,
}

/// What every peer is measured with.
pub(crate) struct Plan<'a> {
    pub clients: usize,
    pub per_connection: usize,
    pub connections: usize,
    /// Which clients are delta (the rest SotW), as in tributary's half.
    pub is_delta: &'a (dyn Fn(usize) -> bool + Sync),
    /// The mesh once the storm synced.
    pub initial: &'a Recorded,
    pub steps: &'a [Step],
    /// How long a change may take to reach every proxy before the peer is said not to push it.
    pub change_limit: Duration,
}

/// The node id of simulated proxy `i` (`proxy.rs` sends it).
fn node_id(i: usize) -> String {
    format!("load-{i}")
}

/// The update that turns `prev` into `next` (everything when `prev` is `None`): each type whose
/// resources differ, whole, under a version bumped in `versions`.
fn update(
    prev: Option<&Recorded>,
    next: &Recorded,
    versions: &mut [u64; 4],
    nodes: Vec<String>,
) -> control::Update {
    let mut types = Vec::new();
    for (i, type_url) in TYPES.iter().enumerate() {
        if prev.is_some_and(|p| p[i] == next[i]) {
            continue;
        }
        versions[i] += 1;
        types.push(control::TypeSet {
            type_url: (*type_url).to_owned(),
            version: versions[i].to_string(),
            resources: next[i]
                .iter()
                .map(|(name, value)| control::NamedResource {
                    name: name.clone(),
                    value: value.to_vec(),
                })
                .collect(),
        });
    }
    control::Update { nodes, types }
}

/// A control-protocol connection to a peer.
struct Control {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
}

impl Control {
    fn connect(addr: SocketAddr) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(addr)
            .with_context(|| format!("is the peer's control port listening on {addr}?"))?;
        Ok(Self {
            reader: BufReader::new(stream.try_clone()?),
            writer: BufWriter::new(stream),
        })
    }

    /// Sends `update` and waits until the peer has set it in its cache.
    fn send(&mut self, update: &control::Update) -> anyhow::Result<()> {
        control::write_frame(&mut self.writer, &update.encode_to_vec())?;
        let reply = control::read_frame(&mut self.reader)?
            .context("the peer closed its control connection")?;
        anyhow::ensure!(
            reply.is_empty(),
            "the peer refused an update: {}",
            String::from_utf8_lossy(&reply)
        );
        Ok(())
    }

    /// [`send`](Self::send) from async code: the peer may take a while to set every node's snapshot.
    fn send_blocking(&mut self, update: &control::Update) -> anyhow::Result<()> {
        tokio::task::block_in_place(|| self.send(update))
    }
}

/// Builds every peer in `names` (before any measurement, so a build never overlaps one).
pub(crate) fn build(names: &[String]) -> anyhow::Result<Vec<(String, std::path::PathBuf)>> {
    names
        .iter()
        .map(|n| Ok((n.clone(), process::peer_bin(n)?)))
        .collect()
}

/// Measures peer `name` (binary `bin`); what it cannot do, or a failure, is a note in its report.
pub(crate) async fn measure(name: &str, bin: &std::path::Path, plan: &Plan<'_>) -> PeerReport {
    let mut report = PeerReport {
        name: name.to_owned(),
        ..Default::default()
    };
    if let Err(e) = measure_into(&mut report, bin, plan).await {
        report.note = Some(format!("failed: {e:#}"));
    }
    report
}

async fn measure_into(
    report: &mut PeerReport,
    bin: &std::path::Path,
    plan: &Plan<'_>,
) -> anyhow::Result<()> {
    let n = plan.clients;
    let (server, protocols) = Server::peer(bin)?;
    report.protocols = protocols;
    let needs_delta = (0..n).any(plan.is_delta);
    let needs_sotw = (0..n).any(|i| !(plan.is_delta)(i));
    for (needed, protocol) in [(needs_delta, "delta"), (needs_sotw, "sotw")] {
        if needed && !report.protocols.iter().any(|p| p == protocol) {
            report.note = Some(format!(
                "no {protocol}: the library does not serve it (serves {})",
                report.protocols.join(", ")
            ));
            return Ok(());
        }
    }
    let mut control = Control::connect(server.control.context("a peer has a control port")?)?;
    let mut versions = [0; 4];
    let nodes = (0..n).map(node_id).collect();
    control.send_blocking(&update(None, plan.initial, &mut versions, nodes))?;
    report.rss_idle_bytes = server.rss();

    eprintln!("peer {}: storm…", report.name);
    let probe = Probe::new();
    let cache = Arc::new(proxy::NameCache::default());
    let chans = channels(server.xds, plan.connections).await?;
    let mut tasks = JoinSet::new();
    let t0 = Instant::now();
    spawn_clients(&mut tasks, &chans, n, plan.per_connection, |ch, i| {
        proxy::run(
            ch,
            i,
            ((plan.is_delta)(i), false),
            Arc::clone(&probe),
            Arc::clone(&cache),
            None,
        )
    });
    let last = wait_until(
        "peer storm",
        n,
        &probe,
        Probe::synced_count,
        crate::PHASE_LIMIT,
    )
    .await?
    .context("the storm never synced every proxy")?;
    report.storm_s = Some(last.saturating_duration_since(t0).as_secs_f64());
    tokio::time::sleep(Duration::from_millis(500)).await;
    report.rss_per_client_bytes =
        Some(server.rss().saturating_sub(report.rss_idle_bytes) as f64 / n as f64);
    report.config_bytes_per_client = probe.synced_bytes();

    let mut prev = plan.initial;
    let mut epoch = 0;
    let mut kinds: Vec<(&'static str, Vec<Duration>, f64, Option<String>)> = Vec::new();
    for step in plan.steps {
        epoch += 1;
        if kinds.last().is_none_or(|k| k.0 != step.kind) {
            kinds.push((step.kind, Vec::new(), 0.0, None));
        }
        let Some(kind) = kinds.last_mut() else {
            continue;
        };
        let cpu0 = server.cpu();
        let t = probe.arm(epoch, step.marker.clone());
        control.send_blocking(&update(Some(prev), &step.state, &mut versions, Vec::new()))?;
        prev = &step.state;
        if kind.3.is_some() {
            // It did not push this kind before: keep its state in step, measure no more.
            tokio::time::sleep(SETTLE).await;
            continue;
        }
        match wait_until(step.kind, n, &probe, Probe::seen, plan.change_limit).await? {
            Some(last) => kind.1.push(last.saturating_duration_since(t)),
            None => {
                let of_kind = plan.steps.iter().filter(|s| s.kind == step.kind).count();
                kind.3 = Some(format!(
                    "no push: change {} of {of_kind} reached {}/{n} proxies in {:?}",
                    kind.1.len() + 1,
                    probe.seen().0,
                    plan.change_limit
                ));
                eprintln!(
                    "\r  {}: {}",
                    step.kind,
                    kind.3.as_deref().unwrap_or_default()
                );
                continue;
            }
        }
        tokio::time::sleep(SETTLE).await;
        kind.2 += server.cpu() - cpu0;
    }
    report.changes = kinds
        .into_iter()
        .map(|(change, samples, cpu, note)| PeerChange {
            change,
            convergence: (!samples.is_empty()).then(|| Stats::of(&samples)),
            server_cpu_s: cpu / samples.len().max(1) as f64,
            note,
        })
        .collect();
    let failed = probe.failed.load(std::sync::atomic::Ordering::SeqCst);
    if failed > 0 {
        report.note = Some(format!("failed: {failed} streams"));
    }
    tasks.abort_all();
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use bytes::Bytes;

    use super::*;

    fn state(eds: &[(&str, &str)]) -> Recorded {
        let mut s = Recorded::default();
        s[0].insert("c".into(), Bytes::from_static(b"cluster"));
        for (name, value) in eds {
            s[1].insert((*name).into(), Bytes::copy_from_slice(value.as_bytes()));
        }
        s
    }

    #[test]
    fn updates_carry_only_the_types_that_changed_under_new_versions() {
        let mut versions = [0; 4];
        let a = state(&[("c", "v1")]);
        let first = update(None, &a, &mut versions, vec!["load-0".into()]);
        assert_eq!(first.nodes, ["load-0"]);
        assert_eq!(first.types.len(), 4, "the first update sets every type");
        let b = state(&[("c", "v2")]);
        let next = update(Some(&a), &b, &mut versions, Vec::new());
        assert_eq!(next.types.len(), 1);
        assert_eq!(next.types[0].type_url, TYPES[1]);
        assert_eq!(next.types[0].version, "2");
        assert_eq!(next.types[0].resources[0].value, b"v2");
        assert!(
            update(Some(&b), &b, &mut versions, Vec::new())
                .types
                .is_empty()
        );
        // the frame round-trips through the shared control protocol
        let mut buf = Vec::new();
        control::write_frame(&mut buf, &next.encode_to_vec()).unwrap();
        let back = control::read_frame(&mut buf.as_slice()).unwrap().unwrap();
        assert_eq!(control::Update::decode(back.as_slice()).unwrap(), next);
    }
}
