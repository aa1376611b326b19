//! Real proxyless gRPC processes for tests: the grpcio greeter servers, the grpcio and
//! @grpc/grpc-js-xds clients (scripts beside this file), and the gRPC xDS bootstrap they read.
//! Every process is killed when its handle drops; every wait has a deadline. A missing interpreter
//! or package is a failure that says how to install it (`scripts/test.sh` does).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// This directory: the scripts, `package.json` and (after `npm ci`) `node_modules`.
pub fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/proxyless")
}

/// The Python interpreter: `PYTHON` or `python3`.
pub fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Fails the test unless Python can import `modules`.
pub fn require_python(modules: &[&str]) {
    let code = modules
        .iter()
        .map(|m| format!("import {m}"))
        .collect::<Vec<_>>()
        .join("; ");
    let ok = Command::new(python())
        .args(["-c", &code])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(
        ok,
        "{} cannot import {modules:?}: run scripts/test.sh, or `pip install grpcio grpcio-csds`",
        python()
    );
}

/// Fails the test unless `node` runs and the fixture's `node_modules` are installed.
pub fn require_node() {
    let ok = Command::new("node")
        .arg("--version")
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "`node` is not on PATH: install Node.js 18 or newer");
    let xds = fixture_dir().join("node_modules/@grpc/grpc-js-xds");
    assert!(
        xds.is_dir(),
        "{} is missing: run scripts/test.sh, or `npm ci` in {}",
        xds.display(),
        fixture_dir().display()
    );
}

