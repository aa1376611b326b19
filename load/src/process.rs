//! The server under test as a child process: tributary, a peer or the floor, with its RSS and CPU time read
//! from `/proc`, so the load tool's own work is never counted against it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// Linux's USER_HZ: `/proc/<pid>/stat` times are in these ticks.
const TICKS_PER_SECOND: f64 = 100.0;
/// How long a server may take to start and become ready.
const START_LIMIT: Duration = Duration::from_secs(60);

/// A child process killed on drop.
pub(crate) struct Server {
    child: Child,
    pub xds: SocketAddr,
    pub admin: Option<SocketAddr>,
    /// The mock control API (tributary only).
    pub control: Option<SocketAddr>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// The `tributary` binary: `explicit`, else next to this executable.
pub(crate) fn tributary_bin(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p.to_owned());
    }
    let me = std::env::current_exe()?;
    let sibling = me.with_file_name("tributary");
    anyhow::ensure!(
        sibling.exists(),
        "no tributary binary next to {} (build it with `cargo build --release`, or pass --tributary)",
        me.display()
    );
    Ok(sibling)
}

/// Builds peer `name`'s server with cargo (release, its own workspace and `Cargo.lock` under
/// `load/peers/<name>/`, into `target/peers/`) and returns the binary. Cargo makes it a no-op when
/// nothing changed.
pub(crate) fn peer_bin(name: &str) -> anyhow::Result<PathBuf> {
    let load_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = load_dir.join("peers").join(name).join("Cargo.toml");
    anyhow::ensure!(
        manifest.exists(),
        "no peer crate at {} (this tool finds its peers in its source tree)",
        manifest.display()
    );
    let target = load_dir
        .parent()
        .context("the load crate sits in the repository")?
        .join("target")
        .join("peers");
    #[allow(
        clippy::disallowed_methods,
        reason = "the cargo that runs this tool builds its peers; the load tool is its own edge"
    )]
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("building peer {name}…");
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--locked",
            "--quiet",
            "--manifest-path",
        ])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .status()
        .context("running cargo to build the peer")?;
    anyhow::ensure!(
        status.success(),
        "building peer {name} failed ({status}); rust-control-plane's protos need `protoc` \
         (Debian: apt-get install protobuf-compiler)"
    );
    Ok(target.join("release").join(format!("peer-{name}")))
}

impl Server {
    /// Starts tributary serving an (initially empty) mock registry with the given debounce, and
    /// waits until it is ready. `connections_yaml` is its `connections` settings (the run turns the
    /// per-peer connection limit off: every simulated proxy connects from 127.0.0.1).
    #[allow(
        clippy::disallowed_methods,
        reason = "a blocking wait in the load tool's synchronous driver, on no runtime"
    )]
    pub(crate) fn tributary(
        bin: &Path,
        dir: &Path,
        debounce_yaml: &str,
        connections_yaml: &str,
    ) -> anyhow::Result<Self> {
        let (xds, admin, control) = (free_addr()?, free_addr()?, free_addr()?);
        let mesh = dir.join("mesh.yaml");
        std::fs::write(&mesh, "services: []\n")?;
        let config = dir.join("tributary.yaml");
        std::fs::write(
            &config,
            format!(
                "xds_addr: {xds}\nadmin_addr: {admin}\ncontrol_api: {{addr: {control}}}\nconnections: {connections_yaml}\nregistries:\n  - type: mock\n    name: load\n    file: {}\ndebounce: {debounce_yaml}\n",
                mesh.display()
            ),
        )?;
        let child = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let server = Server {
            child,
            xds,
            admin: Some(admin),
            control: Some(control),
        };
        let deadline = Instant::now() + START_LIMIT;
        while server.get("/ready").map(|(s, _)| s) != Some(200) {
            anyhow::ensure!(Instant::now() < deadline, "tributary did not become ready");
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(server)
    }

    /// Starts the floor server (this executable's `floor` subcommand) with the storm and the
    /// changes to replay in the file at `replay` (`replay.rs`).
    pub(crate) fn floor(delta: bool, replay: &Path) -> anyhow::Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["floor", "--replay"])
            .arg(replay)
            .args(if delta { &["--delta"][..] } else { &[][..] })
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().context("floor stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let xds = line
            .trim()
            .strip_prefix("listening ")
            .context("floor did not say where it listens")?
            .parse()?;
        Ok(Server {
            child,
            xds,
            admin: None,
            control: None,
        })
    }

    /// Starts a peer server (`load/peers/<name>/`, built by [`peer_bin`]) and waits until its ADS
    /// port accepts connections. Returns it with the protocols it serves (`sotw`, `delta`), which
    /// it prints first; `control` is its control-protocol address (`load/peers/control.rs`).
    pub(crate) fn peer(bin: &Path) -> anyhow::Result<(Self, Vec<String>)> {
        let (xds, control) = (free_addr()?, free_addr()?);
        let mut child = Command::new(bin)
            .arg("--xds")
            .arg(xds.to_string())
            .arg("--control")
            .arg(control.to_string())
            .env("RUST_LOG", "warn")
            // rust-control-plane's stream tasks panic when a client goes away: one line, no trace
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let stdout = child.stdout.take().context("peer stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let server = Server {
            child,
            xds,
            admin: None,
            control: Some(control),
        };
        let protocols = line
            .trim()
            .strip_prefix("protocols=")
            .with_context(|| format!("{} did not say what it serves", bin.display()))?
            .split(',')
            .map(str::to_owned)
            .collect();
        let deadline = Instant::now() + START_LIMIT;
        while TcpStream::connect_timeout(&xds, Duration::from_secs(2)).is_err() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} does not accept connections on {xds}",
                bin.display()
            );
            #[allow(
                clippy::disallowed_methods,
                reason = "a blocking wait in the load tool's synchronous driver, on no runtime"
            )]
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok((server, protocols))
    }

    /// A plain HTTP GET on the admin port: (status, body).
    pub(crate) fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut s = TcpStream::connect_timeout(&self.admin?, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
        Some((status, body))
    }

    /// A gauge or counter from `/metrics` (first sample of `name`).
    pub(crate) fn metric(&self, name: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics")?;
        body.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    /// Resident memory, bytes.
    pub(crate) fn rss(&self) -> u64 {
        rss_of(&format!("/proc/{}/status", self.child.id()))
    }

    /// User + system CPU seconds so far.
    pub(crate) fn cpu(&self) -> f64 {
        cpu_of(&format!("/proc/{}/stat", self.child.id()))
    }
}

fn rss_of(path: &str) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn cpu_of(path: &str) -> f64 {
    let Ok(s) = std::fs::read_to_string(path) else {
        return 0.0;
    };
    // Fields after the command (which may contain spaces) start after the last ')'.
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the command.
    let ticks: f64 = f.get(11..13).map_or(0.0, |t| {
        t.iter().filter_map(|v| v.parse::<f64>().ok()).sum()
    });
    ticks / TICKS_PER_SECOND
}

/// This process's CPU seconds (the load tool's own cost).
pub(crate) fn own_cpu() -> f64 {
    cpu_of("/proc/self/stat")
}
