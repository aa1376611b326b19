//! `tributary-load`: how fast a registry change reaches every proxy, what a proxy costs, and how far
//! that is from the floor of this machine.
//!
//! One run: start tributary (a child process, so its RSS and CPU are its own) on an empty mock
//! registry; write the mesh through the control API; connect N simulated proxies at once (the
//! cold-start storm); then make endpoint changes, service additions and deletions and time each
//! until the last proxy has received and acknowledged it. With `--peers`, each peer control plane
//! (`peer.rs`) is then given the same resources and changes and measured with the same clients.
//! Then the same N clients against the floor server (`floor.rs`) with the same bytes: the storm,
//! and each change replayed as tributary sent it (`replay.rs`). Prints one table (tributary, the
//! floor and each peer per measure) and, with `--json`, one JSON line with the goals (`goals.rs`),
//! which `tributary-load check` verifies.

mod floor;
mod goals;
mod mesh;
mod peer;
mod probe;
mod process;
mod proxy;
mod recorder;
mod replay;
mod report;
mod wire;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use tokio::task::JoinSet;
use tonic::transport::{Channel, Endpoint};

use mesh::{Control, MeshSpec};
use probe::{Marker, Probe};
use process::Server;
use recorder::Recorder;
use report::{ChangeResult, Report, Stats};

/// How long one phase may take before the run gives up on it.
const PHASE_LIMIT: Duration = Duration::from_secs(600);
/// Quiet time after a change before the next: no response reached any proxy for this long.
const SETTLE: Duration = Duration::from_millis(300);
/// How often progress is printed while waiting.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// HTTP/2 windows of the simulated proxies: Envoy's defaults (256 MiB per connection, 16 MiB
/// per stream are the orders of magnitude it uses), so flow control is not what is measured.
const CONNECTION_WINDOW: u32 = 256 * 1024 * 1024;
const STREAM_WINDOW: u32 = 16 * 1024 * 1024;

#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure tributary against the floor.
    Run(RunArgs),
    /// (internal) Serve the floor; prints `listening ADDR`.
    #[command(hide = true)]
    Floor {
        #[arg(long, default_value = "127.0.0.1:0")]
        addr: SocketAddr,
        #[arg(long)]
        delta: bool,
        /// The storm and the changes to replay, in order (written by `run`).
        #[arg(long)]
        replay: PathBuf,
    },
    /// Check one run's JSON line (`run --json`) against the goals; exit 1 if any is missed, 2 if
    /// the file holds no run report.
    Check {
        /// The file holding the JSON line (`-` for standard input).
        json: PathBuf,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    Sotw,
    Delta,
    /// Half SotW, half delta.
    Mix,
}

