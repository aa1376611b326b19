//! One blocking-query loop: the services list, or the instances of one service.
//!
//! Each loop: take a token from its own bucket (burst 2, one per `min_query_interval`) and from the
//! registry's shared bucket — on the happy path both have one and nothing waits; take a slot
//! (per-service loops only: [`Shared::blocking_slots`] bounds the blocking queries in flight,
//! [`Shared::read_slots`] the non-blocking reads, so a catalog larger than the bound still syncs
//! quickly); query; apply Consul's index rules ([`BlockingIndex`]); report to the registry task.
//!
//! It reports only what matters: a body whose index moved ([`Outcome::Data`]), the first failure
//! and every different one after it ([`Outcome::Failed`], then retries with jittered exponential
//! backoff), and recovery when the first good answer after failures carries nothing new
//! ([`Outcome::Recovered`]). The first request after a failure does not block, so recovery is
//! seen at once rather than one `wait` later. An answer without a known leader, or too stale, is a failure: it is
//! not applied and the index does not move (REG-8).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};

use super::blocking::{BlockingIndex, Observed};
use super::client::{Answer, Client, ClientError, Query};
use super::config::ConsulConfig;
use super::wire::{HealthEntry, ServiceList};
use crate::support::backoff::RetryBackoff;
use crate::support::rate_limit::{self, Limiter, until_ready};

/// Tokens of each watch's own bucket: Consul's documentation suggests "a token bucket with burst
/// of 2" so two quick changes go through at once and a third waits for the refill.
const WATCH_BURST: u32 = 2;

/// The shared bucket holds this many seconds of `max_requests_per_second`, so the initial listing
/// of a large catalog (1,000 services at the default 100/s) is not held back, while a sustained
/// storm is.
const SHARED_BURST_SECONDS: u32 = 10;

/// Non-blocking reads (first reads, re-reads after an index reset) in flight at once. They answer
/// at once, so a few slots sync a thousand services in seconds without holding many connections.
const READ_SLOTS: usize = 16;

/// The shortest wait of a per-service blocking query when services outnumber
/// `max_concurrent_watches` and take turns: below a second a blocking query hardly blocks, so the
/// turns get longer instead.
const MIN_SHARED_WAIT: Duration = Duration::from_secs(1);

/// What one watch reports.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Outcome<T> {
    /// A body whose index moved: apply it (the registry drops results that change nothing).
    Data(T),
    /// Answering again after failures, with nothing new.
    Recovered,
    /// Failing; the reason says what to check.
    Failed(String),
}

/// What the registry task receives from its watches.
#[derive(Debug)]
pub(super) enum Event {
    /// From the services-list watch.
    List(Outcome<ServiceList>),
    /// From the watch of one service.
    Service {
        /// The Consul service name.
        name: Arc<str>,
        /// Which watch of that name (a removed and re-added service gets a new one).
        generation: u64,
        /// What it saw.
        outcome: Outcome<Vec<HealthEntry>>,
    },
}

/// What every watch of one registry shares: timing, limits and the request budget.
#[derive(Debug)]
pub(super) struct Shared {
    /// The registry name (a metric label).
    pub registry: String,
    wait: Duration,
    max_last_contact: Duration,
    min_query_interval: Duration,
    backoff: (Duration, Duration),
    global: Limiter,
    /// Per-service blocking queries in flight (`max_concurrent_watches`).
    pub blocking_slots: Semaphore,
    /// Per-service non-blocking reads in flight.
    pub read_slots: Semaphore,
    max_watches: usize,
    service_watches: AtomicUsize,
}

impl Shared {
    /// The limits `config` sets.
    pub(super) fn new(config: &ConsulConfig) -> Self {
        let rate = config.max_requests_per_second;
        Self {
            registry: config.name.clone(),
            wait: config.wait,
            max_last_contact: config.max_last_contact,
            min_query_interval: config.min_query_interval,
            backoff: (config.backoff.initial, config.backoff.max),
            global: rate_limit::limiter(
                Duration::from_secs(1) / rate.max(1),
                rate.saturating_mul(SHARED_BURST_SECONDS),
            ),
            blocking_slots: Semaphore::new(config.max_concurrent_watches),
            read_slots: Semaphore::new(READ_SLOTS),
            max_watches: config.max_concurrent_watches,
            service_watches: AtomicUsize::new(0),
        }
    }

    /// Records how many per-service watches run now.
    pub(super) fn set_service_watches(&self, n: usize) {
        self.service_watches.store(n, Ordering::Relaxed);
        crate::metrics::consul_watches(&self.registry, n);
    }

    /// The wait of a per-service blocking query. With more services than blocking slots, waits
    /// shrink in proportion, so every service gets a turn about once per `wait` and the request
    /// rate stays about `services / wait`.
    pub(super) fn service_wait(&self) -> Duration {
        let n = self.service_watches.load(Ordering::Relaxed);
        if n <= self.max_watches {
            return self.wait;
        }
        self.wait
            .mul_f64(self.max_watches as f64 / n as f64)
            .clamp(MIN_SHARED_WAIT.min(self.wait), self.wait)
    }