/// Writes a gRPC xDS bootstrap (gRFC A27) for node `node_id` pointing at `xds`; returns its path.
pub fn write_bootstrap(dir: &Path, node_id: &str, xds: SocketAddr) -> PathBuf {
    let json = serde_json::json!({
        "xds_servers": [{
            "server_uri": xds.to_string(),
            "channel_creds": [{"type": "insecure"}],
            "server_features": ["xds_v3"],
        }],
        "node": {"id": node_id, "cluster": "proxyless-test", "locality": {"zone": "zone-a"}},
    });
    let path = dir.join(format!("{node_id}-bootstrap.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(&json).expect("json")).expect("bootstrap");
    path
}

/// One JSON line a client printed, with when it was read.
#[derive(Debug, Clone)]
pub struct Line {
    pub at: Instant,
    pub value: serde_json::Value,
}

impl Line {
    /// The greeter's reply, when the call succeeded.
    pub fn reply(&self) -> Option<&str> {
        self.value["ok"]
            .as_bool()
            .filter(|ok| *ok)
            .and_then(|_| self.value["reply"].as_str())
    }

    /// `(code, details)` when the call failed.
    pub fn error(&self) -> Option<(&str, &str)> {
        match self.value["ok"].as_bool() {
            Some(false) => Some((
                self.value["code"].as_str().unwrap_or_default(),
                self.value["details"].as_str().unwrap_or_default(),
            )),
            _ => None,
        }
    }
}

/// A child process whose stdout is JSON lines (a client) or `ready` (the greeters); its stderr
/// goes to a log file in the test's directory.
pub struct Scripted {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Arc<Mutex<Vec<Line>>>,
    raw: Arc<Mutex<Vec<String>>>,
    log: PathBuf,
    name: String,
}

impl Scripted {
    fn spawn(name: &str, mut cmd: Command, dir: &Path) -> Scripted {
        let log = dir.join(format!("{name}.log"));
        let err = std::fs::File::create(&log).expect("log file");
        let mut child = cmd
            .current_dir(fixture_dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let raw = Arc::new(Mutex::new(Vec::new()));
        let (l, r) = (Arc::clone(&lines), Arc::clone(&raw));
        std::thread::spawn(move || {
            for text in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(value) = serde_json::from_str(&text) {
                    l.lock().unwrap().push(Line {
                        at: Instant::now(),
                        value,
                    });
                }
                r.lock().unwrap().push(text);
            }
        });
        Scripted {
            stdin: child.stdin.take(),
            child,
            lines,
            raw,
            log,
            name: name.to_string(),
        }
    }

    /// Starts greeter servers, one per `(address, name)`, and waits until they listen.
    pub async fn greeters(dir: &Path, servers: &[(SocketAddr, &str)]) -> Scripted {
        require_python(&["grpc"]);
        let mut cmd = Command::new(python());
        cmd.arg("greeter_server.py");
        for (addr, name) in servers {
            cmd.arg("--serve").arg(format!("{addr}={name}"));
        }
        let s = Scripted::spawn("greeters", cmd, dir);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !s.raw.lock().unwrap().iter().any(|l| l == "ready") {
            assert!(
                Instant::now() < deadline,
                "greeters not ready after 20s:\n{}",
                s.tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        s
    }

    /// The grpcio client calling `target` with the bootstrap at `bootstrap`.
    pub fn python_client(dir: &Path, bootstrap: &Path, target: &str) -> Scripted {
        require_python(&["grpc"]);
        let mut cmd = Command::new(python());
        cmd.args(["client.py", "--target", target])
            .env("GRPC_XDS_BOOTSTRAP", bootstrap);
        Scripted::spawn("grpcio-client", cmd, dir)
    }

    /// The @grpc/grpc-js-xds client calling `target` with the bootstrap at `bootstrap`.
    pub fn node_client(dir: &Path, bootstrap: &Path, target: &str) -> Scripted {
        require_node();
        let mut cmd = Command::new("node");
        // grpc-js puts the resolver's error in its trace, not in the call's status details.
        cmd.args(["client.js", "--target", target])
            .env("GRPC_XDS_BOOTSTRAP", bootstrap)
            .env("GRPC_TRACE", "xds_resolver")
            .env("GRPC_VERBOSITY", "DEBUG");
        Scripted::spawn("grpc-js-client", cmd, dir)
    }

    /// Waits for a line read after `since` that satisfies `pred`; returns it.
    pub async fn wait_for(
        &mut self,
        since: Instant,
        limit: Duration,
        what: &str,
        pred: impl Fn(&Line) -> bool,
    ) -> Line {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(found) = self
                .lines
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.at >= since && pred(l))
            {
                return found.clone();
            }
            if Instant::now() > deadline || matches!(self.child.try_wait(), Ok(Some(_))) {
                let last: Vec<String> = {
                    let lines = self.lines.lock().unwrap();
                    let from = lines.len().saturating_sub(5);
                    lines[from..].iter().map(|l| l.value.to_string()).collect()
                };
                panic!(
                    "{}: no line with {what} within {limit:?}; last lines: {last:#?}\nstderr:\n{}",
                    self.name,
                    self.tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits for a successful call answered by `backend` after `since`; returns when it was read.
    pub async fn wait_reply_from(
        &mut self,
        since: Instant,
        limit: Duration,
        backend: &str,
    ) -> Instant {
        let want = format!("from {backend}");
        self.wait_for(since, limit, &format!("a reply {want}"), |l| {
            l.reply().is_some_and(|r| r.ends_with(&want))
        })
        .await
        .at
    }

    /// The whole of the process's stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The tail of the process's stderr.
    pub fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        // Closing stdin asks the script to stop; the kill makes sure.
        self.stdin.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A mock file with one gRPC service `host` on `port` whose endpoints are `backends`.
pub fn grpc_mesh(host: &str, port: u16, backends: &[SocketAddr]) -> String {
    let mut y = format!(
        "services:\n  - hostname: {host}\n    ports: [{{name: grpc, port: {port}, protocol: GRPC}}]\n    endpoints:\n"
    );
    for b in backends {
        y += &format!(
            "      - {{address: {}, ports: {{grpc: {}}}, locality: us-east/zone-a}}\n",
            b.ip(),
            b.port()
        );
    }
    y
}
