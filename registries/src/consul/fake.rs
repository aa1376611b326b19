//! An in-process fake Consul (H-CONSUL) for tests, the end-to-end tests and the `fake-consul`
//! example: an HTTP server on loopback that speaks Consul's real wire format.
//!
//! - **Reads**: `GET /v1/catalog/services` and `GET /v1/health/service/<name>` with Consul's JSON
//!   shapes (Go `null`s included), blocking on `?index=` / `?wait=` until the index moves or the
//!   wait (plus Consul's up-to-`wait/16` jitter) passes, with `X-Consul-Index`,
//!   `X-Consul-KnownLeader`, `X-Consul-LastContact`. `?dc=` other than its datacenter is a 500,
//!   `?partition=` a 400 (as OSS Consul), `X-Consul-Token` is checked when required.
//! - **Writes**, through the Rust API below or the agent HTTP API a script would use against a
//!   real `consul agent -dev`: `PUT /v1/agent/service/register`, `.../deregister/<id>`,
//!   `.../maintenance/<id>?enable=`, `PUT /v1/agent/check/{pass,warn,fail}/<check id>`. Checks
//!   are never executed: their status is whatever was last set (TTL-style).
//! - **Faults**: persistent ([`Fault`]: 5xx, hang, refused connections, leader loss, old
//!   LastContact) until [`FakeConsul::heal`], and scripted one-shot answers ([`Scripted`]: any
//!   index, including backwards or 0, any status, leader flag). A fault set while queries block
//!   applies to them at once, as a dying server would.
//! - **Counting**: every request is counted and logged ([`FakeConsul::requests`]), for request-rate
//!   measurements and "which index was sent" checks.

mod agent;
mod checks;
mod instance;
mod json;
mod server;
mod state;

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use checks::HttpCheck;
pub use instance::{CheckStatus, Instance};
use state::Catalog;

/// Requests kept in the log; the counters keep counting past it.
const LOG_CAPACITY: usize = 100_000;

/// A persistent fault: every read suffers it until [`FakeConsul::heal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Reads answer this HTTP status (500, 503, ...).
    Status(u16),
    /// Reads are accepted and never answered (until healed).
    Hang,
    /// The leader is lost: default-consistency reads answer 500 "No cluster leader"; `?stale`
    /// reads answer data with `X-Consul-KnownLeader: false`.
    NoLeader,
    /// Reads answer with this `X-Consul-LastContact`.
    LastContact(Duration),
    /// The server stops listening and drops its connections: connections are refused.
    Refuse,
}

/// Which read a scripted answer is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Route {
    /// `/v1/catalog/services`.
    Services,
    /// `/v1/health/service/<name>`.
    Health(String),
}

/// A one-shot answer to the next read of a route: at once, with the current body (unless an error
/// status), overriding what is set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scripted {
    /// `X-Consul-Index` to send (backwards, 0, the same again, ...).
    pub index: Option<u64>,
    /// An HTTP status to answer instead of the data.
    pub status: Option<u16>,
    /// `X-Consul-KnownLeader`.
    pub known_leader: Option<bool>,
}

/// One request the fake received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// `GET`, `PUT`, ...
    pub method: String,
    /// The decoded path.
    pub path: String,
    /// The decoded query parameters (a flag like `?stale` has an empty value).
    pub query: BTreeMap<String, String>,
    /// `X-Consul-Token`, if sent.
    pub token: Option<String>,
}

/// How many requests of each kind the fake received.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// `/v1/catalog/services`.
    pub services: u64,
    /// `/v1/health/service/*`.
    pub health: u64,
    /// Agent API writes.
    pub writes: u64,
    /// Anything else.
    pub other: u64,
}

impl RequestCounts {
    /// Every read (services + health).
    pub fn reads(&self) -> u64 {
        self.services + self.health
    }
}

/// Faults, scripts and ACL settings.
#[derive(Debug, Default)]
struct Control {
    fault: Option<Fault>,
    scripts: BTreeMap<Route, VecDeque<Scripted>>,
    token: Option<String>,
}

/// What the server and the handle share.
#[derive(Debug)]
struct Inner {
    catalog: Mutex<Catalog>,
    control: Mutex<Control>,
    /// Moves on every catalog or fault change; blocked reads wake on it.
    version: watch::Sender<u64>,
    /// Whether the server accepts connections ([`Fault::Refuse`] clears it).
    listening: watch::Sender<bool>,
    log: Mutex<Vec<RecordedRequest>>,
    counts: [AtomicU64; 4],
    /// Blocking reads (`index` > 0) being answered now, and the most there ever were.
    blocking: [AtomicU64; 2],
    /// HTTP checks being run.
    checkers: Mutex<checks::Checkers>,
}

impl Inner {
    fn catalog(&self) -> MutexGuard<'_, Catalog> {
        self.catalog.lock()
    }

    fn control(&self) -> MutexGuard<'_, Control> {
        self.control.lock()
    }

    fn checkers(&self) -> MutexGuard<'_, checks::Checkers> {
        self.checkers.lock()
    }

    fn changed(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// Applies `f` to the catalog and wakes blocked reads.
    fn write<T>(&self, f: impl FnOnce(&mut Catalog) -> T) -> T {
        let out = f(&mut self.catalog());
        self.changed();
        out
    }
}