    /// REG-8: an answer without a known leader, or from a server that lost the leader too long
    /// ago, may miss deletions and additions alike; it is not applied.
    fn trust<T>(&self, a: Answer<T>) -> Result<Answer<T>, String> {
        if !a.meta.known_leader {
            return Err(
                "Consul has no known leader (X-Consul-KnownLeader: false); its answer may be \
                 stale and is not applied (REG-8)"
                    .to_string(),
            );
        }
        if a.meta.last_contact > self.max_last_contact {
            return Err(format!(
                "the answering Consul server last heard from the leader {:?} ago \
                 (X-Consul-LastContact), more than max_last_contact {:?}; not applied (REG-8)",
                a.meta.last_contact, self.max_last_contact
            ));
        }
        Ok(a)
    }
}

/// Something a watch reads: one Consul endpoint.
pub(super) trait Source: Send + Sync + 'static {
    /// The parsed body.
    type Body: Send + 'static;
    /// The endpoint, as a metric label (`services` or `health`).
    const ENDPOINT: &'static str;
    /// Whether this watch takes per-service slots.
    const BOUNDED: bool;
    /// One request.
    fn fetch(
        &self,
        q: Query,
    ) -> impl Future<Output = Result<Answer<Self::Body>, ClientError>> + Send;
}

/// The services list.
pub(super) struct ListSource(pub Client);

impl Source for ListSource {
    type Body = ServiceList;
    const ENDPOINT: &'static str = "services";
    const BOUNDED: bool = false;
    fn fetch(
        &self,
        q: Query,
    ) -> impl Future<Output = Result<Answer<ServiceList>, ClientError>> + Send {
        self.0.services(q)
    }
}

/// The instances of one service.
pub(super) struct HealthSource {
    /// The client.
    pub client: Client,
    /// The Consul service name.
    pub name: Arc<str>,
}

impl Source for HealthSource {
    type Body = Vec<HealthEntry>;
    const ENDPOINT: &'static str = "health";
    const BOUNDED: bool = true;
    fn fetch(
        &self,
        q: Query,
    ) -> impl Future<Output = Result<Answer<Vec<HealthEntry>>, ClientError>> + Send {
        self.client.health(&self.name, q)
    }
}

/// Runs one watch until the registry task is gone.
pub(super) async fn run<S, F>(source: S, shared: Arc<Shared>, events: mpsc::Sender<Event>, wrap: F)
where
    S: Source,
    F: Fn(Outcome<S::Body>) -> Event + Send,
{
    let mut index = BlockingIndex::default();
    let bucket = rate_limit::limiter(shared.min_query_interval, WATCH_BURST);
    let mut backoff = RetryBackoff::new(shared.backoff.0, shared.backoff.1);
    let mut failing: Option<String> = None;
    loop {
        until_ready(&bucket).await;
        until_ready(&shared.global).await;
        let q = Query {
            // After a failure, read without blocking: a recovered Consul with nothing new would
            // otherwise hold the query for a whole wait before the registry knows it is healthy.
            index: if failing.is_some() { 0 } else { index.next() },
            wait: if S::BOUNDED {
                shared.service_wait()
            } else {
                shared.wait
            },
        };
        let result = {
            let _slot = match (S::BOUNDED, q.index) {
                (false, _) => None,
                (true, 0) => shared.read_slots.acquire().await.ok(),
                (true, _) => shared.blocking_slots.acquire().await.ok(),
            };
            source.fetch(q).await
        };
        let counted = |outcome: &'static str| {
            crate::metrics::consul_request(&shared.registry, S::ENDPOINT, outcome);
        };
        let outcome = match result
            .map_err(|e| e.to_string())
            .and_then(|a| shared.trust(a))
        {
            Ok(answer) => {
                backoff.reset();
                let was_failing = failing.take().is_some();
                match index.observe(answer.meta.index) {
                    Observed::Changed => {
                        counted("changed");
                        Some(Outcome::Data(answer.body))
                    }
                    Observed::Unchanged => {
                        counted("unchanged");
                        was_failing.then_some(Outcome::Recovered)
                    }
                }
            }
            Err(reason) => {
                counted("error");
                let delay = backoff.next().unwrap_or(shared.backoff.1);
                tracing::debug!(error = %reason, retry_in = %humantime::format_duration(delay), "consul read failed");
                let news = failing.as_ref() != Some(&reason);
                failing = Some(reason.clone());
                if news && events.send(wrap(Outcome::Failed(reason))).await.is_err() {
                    return;
                }
                tokio::time::sleep(delay).await;
                continue;
            }
        };
        if let Some(outcome) = outcome
            && events.send(wrap(outcome)).await.is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
