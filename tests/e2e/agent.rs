//! `tributary agent` end to end (rules AGENT-* in docs/agent.md): the agent as the built binary,
//! supervising a real Envoy that gets its config from a real tributary, with real traffic.
//! Envoy missing is a failure, never a skip. Drain and parent-shutdown times are short (1-2 s)
//! so every test ends in seconds; each agent has its own `--base-id` so hot restarts of parallel
//! tests do not meet in shared memory.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tributary_registries::consul::fake::FakeConsul;

use crate::support::harness::{
    Backend, Envoy, Tributary, envoy_bin, eventually, free_port, http_get, loopback, mesh,
    tributary_bin, wait_for_backend,
};
use crate::support::pki;

const HOST: &str = "web.e2e.local";
const LIMIT: Duration = Duration::from_secs(20);

/// A `tributary agent` process, killed on drop.
struct Agent {
    child: Child,
    base_id: u16,
    log: PathBuf,
    status: SocketAddr,
    admin: SocketAddr,
}

impl Agent {
    /// Starts the agent against `xds` with short drain times, plus `extra` flags.
    fn start(dir: &Path, name: &str, xds: SocketAddr, extra: &[&str]) -> Agent {
        let status = loopback(free_port());
        let admin_port = free_port();
        let log = dir.join(format!("agent-{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let err = out.try_clone().unwrap();
        let envoy = envoy_bin().display().to_string();
        let base_id = admin_port.to_string();
        // Defaults a test may override through `extra` (clap refuses a flag given twice).
        let defaults = [
            ("--drain-time", "1s"),
            ("--parent-shutdown-time", "2s"),
            // Unique per test process and agent, as the port numbers are.
            ("--base-id", base_id.as_str()),
            ("--listener-address", "127.0.0.1"),
            ("--ip", "127.0.0.1"),
            ("--log-level", "info"),
            ("--envoy", envoy.as_str()),
        ];
        let mut cmd = Command::new(tributary_bin());
        cmd.arg("agent")
            .args(["--xds-addr", &xds.to_string()])
            .args(["--status-addr", &status.to_string()])
            .args(["--envoy-admin-port", &admin_port.to_string()])
            .arg("--config-dir")
            .arg(dir.join(name));
        for (flag, value) in defaults {
            if !extra.contains(&flag) {
                cmd.args([flag, value]);
            }
        }
        let child = cmd
            .args(extra)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("tributary agent starts");
        Agent {
            child,
            base_id: admin_port,
            log,
            status,
            admin: loopback(admin_port),
        }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn tail(&self) -> String {
        let text = self.output();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// `/healthz/ready`'s status (None: no answer).
    async fn ready(&self) -> Option<u16> {
        http_get(self.status, "localhost", "/healthz/ready")
            .await
            .map(|(s, _)| s)
    }

    async fn wait_ready(&self) {
        let start = Instant::now();
        while self.ready().await != Some(200) {
            assert!(
                start.elapsed() < LIMIT,
                "agent not ready after {LIMIT:?}:\n{}",
                self.tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// One of the agent's own metrics.
    async fn metric(&self, name: &str) -> Option<f64> {
        let (_, body) = http_get(self.status, "localhost", "/stats/prometheus").await?;
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
    }

    /// The processes the agent started (its Envoys), from /proc.
    fn envoy_pids(&self) -> Vec<u32> {
        let pid = self.child.id();
        let mut out = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            out.extend(
                children
                    .split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
        out.sort();
        out.dedup();
        out
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    }

    /// Waits up to `limit` for the agent to exit.
    fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "agent still running after {limit:?}:\n{}",
                self.tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    async fn restart_epoch(&self) -> Option<u64> {
        let (_, body) = http_get(self.admin, "localhost", "/server_info").await?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["command_line_options"]["restart_epoch"].as_u64()
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        for pid in self.envoy_pids() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Envoy leaves its hot-restart shared memory behind (named after --base-id).
        let _ = std::fs::remove_file(format!(
            "/dev/shm/envoy_shared_memory_{}",
            u32::from(self.base_id) * 10
        ));
    }
}

fn kill9(pid: u32) {
    assert!(
        Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
}

/// A mock mesh with `web.e2e.local` on a free port whose endpoint is `backend`; its listener.
fn write_mesh(dir: &Path, backend: SocketAddr) -> (PathBuf, SocketAddr) {
    let port = free_port();
    let path = dir.join("mesh.yaml");
    std::fs::write(&path, mesh(port, &[backend])).unwrap();
    (path, loopback(port))
}

async fn tributary_on(dir: &Path, xds: SocketAddr, mesh: &Path) -> Tributary {
    Tributary::start(
        dir,
        xds,
        loopback(free_port()),
        &["--mock-file", mesh.to_str().unwrap()],
    )
    .await
}

// AGENT-5: /healthz/ready is 503 while Envoy has no config (tributary not up yet) and 200 once it
// has its first CDS and LDS. AGENT-2: Envoy killed with SIGKILL is started again within the
// budget, and traffic through it works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_only_after_first_config_and_a_killed_envoy_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let backend = Backend::start("web-1").await;
    let (mesh, listener) = write_mesh(d, backend.addr);
    let xds = loopback(free_port());
    let agent = Agent::start(d, "a", xds, &["--restart-budget", "2"]);

    // Envoy runs (its admin answers) but has no config: not ready, for as long as we look.
    eventually(LIMIT, "Envoy's admin", || async {
        http_get(agent.admin, "localhost", "/ready")
            .await
            .map(|_| ())
    })
    .await;
    for _ in 0..10 {
        assert_eq!(agent.ready().await, Some(503), "{}", agent.tail());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _t = tributary_on(d, xds, &mesh).await;
    agent.wait_ready().await;
    wait_for_backend(listener, HOST, "web-1", LIMIT).await;

    let before = agent.envoy_pids();
    assert_eq!(before.len(), 1, "one Envoy: {before:?}");
    kill9(before[0]);
    let after = eventually(LIMIT, "a new Envoy", || async {
        let now = agent.envoy_pids();
        (now.len() == 1 && now != before).then_some(now)
    })
    .await;
    assert_ne!(after, before);
    agent.wait_ready().await;
    wait_for_backend(listener, HOST, "web-1", LIMIT).await;
    assert_eq!(
        agent.metric("tributary_agent_envoy_restarts_total").await,
        Some(1.0)
    );
    // AGENT-5: Envoy's own Prometheus stats come first.
    let (_, prom) = http_get(agent.status, "localhost", "/stats/prometheus")
        .await
        .unwrap();
    assert!(prom.contains("envoy_server_live"), "{prom}");
    // AGENT-1: the bootstrap Envoy runs on.
    let rev0 = std::fs::read_to_string(d.join("a").join("envoy-rev0.json")).unwrap();
    let b: serde_json::Value = serde_json::from_str(&rev0).unwrap();
    assert_eq!(
        b["node"]["id"],
        "sidecar~127.0.0.1~vm.default~default.svc.cluster.local"
    );
    assert_eq!(b["node"]["metadata"]["INSTANCE_IPS"], "127.0.0.1");
    assert_eq!(b["static_resources"]["clusters"][0]["name"], "xds-grpc");
    assert_eq!(
        b["dynamic_resources"]["ads_config"]["api_type"],
        "DELTA_GRPC"
    );
}

// AGENT-2: an Envoy that fails at once every time is started 1 + budget times, then the agent
// exits non-zero with Envoy's own error in its output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_envoy_that_always_crashes_spends_exactly_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (script, starts) = fake_envoy(
        d,
        "echo 'critical: error initializing configuration: bogus listener (crash test)' >&2\nexit 1",
    );
    let mut agent = Agent::start(
        d,
        "crash",
        loopback(free_port()),
        &[
            "--restart-budget",
            "3",
            "--restart-initial-delay",
            "10ms",
            "--envoy",
            script.to_str().unwrap(),
        ],
    );
    let status = agent.wait_exit(LIMIT);
    assert!(!status.success(), "{status}");
    let count = std::fs::read_to_string(&starts).unwrap().lines().count();
    assert_eq!(count, 4, "the first start and exactly 3 restarts");
    let out = agent.output();
    assert!(out.contains("restart budget of 3 spent"), "{out}");
    assert!(out.contains("bogus listener (crash test)"), "{out}");
}

// AGENT-2: Envoy exiting with status 0 ends the agent with status 0, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_envoy_exit_ends_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (script, starts) = fake_envoy(d, "exit 0");
    let mut agent = Agent::start(
        d,
        "clean",
        loopback(free_port()),
        &["--envoy", script.to_str().unwrap()],
    );
    let status = agent.wait_exit(LIMIT);
    assert!(status.success(), "{status}:\n{}", agent.tail());
    let count = std::fs::read_to_string(&starts).unwrap().lines().count();
    assert_eq!(count, 1, "no restart after a clean exit");
}

/// Writes `text` to `path` and makes it executable.
fn write_executable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    Command::new("chmod").arg("+x").arg(path).status().unwrap();
}

/// A stand-in for Envoy in `d`: a script that appends a line to the returned `starts` file each
/// time it runs, then runs the shell lines `then`. Returns (script, starts).
fn fake_envoy(d: &Path, then: &str) -> (PathBuf, PathBuf) {
    let starts = d.join("starts");
    let script = d.join("envoy.sh");
    write_executable(
        &script,
        &format!("#!/bin/sh\necho start >> {}\n{then}\n", starts.display()),
    );
    (script, starts)
}

/// Requests through `listener` every 10 ms until `stop`; counts (ok, failed).
fn traffic(listener: SocketAddr, stop: Arc<AtomicU64>) -> tokio::task::JoinHandle<(u64, u64)> {
    tokio::spawn(async move {
        let (mut ok, mut failed) = (0, 0);
        while stop.load(Ordering::SeqCst) == 0 {
            match http_get(listener, HOST, "/").await {
                Some((200, _)) => ok += 1,
                other => {
                    failed += 1;
                    eprintln!("failed request: {other:?}");
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (ok, failed)
    })
}

// AGENT-3: a rotated client certificate makes the agent hot-restart Envoy (epoch 1) while
// requests flow every 10 ms: none fails, and the parent is gone after the parent-shutdown time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotation_hot_restarts_without_a_failed_request() {
    rotate_certificates(Rotation::Hot).await;
}

// AGENT-3: without hot restart the rotation drains the Envoy and starts a new one at epoch 0;
// traffic works again after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotation_without_hot_restart_drains_then_restarts() {
    rotate_certificates(Rotation::Cold).await;
}

// AGENT-3: where hot restart fails (here an Envoy wrapper that refuses epoch 1, as an Envoy denied
// shared memory would), the agent says so and falls back to drain-then-restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rotation_falls_back_when_hot_restart_fails() {
    rotate_certificates(Rotation::HotUnavailable).await;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rotation {
    Hot,
    Cold,
    HotUnavailable,
}

async fn rotate_certificates(mode: Rotation) {
    let hot = mode == Rotation::Hot;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = pki::Ca::new("mesh root");
    let spiffe = "spiffe://cluster.local/ns/shop/sa/cart";
    let tls_addr = loopback(free_port());
    let config_path = ca.write_tls_config(d, tls_addr);
    let backend = Backend::start("web-1").await;
    let port = free_port();
    let listener = loopback(port);
    let config = ["--config", config_path.to_str().unwrap()];
    let (_t, _) = Tributary::on_mesh(d, &mesh(port, &[backend.addr]), &config).await;
    let certs = d.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    let leaf = ca.client(spiffe);
    let cert = pki::write(&certs, "cert.pem", &leaf.cert);
    let key = pki::write(&certs, "key.pem", &leaf.key);
    let ca_path = d.join("ca.crt");
    let wrapper = d.join("envoy-no-hot-restart.sh");
    write_executable(
        &wrapper,
        &format!(
            "#!/bin/sh\ncase \" $* \" in *\" --restart-epoch 1 \"*)\n  echo 'cannot open shared memory region for hot restart (simulated)' >&2; exit 1;;\nesac\nexec {} \"$@\"\n",
            envoy_bin().display()
        ),
    );
    let mut flags = vec![];
    match mode {
        Rotation::Hot => {}
        Rotation::Cold => flags.push("--no-hot-restart"),
        Rotation::HotUnavailable => flags.extend(["--envoy", wrapper.to_str().unwrap()]),
    }
    flags.extend(pki::client_tls_flags(&ca_path, &cert, &key));
    flags.extend([
        "--workload",
        "cart-1",
        "--namespace",
        "shop",
        "--ip",
        "127.0.0.1",
    ]);
    let agent = Agent::start(d, "rot", tls_addr, &flags);
    agent.wait_ready().await;
    wait_for_backend(listener, HOST, "web-1", LIMIT).await;
    assert_eq!(agent.restart_epoch().await, Some(0));
    // AGENT-1: SERVICE_ACCOUNT comes from the certificate's SPIFFE ID.
    let rev0 = std::fs::read_to_string(d.join("rot").join("envoy-rev0.json")).unwrap();
    let b: serde_json::Value = serde_json::from_str(&rev0).unwrap();
    assert_eq!(b["node"]["metadata"]["SERVICE_ACCOUNT"], "cart");
    assert_eq!(
        b["node"]["id"],
        "sidecar~127.0.0.1~cart-1.shop~shop.svc.cluster.local"
    );
    let parent = agent.envoy_pids();
    assert_eq!(parent.len(), 1);

    let stop = Arc::new(AtomicU64::new(0));
    let flow = traffic(listener, Arc::clone(&stop));
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Rotate as tools do: new files renamed over the old ones, key first.
    let next = ca.client(spiffe);
    for (path, text) in [(&key, &next.key), (&cert, &next.cert)] {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }
    if !hot {
        eventually(LIMIT, "a new Envoy after the drain", || async {
            let now = agent.envoy_pids();
            (now.len() == 1 && !now.contains(&parent[0])).then_some(())
        })
        .await;
        agent.wait_ready().await;
        wait_for_backend(listener, HOST, "web-1", LIMIT).await;
        stop.store(1, Ordering::SeqCst);
        let (ok, failed) = flow.await.unwrap();
        println!("{mode:?} drain-then-restart: {ok} requests answered, {failed} failed");
        if mode == Rotation::HotUnavailable {
            let out = agent.output();
            assert!(out.contains("hot restart failed"), "{out}");
            assert!(out.contains("for hot restart (simulated)"), "{out}");
        }
        assert_eq!(agent.restart_epoch().await, Some(0));
        assert_eq!(
            agent
                .metric("tributary_agent_envoy_cold_rotations_total")
                .await,
            Some(1.0)
        );
        return;
    }
    eventually(LIMIT, "epoch 1 serving", || async {
        (agent.restart_epoch().await == Some(1)).then_some(())
    })
    .await;
    // The parent drains (1 s) and is told to exit (2 s) by its child.
    eventually(LIMIT, "the parent gone", || async {
        let now = agent.envoy_pids();
        (now.len() == 1 && !now.contains(&parent[0])).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(1, Ordering::SeqCst);
    let (ok, failed) = flow.await.unwrap();
    println!("during the rotation: {ok} requests answered, {failed} failed");
    assert_eq!(failed, 0, "{}", agent.tail());
    assert!(ok > 50, "requests flowed: {ok}");
    assert_eq!(
        agent
            .metric("tributary_agent_envoy_hot_restarts_total")
            .await,
        Some(1.0)
    );
    assert!(std::fs::metadata(d.join("rot").join("envoy-rev1.json")).is_ok());
}

// AGENT-4: SIGTERM while requests are in flight: they complete, the agent exits 0 within the
// drain time, and the listener refuses connections afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let backend = Backend::start_slow("slow", Duration::from_millis(1500)).await;
    let (mesh, listener) = write_mesh(d, backend.addr);
    let xds = loopback(free_port());
    let _t = tributary_on(d, xds, &mesh).await;
    let mut agent = Agent::start(
        d,
        "term",
        xds,
        &["--drain-time", "5s", "--parent-shutdown-time", "6s"],
    );
    agent.wait_ready().await;
    wait_for_backend(listener, HOST, "slow", LIMIT).await;

    let in_flight: Vec<_> = (0..4)
        .map(|_| {
            tokio::spawn(async move {
                let t = Instant::now();
                let r = get_with_length(listener).await;
                eprintln!("in-flight request: {r:?} after {:?}", t.elapsed());
                r
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let signalled = Instant::now();
    agent.signal("-TERM");
    // Readiness fails at once.
    eventually(Duration::from_secs(2), "readiness failing", || async {
        (agent.ready().await != Some(200)).then_some(())
    })
    .await;
    for r in in_flight {
        let got = r.await.unwrap();
        assert_eq!(got, Some((200, "slow".to_string())), "{}", agent.output());
    }
    let status = tokio::task::spawn_blocking(move || {
        let s = agent.wait_exit(Duration::from_secs(8));
        (s, agent)
    })
    .await
    .unwrap();
    let (status, agent) = status;
    let took = signalled.elapsed();
    println!("agent exited {status} {took:?} after SIGTERM");
    assert!(status.success(), "{status}:\n{}", agent.tail());
    assert!(
        took < Duration::from_secs(5),
        "within the drain time: {took:?}"
    );
    let refused = tokio::net::TcpStream::connect(listener).await;
    assert!(
        refused.is_err(),
        "new connections are refused after the drain"
    );
    assert!(agent.envoy_pids().is_empty());
}

/// One GET read as clients read it: headers, then `content-length` bytes, then the client closes
/// (it does not wait for the server's close, which Envoy delays while draining).
async fn get_with_length(addr: SocketAddr) -> Option<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())?;
                if buf.len() >= end + 4 + len {
                    let status = head.split(' ').nth(1)?.parse().ok()?;
                    let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).to_string();
                    return Some((status, body));
                }
            }
            let n = s.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .ok()?
}

// The systemd unit signals only the agent (Envoy must drain, not die) and waits longer than the
// drain; the example agent file parses (the agent gets as far as starting Envoy) and a wrong key
// in it is refused by name.
#[test]
fn systemd_unit_and_example_agent_config_agree() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let unit =
        std::fs::read_to_string(root.join("deploy/systemd/tributary-agent.service")).unwrap();
    let value = |key: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key}= in the unit"))
            .trim()
            .to_string()
    };
    assert_eq!(value("KillMode"), "mixed");
    assert_eq!(value("KillSignal"), "SIGTERM");
    assert_eq!(value("Restart"), "on-failure");
    let secs = |s: &str| humantime_secs(s.trim_end_matches('\\').trim());
    let stop = secs(&value("TimeoutStopSec"));
    let drain = unit
        .split("ExecStart=")
        .nth(1)
        .and_then(|exec| exec.split("--drain-time ").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .map(secs)
        .expect("--drain-time in ExecStart");
    assert!(
        stop > drain + 5,
        "TimeoutStopSec {stop}s vs drain {drain}s + 5s to quit"
    );

    let dir = tempfile::tempdir().unwrap();
    let run = |file: &Path| {
        Command::new(tributary_bin())
            .args(["agent", "--xds-addr", "127.0.0.1:1", "--ip", "127.0.0.2"])
            .arg("--config-file")
            .arg(file)
            .args(["--status-addr", &loopback(free_port()).to_string()])
            .args(["--envoy", "/nonexistent/envoy", "--config-dir"])
            .arg(dir.path().join("cfg"))
            .env_remove("CONSUL_HTTP_ADDR")
            .output()
            .unwrap()
    };
    let out = run(&root.join("deploy/systemd/tributary-agent.yaml"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("cannot start Envoy /nonexistent/envoy"),
        "{err}"
    );
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "consul:\n  servce: typo\n").unwrap();
    let out = run(&bad);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown field `servce`"), "{err}");
}

fn humantime_secs(s: &str) -> u64 {
    let n: u64 = s
        .trim_end_matches('s')
        .parse()
        .unwrap_or_else(|_| panic!("{s} in seconds"));
    n
}

/// Waits until `vmapp`'s only instance in `fake` is `id`, with check status `status`.
async fn wait_vmapp(fake: &FakeConsul, id: &str, status: &str) {
    let want = [(id.to_string(), status.to_string())];
    eventually(LIMIT, &format!("{id} {status} in Consul"), || async {
        (consul_health(fake, "vmapp").await == want).then_some(())
    })
    .await;
}

/// `/v1/health/service/<name>` of the fake Consul: (instance id, its check's status) pairs.
async fn consul_health(fake: &FakeConsul, service: &str) -> Vec<(String, String)> {
    let (_, body) = http_get(
        fake.addr(),
        "localhost",
        &format!("/v1/health/service/{service}"),
    )
    .await
    .unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v.as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let id = e["Service"]["ID"].as_str().unwrap_or("").to_string();
            let status = e["Checks"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["ServiceID"] == e["Service"]["ID"])
                .and_then(|c| c["Status"].as_str())
                .unwrap_or("")
                .to_string();
            (id, status)
        })
        .collect()
}

// AGENT-6: the agent registers the VM's service in Consul with an HTTP check on its readiness;
// tributary's Consul registry picks it up and a second Envoy routes to it; SIGTERM deregisters
// it; an agent whose Envoy dies for good leaves the check critical.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consul_registration_is_routable_and_follows_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fake = FakeConsul::start().await;
    let app = Backend::start_on("127.0.0.2", "vm-app").await;
    let config = d.join("tributary.yaml");
    std::fs::write(
        &config,
        format!(
            "registries:\n  - type: consul\n    address: {}\n",
            fake.url()
        ),
    )
    .unwrap();
    let xds = loopback(free_port());
    let t = Tributary::start(
        d,
        xds,
        loopback(free_port()),
        &["--config", config.to_str().unwrap()],
    )
    .await;
    let port = app.addr.port().to_string();
    let consul_flags = |id: &'static str, budget: &'static str| -> Vec<String> {
        [
            "--ip",
            "127.0.0.2",
            "--consul-addr",
            &fake.addr().to_string(),
            "--consul-service",
            "vmapp",
            "--consul-id",
            id,
            "--consul-port",
            &port,
            "--consul-tags",
            "vm,v1",
            "--consul-check-interval",
            "1s",
            "--restart-budget",
            budget,
            // The VM's own Envoy listens on another address than the client Envoy below.
            "--listener-address",
            "127.0.0.4",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let flags = consul_flags("vmapp-1", "2");
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut agent = Agent::start(d, "consul", xds, &args);
    agent.wait_ready().await;
    wait_vmapp(&fake, "vmapp-1", "passing").await;
    let check = &fake.http_checks()[0];
    assert_eq!(check.url, format!("http://{}/healthz/ready", agent.status));

    // Another proxy reaches the VM through tributary's Consul registry.
    let mut client = Envoy::start(d, "client", t.xds, &["--listener-address", "127.0.0.3"]).await;
    client.wait_live().await;
    let client_listener: SocketAddr = format!("127.0.0.3:{port}").parse().unwrap();
    wait_for_backend(client_listener, "vmapp.service.consul", "vm-app", LIMIT).await;

    // SIGTERM: deregistered before Envoy is drained.
    agent.signal("-TERM");
    let status = agent.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status}:\n{}", agent.tail());
    assert!(
        consul_health(&fake, "vmapp").await.is_empty(),
        "deregistered"
    );

    // An Envoy that dies for good (budget 0): the agent exits non-zero without deregistering, and
    // the check goes critical.
    let flags = consul_flags("vmapp-2", "0");
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut agent = Agent::start(d, "consul-2", xds, &args);
    agent.wait_ready().await;
    wait_vmapp(&fake, "vmapp-2", "passing").await;
    let pids = agent.envoy_pids();
    kill9(pids[0]);
    let status = agent.wait_exit(LIMIT);
    assert!(!status.success());
    wait_vmapp(&fake, "vmapp-2", "critical").await;
}