/// A running fake Consul. Dropping it stops the server.
#[derive(Debug)]
pub struct FakeConsul {
    inner: Arc<Inner>,
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for FakeConsul {
    fn drop(&mut self) {
        self.task.abort();
        self.inner.checkers().stop_all();
    }
}

impl FakeConsul {
    /// A fake Consul of datacenter `dc1` on a free loopback port.
    pub async fn start() -> FakeConsul {
        Self::start_on("127.0.0.1:0".parse().expect("constant address"), "dc1")
            .await
            .expect("a loopback port for the fake Consul")
    }

    /// A fake Consul of `datacenter` listening on `addr`.
    pub async fn start_on(addr: SocketAddr, datacenter: &str) -> std::io::Result<FakeConsul> {
        let inner = Arc::new(Inner {
            catalog: Mutex::new(Catalog::new(datacenter)),
            control: Mutex::new(Control::default()),
            version: watch::Sender::new(0),
            listening: watch::Sender::new(true),
            log: Mutex::new(Vec::new()),
            counts: Default::default(),
            blocking: Default::default(),
            checkers: Mutex::default(),
        });
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(server::serve(listener, Arc::clone(&inner)));
        Ok(FakeConsul { inner, addr, task })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://<addr>`, for `address:` in a config.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Registers (or replaces) an instance.
    pub fn register(&self, instance: Instance) {
        self.inner.write(|c| c.upsert(instance.record()));
    }

    /// The HTTP checks being run (registered through the agent API).
    pub fn http_checks(&self) -> Vec<HttpCheck> {
        self.inner.checkers().list()
    }

    /// Removes instance `id`; whether it existed.
    pub fn deregister(&self, id: &str) -> bool {
        self.inner.checkers().stop(id);
        self.inner.write(|c| c.remove(id))
    }

    /// Sets the status of check `check_id` (`service:<id>`, `serfHealth`, ...); whether found.
    pub fn set_check(&self, check_id: &str, status: CheckStatus) -> bool {
        self.inner.write(|c| c.set_check(check_id, status.as_str()))
    }

    /// Sets the status of instance `id`'s own check `service:<id>` (adding it if missing).
    pub fn set_service_check(&self, id: &str, status: CheckStatus) -> bool {
        let check = format!("service:{id}");
        self.inner
            .write(|c| c.set_instance_check(id, &check, Some(status.as_str())))
    }

    /// Puts instance `id` into or out of maintenance (a critical `_service_maintenance:<id>` check).
    pub fn set_maintenance(&self, id: &str, on: bool) -> bool {
        let check = format!("_service_maintenance:{id}");
        let status = on.then_some("critical");
        self.inner
            .write(|c| c.set_instance_check(id, &check, status))
    }

    /// Sets node `node`'s `serfHealth` check.
    pub fn set_node_health(&self, node: &str, status: CheckStatus) -> bool {
        self.inner
            .write(|c| c.set_node_check(node, "serfHealth", Some(status.as_str())))
    }

    /// Adds or changes a node: its address and meta.
    pub fn set_node(&self, name: &str, address: &str, meta: &[(&str, &str)]) {
        let meta = meta
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.inner.write(|c| c.set_node(name, address, meta));
    }

    /// An idempotent write: `service`'s index moves, its content does not.
    pub fn touch(&self, service: &str) {
        self.inner.write(|c| c.touch(service));
    }

    /// A snapshot restore: every index goes back to at most `to`.
    pub fn rewind_index(&self, to: u64) {
        self.inner.write(|c| c.rewind(to));
    }

    /// The current index of `/v1/health/service/<service>`.
    pub fn health_index(&self, service: &str) -> u64 {
        self.inner.catalog().health_index(service)
    }

    /// Starts a persistent fault (replacing any other).
    pub fn fail(&self, fault: Fault) {
        let refuse = fault == Fault::Refuse;
        self.inner.control().fault = Some(fault);
        self.inner.listening.send_replace(!refuse);
        self.inner.changed();
    }

    /// Ends the fault: answers (and connections) are normal again.
    pub fn heal(&self) {
        self.inner.control().fault = None;
        self.inner.listening.send_replace(true);
        self.inner.changed();
    }

    /// Queues a one-shot answer for the next read of `route`.
    pub fn script(&self, route: Route, answer: Scripted) {
        self.inner
            .control()
            .scripts
            .entry(route)
            .or_default()
            .push_back(answer);
    }

    /// Requires this ACL token on reads (`None`: no ACLs).
    pub fn require_token(&self, token: Option<&str>) {
        self.inner.control().token = token.map(str::to_string);
        self.inner.changed();
    }

    /// The requests received so far (the first 100,000).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.inner.log.lock().clone()
    }

    /// How many requests of each kind were received.
    pub fn request_counts(&self) -> RequestCounts {
        let c = |i: usize| self.inner.counts[i].load(Ordering::Relaxed);
        RequestCounts {
            services: c(0),
            health: c(1),
            writes: c(2),
            other: c(3),
        }
    }

    /// The most blocking reads (`?index=` > 0) ever in flight at once, since the last reset.
    pub fn max_blocking_in_flight(&self) -> u64 {
        self.inner.blocking[1].load(Ordering::Relaxed)
    }

    /// Restarts [`Self::max_blocking_in_flight`] from the current number.
    pub fn reset_max_blocking_in_flight(&self) {
        let now = self.inner.blocking[0].load(Ordering::Relaxed);
        self.inner.blocking[1].store(now, Ordering::Relaxed);
    }

    /// Forgets the request log (counters keep counting).
    pub fn clear_requests(&self) {
        self.inner.log.lock().clear();
    }
}

#[cfg(test)]
mod tests;