#[derive(Parser, Clone)]
struct RunArgs {
    /// Mesh preset: tiny (10×1×2), small (100×1×5), medium (1,000×2×10), large (10,000×2×10).
    #[arg(long, default_value = "small")]
    preset: String,
    /// Override the preset's number of services.
    #[arg(long)]
    services: Option<usize>,
    /// Simulated proxies.
    #[arg(long, default_value_t = 1000)]
    clients: usize,
    /// Proxies per HTTP/2 connection (fleets behind a shared connection pool; 1 = one each).
    #[arg(long, default_value_t = 100)]
    per_connection: usize,
    #[arg(long, value_enum, default_value = "sotw")]
    mode: Mode,
    /// Delta clients take their virtual hosts over VHDS (node metadata `TRIBUTARY_VHDS`), as
    /// `tributary bootstrap --delta --vhds` makes Envoy do.
    #[arg(long)]
    vhds: bool,
    /// Changes of each kind to time.
    #[arg(long, default_value_t = 5)]
    changes: usize,
    /// tributary's `debounce` settings, as YAML flow.
    #[arg(
        long,
        default_value = "{debounce_after: 100ms, debounce_max: 10s, endpoint_debounce_after: 0s}"
    )]
    debounce: String,
    /// tributary's `connections` settings, as YAML flow. Every simulated proxy connects from
    /// 127.0.0.1, standing for a fleet of many hosts, so the per-peer connection limit is off.
    /// Keepalive is tributary's default (`docs/floor.md`, "Large meshes").
    #[arg(long, default_value = "{max_connections_per_peer: 0}")]
    connections: String,
    /// The tributary binary (default: next to this one).
    #[arg(long)]
    tributary: Option<PathBuf>,
    /// Also print the report as one JSON line.
    #[arg(long)]
    json: bool,
    /// Peer control planes to measure in the same run, comma-separated (built with cargo from
    /// `load/peers/<name>/` first).
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(peer::PEERS))]
    peers: Vec<String>,
    /// Seconds a change may take to reach every proxy of a peer before the peer is reported as not
    /// pushing that kind of change.
    #[arg(long, default_value_t = 60)]
    peer_change_limit_secs: u64,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Check { json } => match goals::check_file(&json) {
            Ok(true) => Ok(()),
            Ok(false) => std::process::exit(1),
            Err(e) => {
                eprintln!("tributary-load check: {e}");
                std::process::exit(2)
            }
        },
        Command::Floor {
            addr,
            delta,
            replay,
        } => {
            let pushes = replay::read(&replay)?;
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(floor::serve(addr, delta, &pushes))
        }
        Command::Run(args) => {
            let rt = tokio::runtime::Runtime::new()?;
            let report = rt.block_on(run(args.clone()))?;
            report.print_table();
            if args.json {
                report.print_json();
            }
            Ok(())
        }
    }
}

async fn channels(addr: SocketAddr, n: usize) -> anyhow::Result<Vec<Channel>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let ch = Endpoint::from_shared(format!("http://{addr}"))?
            .initial_connection_window_size(CONNECTION_WINDOW)
            .initial_stream_window_size(STREAM_WINDOW)
            .tcp_nodelay(true)
            .connect()
            .await?;
        out.push(ch);
    }
    Ok(out)
}

/// Waits until `count()` reaches `n`; prints progress. Returns when the last one arrived.
async fn wait_for(
    what: &str,
    n: usize,
    probe: &Probe,
    count: impl Fn(&Probe) -> (usize, Instant),
) -> anyhow::Result<Instant> {
    wait_until(what, n, probe, &count, PHASE_LIMIT)
        .await?
        .ok_or_else(|| anyhow::anyhow!("{what}: only {}/{n} after {PHASE_LIMIT:?}", count(probe).0))
}

