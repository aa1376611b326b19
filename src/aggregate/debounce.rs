//! Coalesces bursts of registry changes into pushes (REG-13).
//!
//! Two batches fill independently, as in istiod with `PILOT_ENABLE_EDS_DEBOUNCE=false`:
//! - service changes (anything that can alter clusters, listeners or routes) wait for
//!   `debounce_after` of quiet, but never longer than `debounce_max` after the first of them;
//! - endpoint-only changes take the fast path: `endpoint_debounce_after` of quiet (default 0: as
//!   soon as the builder is free), so scale-down removals reach proxies promptly (BUG-1).
//!
//! A hostname with a pending service change keeps its endpoint changes in the service batch, so a
//! fast endpoint push never carries half of a service change. Only one push is in flight at a time:
//! the aggregate asks for due work only when the previous push has finished, and whatever piled up
//! meanwhile goes out together.
//!
//! Time is passed in, so this is a plain state machine; the aggregate drives it with tokio's clock.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tributary_registries::Hostname;
use tributary_registries::duration::deadline;

/// The three debounce settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DebounceSettings {
    /// Quiet time a service change waits for (istiod `PILOT_DEBOUNCE_AFTER`).
    #[serde(with = "tributary_registries::duration")]
    pub debounce_after: Duration,
    /// Longest a change waits under continuous churn (istiod `PILOT_DEBOUNCE_MAX`).
    #[serde(with = "tributary_registries::duration")]
    pub debounce_max: Duration,
    /// Quiet time an endpoint-only change waits for; 0 pushes as soon as the builder is free.
    #[serde(with = "tributary_registries::duration")]
    pub endpoint_debounce_after: Duration,
}

impl Default for DebounceSettings {
    fn default() -> Self {
        Self {
            debounce_after: Duration::from_millis(100),
            debounce_max: Duration::from_secs(10),
            endpoint_debounce_after: Duration::ZERO,
        }
    }
}

/// What a change to one hostname touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// Only the endpoints changed.
    Endpoints,
    /// The service was added, removed, or its attributes changed.
    Service,
}

/// A batch that is due to be pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The hostnames to rebuild.
    pub hosts: BTreeSet<Hostname>,
    /// Whether any service change is included (`false`: endpoint-only fast path).
    pub service_change: bool,
    /// When the oldest change in the batch arrived.
    pub first: Instant,
    /// How many changes were folded into it.
    pub events: usize,
}

#[derive(Debug)]
struct Batch {
    hosts: BTreeSet<Hostname>,
    first: Instant,
    last: Instant,
    events: usize,
}

impl Batch {
    fn new(now: Instant) -> Self {
        Self {
            hosts: BTreeSet::new(),
            first: now,
            last: now,
            events: 0,
        }
    }

    fn add(&mut self, host: Hostname, now: Instant) {
        self.hosts.insert(host);
        self.last = now;
        self.events += 1;
    }

    /// When this batch may go, given the quiet time it needs.
    fn due_at(&self, quiet: Duration, max: Duration) -> Instant {
        // REL-4: settings are bounded, but a deadline never panics on overflow either.
        deadline(self.last, quiet).min(deadline(self.first, max))
    }
}

/// The debounce state machine.
#[derive(Debug)]
pub struct Debouncer {
    settings: DebounceSettings,
    service: Option<Batch>,
    endpoints: Option<Batch>,
}

impl Debouncer {
    /// A debouncer with nothing pending.
    pub fn new(settings: DebounceSettings) -> Self {
        Self {
            settings,
            service: None,
            endpoints: None,
        }
    }

    /// Records a change to `host` at `now`.
    pub fn record(&mut self, host: Hostname, kind: ChangeKind, now: Instant) {
        let in_service_batch = self
            .service
            .as_ref()
            .is_some_and(|b| b.hosts.contains(&host));
        if kind == ChangeKind::Service || in_service_batch {
            if let Some(eds) = &mut self.endpoints {
                eds.hosts.remove(&host);
            }
            self.service
                .get_or_insert_with(|| Batch::new(now))
                .add(host, now);
        } else {
            self.endpoints
                .get_or_insert_with(|| Batch::new(now))
                .add(host, now);
        }
    }

    /// Whether anything is pending.
    pub fn is_idle(&self) -> bool {
        self.service.is_none() && self.endpoints.is_none()
    }

    /// The earliest moment something will be due, if anything is pending.
    pub fn next_due(&self) -> Option<Instant> {
        let s = &self.settings;
        let service = self
            .service
            .as_ref()
            .map(|b| b.due_at(s.debounce_after, s.debounce_max));
        let endpoints = self
            .endpoints
            .as_ref()
            .map(|b| b.due_at(s.endpoint_debounce_after, s.debounce_max));
        service.into_iter().chain(endpoints).min()
    }

    /// Takes everything due at `now`. When the service batch is due, endpoint changes pending at the
    /// same time ride along (one push, not two).
    pub fn take_due(&mut self, now: Instant) -> Option<Due> {
        let s = self.settings;
        let service_due = self
            .service
            .as_ref()
            .is_some_and(|b| b.due_at(s.debounce_after, s.debounce_max) <= now);
        let endpoints_due = self
            .endpoints
            .as_ref()
            .is_some_and(|b| b.due_at(s.endpoint_debounce_after, s.debounce_max) <= now);
        let mut batches = Vec::new();
        if service_due {
            batches.extend(self.service.take());
            batches.extend(self.endpoints.take());
        } else if endpoints_due {
            batches.extend(self.endpoints.take());
        }
        let mut batches = batches.into_iter().filter(|b| !b.hosts.is_empty());
        let first = batches.next()?;
        let mut due = Due {
            hosts: first.hosts,
            service_change: service_due,
            first: first.first,
            events: first.events,
        };
        for b in batches {
            due.hosts.extend(b.hosts);
            due.first = due.first.min(b.first);
            due.events += b.events;
        }
        Some(due)
    }

    /// Drops everything pending (the initial push sends the whole mesh anyway).
    pub fn clear(&mut self) {
        self.service = None;
        self.endpoints = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(name: &str) -> Hostname {
        Hostname::new(name).unwrap()
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn endpoint_change_for_a_host_with_pending_service_change_waits_with_it() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(DebounceSettings::default());
        d.record(h("a"), ChangeKind::Service, t0);
        d.record(h("a"), ChangeKind::Endpoints, t0 + ms(1));
        d.record(h("b"), ChangeKind::Endpoints, t0 + ms(1));
        let fast = d.take_due(t0 + ms(1)).unwrap();
        assert!(!fast.service_change);
        assert_eq!(fast.hosts, BTreeSet::from([h("b")]));
        assert!(d.take_due(t0 + ms(50)).is_none());
        let full = d.take_due(t0 + ms(101)).unwrap();
        assert!(full.service_change);
        assert_eq!(full.hosts, BTreeSet::from([h("a")]));
        assert!(d.is_idle());
    }

    #[test]
    fn service_change_moves_a_host_out_of_the_endpoint_batch() {
        let t0 = Instant::now();
        let mut d = Debouncer::new(DebounceSettings {
            endpoint_debounce_after: ms(10),
            ..Default::default()
        });
        d.record(h("a"), ChangeKind::Endpoints, t0);
        d.record(h("a"), ChangeKind::Service, t0 + ms(1));
        assert!(
            d.take_due(t0 + ms(20)).is_none(),
            "nothing endpoint-only left"
        );
        let due = d.take_due(t0 + ms(200)).unwrap();
        assert_eq!(due.hosts, BTreeSet::from([h("a")]));
        assert!(due.service_change);
    }
}
