//! One Envoy process under the agent (its command line, its output forwarded to the agent's own,
//! the last lines kept for error messages) and Envoy's admin API on loopback.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::task::JoinSet;

use super::AgentError;
use super::options::AgentOptions;

/// Lines of Envoy's output kept to explain a crash.
const TAIL_LINES: usize = 12;

/// How long the output readers may lag behind an exit (a grandchild holding the pipe must not
/// hold the agent).
const OUTPUT_GRACE: Duration = Duration::from_millis(500);

/// One admin request's limit: the admin API answers from memory on loopback.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(2);

/// The last lines Envoy printed.
pub(super) type Tail = Arc<Mutex<VecDeque<String>>>;

/// A running Envoy (killed if dropped).
#[derive(Debug)]
pub(super) struct EnvoyProc {
    child: Child,
    /// Its `--restart-epoch`.
    pub epoch: u32,
    /// When it started.
    pub started: Instant,
    /// Its process id.
    pub pid: u32,
    tail: Tail,
    readers: JoinSet<()>,
}

impl EnvoyProc {
    /// Starts Envoy for `epoch` on bootstrap `config`.
    pub(super) fn spawn(
        o: &AgentOptions,
        config: &Path,
        epoch: u32,
    ) -> Result<EnvoyProc, AgentError> {
        let mut cmd = Command::new(&o.envoy);
        cmd.args(o.envoy_args(config, epoch))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| AgentError::Spawn {
            envoy: o.envoy.clone(),
            error: e.to_string(),
        })?;
        let tail: Tail = Arc::default();
        let mut readers = JoinSet::new();
        if let Some(out) = child.stdout.take() {
            readers.spawn(forward(out, Arc::clone(&tail)));
        }
        if let Some(err) = child.stderr.take() {
            readers.spawn(forward(err, Arc::clone(&tail)));
        }
        Ok(EnvoyProc {
            pid: child.id().unwrap_or_default(),
            child,
            epoch,
            started: Instant::now(),
            tail,
            readers,
        })
    }

    /// Waits for it to exit (and for its last output).
    pub(super) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        let status = self.child.wait().await?;
        let _ = tokio::time::timeout(OUTPUT_GRACE, async {
            while self.readers.join_next().await.is_some() {}
        })
        .await;
        Ok(status)
    }

    /// Whether it has exited (without waiting).
    pub(super) fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL, and wait.
    pub(super) async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// The last lines it printed, oldest first.
    pub(super) fn tail(&self) -> String {
        let t = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        t.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

/// Copies Envoy's output to the agent's standard error, keeping the last lines.
async fn forward(pipe: impl AsyncRead + Unpin, tail: Tail) {
    let mut lines = BufReader::new(pipe).lines();
    let mut stderr = tokio::io::stderr();
    while let Ok(Some(line)) = lines.next_line().await {
        let _ = stderr.write_all(format!("{line}\n").as_bytes()).await;
        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
        if t.len() == TAIL_LINES {
            t.pop_front();
        }
        t.push_back(line);
    }
}

/// Envoy's admin API at `127.0.0.1:<port>`.
#[derive(Debug, Clone)]
pub(super) struct Admin {
    client: reqwest::Client,
    base: String,
}

impl Admin {
    /// The admin API on `port`.
    pub(super) fn new(port: u16) -> Self {
        let client = reqwest::Client::builder()
            .timeout(ADMIN_TIMEOUT)
            .no_proxy()
            .build()
            .unwrap_or_default();
        Self {
            client,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// `GET path`: status and body.
    pub(super) async fn get(&self, path: &str) -> Result<(u16, String), AgentError> {
        let r = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .map_err(|e| AgentError::Admin(format!("GET {path}: {e}")))?;
        let status = r.status().as_u16();
        let body = r
            .text()
            .await
            .map_err(|e| AgentError::Admin(format!("GET {path}: {e}")))?;
        Ok((status, body))
    }

    /// `POST path`, which must answer 200.
    pub(super) async fn post(&self, path: &str) -> Result<(), AgentError> {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .send()
            .await
            .map_err(|e| AgentError::Admin(format!("POST {path}: {e}")))?;
        match r.status().as_u16() {
            200 => Ok(()),
            s => Err(AgentError::Admin(format!("POST {path}: status {s}"))),
        }
    }

    /// Counters and gauges whose names match the regex `filter`.
    pub(super) async fn stats(&self, filter: &str) -> Result<BTreeMap<String, u64>, AgentError> {
        let (_, body) = self.get(&format!("/stats?filter={filter}")).await?;
        Ok(parse_stats(&body))
    }

    /// Envoy's readiness as pilot-agent judges it: LIVE, and a first CDS and LDS received.
    pub(super) async fn ready(&self) -> Result<(), String> {
        let live = self.get("/ready").await.map_err(|e| e.to_string())?;
        let stats = self
            .stats(r"^(cluster_manager\.cds|listener_manager\.lds)\.update_(success|rejected)$")
            .await
            .map_err(|e| e.to_string())?;
        readiness(&live.1, &stats)
    }

    /// Active downstream connections on Envoy's listeners (all epochs; the admin's excluded).
    pub(super) async fn active_connections(&self) -> Result<u64, AgentError> {
        let stats = self.stats(r"^listener\..*\.downstream_cx_active$").await?;
        Ok(stats
            .iter()
            // The per-worker copies (`listener.<addr>.worker_0.…`) would count twice.
            .filter(|(k, _)| !k.starts_with("listener.admin.") && !k.contains(".worker_"))
            .map(|(_, v)| v)
            .sum())
    }
}

/// `name: value` lines (histograms and text values skipped).
pub(super) fn parse_stats(body: &str) -> BTreeMap<String, u64> {
    body.lines()
        .filter_map(|l| l.split_once(": "))
        .filter_map(|(k, v)| Some((k.to_string(), v.trim().parse().ok()?)))
        .collect()
}

/// Ready when `/ready` says LIVE and CDS and LDS each answered at least once (accepted or not: a
/// rejected first config still means the control plane is talking to this proxy).
pub(super) fn readiness(ready_body: &str, stats: &BTreeMap<String, u64>) -> Result<(), String> {
    if ready_body.trim() != "LIVE" {
        return Err(format!("Envoy is {}", ready_body.trim()));
    }
    for (what, prefix) in [
        ("CDS", "cluster_manager.cds"),
        ("LDS", "listener_manager.lds"),
    ] {
        let got = |s: &str| stats.get(&format!("{prefix}.update_{s}")).copied();
        if got("success").unwrap_or(0) + got("rejected").unwrap_or(0) == 0 {
            return Err(format!("no {what} received yet"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_needs_live_and_first_cds_and_lds() {
        let stats = parse_stats(
            "cluster_manager.cds.update_success: 1\nlistener_manager.lds.update_rejected: 1\nx: P0(1)\n",
        );
        assert_eq!(readiness("LIVE\n", &stats), Ok(()));
        assert!(readiness("PRE_INITIALIZING\n", &stats).is_err());
        let no_lds = parse_stats("cluster_manager.cds.update_success: 3\n");
        assert_eq!(
            readiness("LIVE", &no_lds),
            Err("no LDS received yet".to_string())
        );
    }
}