/// [`wait_for`] for at most `limit`: `None` if `count()` had not reached `n` by then. A failed
/// stream is an error.
async fn wait_until(
    what: &str,
    n: usize,
    probe: &Probe,
    count: impl Fn(&Probe) -> (usize, Instant),
    limit: Duration,
) -> anyhow::Result<Option<Instant>> {
    let deadline = Instant::now() + limit;
    let mut next_print = Instant::now() + PROGRESS_EVERY;
    loop {
        let (k, last) = count(probe);
        if k >= n {
            return Ok(Some(last));
        }
        let failed = probe.failed.load(std::sync::atomic::Ordering::SeqCst);
        if failed > 0 {
            let first = probe
                .first_error
                .read()
                .map(|e| e.clone())
                .unwrap_or_default();
            anyhow::bail!("{failed} streams failed while waiting for {what}: {first:?}");
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        if Instant::now() >= next_print {
            eprint!("\r  {what}: {k}/{n}   ");
            next_print += PROGRESS_EVERY;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until no proxy has received a response for [`SETTLE`]: the rest of a change (the
/// EDS and route configurations that follow the response carrying it) belongs to that change, in
/// its trace for the floor and in its counts, not to the next one. At most [`PHASE_LIMIT`].
async fn settle(probe: &Probe) {
    let deadline = Instant::now() + PHASE_LIMIT;
    let total = || probe.responses().iter().sum::<u64>();
    let mut before = total();
    loop {
        tokio::time::sleep(SETTLE).await;
        let now = total();
        if now == before || Instant::now() >= deadline {
            return;
        }
        before = now;
    }
}

/// Spawns `n` clients over `chans`, `per` to a connection.
fn spawn_clients<F, Fut>(tasks: &mut JoinSet<()>, chans: &[Channel], n: usize, per: usize, f: F)
where
    F: Fn(Channel, usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    for i in 0..n {
        tasks.spawn(f(chans[i / per].clone(), i));
    }
}

async fn run(args: RunArgs) -> anyhow::Result<Report> {
    let started = Instant::now();
    let mut spec = MeshSpec::preset(&args.preset)?;
    if let Some(s) = args.services {
        spec.services = s;
    }
    let n = args.clients;
    let per = args.per_connection.max(1);
    let conns = n.div_ceil(per);
    let is_delta = |i: usize| match args.mode {
        Mode::Sotw => false,
        Mode::Delta => true,
        Mode::Mix => i % 2 == 1,
    };
    let dir = std::env::temp_dir().join(format!("tributary-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let bin = process::tributary_bin(args.tributary.as_deref())?;
    let peer_bins = peer::build(&args.peers)?;
    let server = Server::tributary(&bin, &dir, &args.debounce, &args.connections)?;
    let control_addr =
        anyhow::Context::context(server.control, "tributary serves the control API")?;
    let control = Control::connect(control_addr).await?;
    eprintln!("generating mesh {spec}…");
    control.generate(&spec).await?;
    let deadline = Instant::now() + PHASE_LIMIT;
    while server.metric("pilot_services") != Some(spec.services as f64) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the mesh never reached {} services",
            spec.services
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rss_idle = server.rss();

    // Cold-start storm: every client at once.
    let probe = Probe::new();
    let cache = Arc::new(proxy::NameCache::default());
    // The first proxy records what tributary serves: the peers are given the same resources.
    let recorder = Arc::new(Recorder::default());
    let chans = channels(server.xds, conns).await?;
    let mut tasks = JoinSet::new();
    recorder.start_trace();
    let t0 = Instant::now();
    spawn_clients(&mut tasks, &chans, n, per, |ch, i| {
        proxy::run(
            ch,
            i,
            (is_delta(i), args.vhds),
            Arc::clone(&probe),
            Arc::clone(&cache),
            (i == 0).then(|| Arc::clone(&recorder)),
        )
    });
    let last = wait_for("storm: proxies synced", n, &probe, Probe::synced_count).await?;
    let storm = last.saturating_duration_since(t0);
    let storm_replay = replay::Push::storm(recorder.take_trace())?;
    eprintln!("\r  storm: {n} proxies synced in {storm:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_per_client = (server.rss().saturating_sub(rss_idle)) as f64 / n as f64;
    let config_bytes = probe.synced_bytes();
    let initial = recorder.snapshot();
    let mut steps = Vec::new();

    // Changes, each traced by the first proxy for the floor to replay.
    let mut epoch = 0;
    let mut results = Vec::new();
    let mut pushes = Vec::new();
    for kind in ["endpoint", "new service", "delete service"] {
        let mut samples = Vec::new();
        let mut cpu = 0.0;
        let mut responses = [0u64; 4];
        let mut push_bytes = 0;
        let mut bytes_per_client = 0;
        for k in 0..args.changes {
            epoch += 1;
            let extra = spec.services + k;
            let marker = match kind {
                "endpoint" => Marker::Carries {
                    type_url: wire::EDS,
                    name: MeshSpec::cluster(k % spec.services),
                },
                // A service is reached when it is routable: its route, not its cluster.
                "new service" => Marker::Routable {
                    host: MeshSpec::hostname(extra),
                },
                _ => Marker::Unroutable {
                    host: MeshSpec::hostname(extra),
                },
            };
            let cpu0 = server.cpu();
            recorder.start_trace();
            let t = probe.arm(epoch, marker.clone());
            match kind {
                "endpoint" => {
                    control
                        .change_endpoints(&spec, k % spec.services, epoch as u32)
                        .await?
                }
                "new service" => control.add_service(&spec, extra).await?,
                _ => control.delete_service(extra).await?,
            }
            let last = wait_for(kind, n, &probe, Probe::seen).await?;
            samples.push(last.saturating_duration_since(t));
            // let stragglers (other types of the same push) arrive before the next change
            settle(&probe).await;
            cpu += server.cpu() - cpu0;
            let push = replay::Push::from_trace(kind, recorder.take_trace())?;
            bytes_per_client += push.response_bytes();
            pushes.push(push);
            steps.push(peer::Step {
                kind,
                marker,
                state: recorder.snapshot(),
            });
            let r = probe.responses();
            for (a, b) in responses.iter_mut().zip(r) {
                *a += b;
            }
            push_bytes = probe.marker_bytes();
        }
        let convergence = Stats::of(&samples);
        eprintln!("\r  {kind}: p50 {:.1} ms", convergence.p50_ms);
        results.push(ChangeResult {
            change: kind,
            convergence,
            server_cpu_s: cpu / args.changes.max(1) as f64,
            responses,
            push_bytes,
            bytes_per_client: bytes_per_client / args.changes.max(1),
            ..Default::default()
        });
    }
    let failed = probe.failed.load(std::sync::atomic::Ordering::SeqCst);
    tasks.abort_all();
    drop(chans);
    drop(server);

    // The peers, same clients, same resources, same changes.
    let plan = peer::Plan {
        clients: n,
        per_connection: per,
        connections: conns,
        is_delta: &is_delta,
        initial: &initial,
        steps: &steps,
        change_limit: Duration::from_secs(args.peer_change_limit_secs),
    };
    let mut peers = Vec::new();
    for (name, bin) in &peer_bins {
        peers.push(peer::measure(name, bin, &plan).await);
    }

    // The floor, same clients, same bytes: the storm, then every change as tributary sent it,
    // answered with the same requests (a SotW proxy's EDS ACKs repeat every cluster name).
    let floor_ack_bytes = storm_replay.reply_bytes();
    let floor = floor::measure(
        &floor::FloorSetup {
            delta: args.mode == Mode::Delta,
            clients: n,
            per_connection: per,
            connections: conns,
            is_delta: &is_delta,
            dir: &dir,
        },
        storm_replay,
        pushes,
    )
    .await?;
    for c in &mut results {
        if let Some(f) = floor.changes.iter().find(|f| f.kind == c.change) {
            c.floor = Some(f.convergence);
            c.floor_responses = f.responses;
            c.floor_server_cpu_s = Some(f.server_cpu_s);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);

    Ok(Report {
        mesh: spec.to_string(),
        clients: n,
        connections: conns,
        mode: match args.mode {
            Mode::Sotw => "sotw",
            Mode::Delta if args.vhds => "delta+vhds",
            Mode::Delta => "delta",
            Mode::Mix if args.vhds => "mix+vhds",
            Mode::Mix => "mix",
        }
        .into(),
        debounce: args.debounce.clone(),
        storm_s: storm.as_secs_f64(),
        storm_floor_s: floor.storm_s,
        config_bytes_per_client: config_bytes,
        rss_idle_bytes: rss_idle,
        rss_per_client_bytes: rss_per_client,
        floor_rss_per_client_bytes: floor.rss_per_client_bytes,
        changes: results,
        floor_ack_bytes,
        peers,
        load_tool_cpu_s: process::own_cpu(),
        wall_s: started.elapsed().as_secs_f64(),
        failed_streams: failed,
    })
}
