//! HTTP checks run the way a Consul agent runs them: every `Interval`, `GET` the URL with the
//! check's `Timeout`; 2xx is `passing`, 429 `warning`, anything else (or no answer) `critical`
//! (Consul's rules for HTTP checks). The status lands in the catalog, so `/v1/health/service/...`
//! and blocking queries see it.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::task::JoinHandle;

use super::Inner;

/// Consul's default HTTP check timeout.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// One HTTP check definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpCheck {
    /// Its check id (`service:<id>`, ...).
    pub check_id: String,
    /// The instance it belongs to.
    pub service_id: String,
    /// What it GETs.
    pub url: String,
    /// How often.
    pub interval: Duration,
    /// Each request's limit.
    pub timeout: Duration,
}

impl HttpCheck {
    /// Reads `HTTP`, `Interval` and `Timeout` of a check definition; `Ok(None)` when it is not an
    /// HTTP check. An HTTP check without an interval is refused, as Consul refuses it.
    pub(super) fn parse(
        check_id: &str,
        service_id: &str,
        field: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, String> {
        let Some(url) = field("HTTP") else {
            return Ok(None);
        };
        let duration = |key: &str| -> Result<Option<Duration>, String> {
            field(key)
                .map(|s| {
                    humantime::parse_duration(&s).map_err(|e| format!("invalid {key} {s:?}: {e}"))
                })
                .transpose()
        };
        let interval = duration("Interval")?
            .filter(|d| !d.is_zero())
            .ok_or("Interval must be > 0 for Script, HTTP, H2PING, or TCP checks")?;
        Ok(Some(Self {
            check_id: check_id.to_string(),
            service_id: service_id.to_string(),
            url,
            interval,
            timeout: duration("Timeout")?.unwrap_or(DEFAULT_TIMEOUT),
        }))
    }
}

/// The running checks, by instance id.
#[derive(Debug, Default)]
pub(super) struct Checkers {
    running: BTreeMap<String, Vec<(HttpCheck, JoinHandle<()>)>>,
}

impl Checkers {
    /// Replaces instance `service_id`'s checks with `checks`, started now.
    pub(super) fn replace(&mut self, inner: &Arc<Inner>, service_id: &str, checks: Vec<HttpCheck>) {
        self.stop(service_id);
        let started = checks
            .into_iter()
            .map(|c| {
                let task = tokio::spawn(run(Arc::downgrade(inner), c.clone()));
                (c, task)
            })
            .collect();
        self.running.insert(service_id.to_string(), started);
    }

    /// Stops instance `service_id`'s checks.
    pub(super) fn stop(&mut self, service_id: &str) {
        for (_, task) in self.running.remove(service_id).unwrap_or_default() {
            task.abort();
        }
    }

    /// Stops every check.
    pub(super) fn stop_all(&mut self) {
        let ids: Vec<String> = self.running.keys().cloned().collect();
        for id in ids {
            self.stop(&id);
        }
    }

    /// The checks that run.
    pub(super) fn list(&self) -> Vec<HttpCheck> {
        self.running
            .values()
            .flatten()
            .map(|(c, _)| c.clone())
            .collect()
    }
}

/// Runs one check until aborted (or the fake is gone).
async fn run(inner: Weak<Inner>, check: HttpCheck) {
    let client = reqwest::Client::builder()
        .timeout(check.timeout)
        .no_proxy()
        .build()
        .unwrap_or_default();
    let mut last: Option<&'static str> = None;
    loop {
        let status = match client.get(&check.url).send().await {
            Ok(r) if r.status().is_success() => "passing",
            Ok(r) if r.status().as_u16() == 429 => "warning",
            _ => "critical",
        };
        if last != Some(status) {
            let Some(inner) = inner.upgrade() else {
                return;
            };
            inner.write(|c| c.set_check(&check.check_id, status));
            last = Some(status);
        }
        tokio::time::sleep(check.interval).await;
    }
}
