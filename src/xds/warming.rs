//! Make-before-break for clusters a push adds (SOTW-31, `docs/traffic-rules.md`): over ADS, once a
//! CDS response has added clusters the client warms through EDS, the stream holds its listeners and
//! routes until an EDS response has carried every one of them, or until [`DEFAULT_EDS_WARM_WAIT`]
//! (or the server's setting) has passed.
//!
//! Why: a client learns of a new EDS cluster from CDS and asks for its endpoints only after it read
//! that response; until they arrive the cluster is warming and a route to it answers 503. The server
//! cannot see the client's warming, but it sees the EDS request and its own EDS response, which is
//! what ends warming. Envoy gives up warming by itself after its `initial_fetch_timeout` (15 s by
//! default, SOTW-29), so holding routes longer than that gains nothing; the bound also keeps a client
//! that never asks for EDS from losing its route updates.
//!
//! The gate is pure (the stream passes the time in) and holds only names: the clusters added and not
//! answered yet, bounded by what CDS responses added.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::envoy::ResourceType;

/// How long listeners and routes wait for the EDS of clusters a push added. Long enough for a loaded
/// Envoy to read a large CDS response and ask for the new clusters' endpoints (one round trip plus
/// CDS processing, well under a second normally); well under Envoy's 15 s `initial_fetch_timeout`,
/// after which the cluster stops warming anyway.
pub const DEFAULT_EDS_WARM_WAIT: Duration = Duration::from_secs(5);

/// Clusters added by CDS whose EDS has not gone out yet, and until when listeners and routes wait.
#[derive(Debug, Default)]
pub(crate) struct WarmGate {
    awaiting: BTreeSet<Arc<str>>,
    /// Set when `awaiting` became non-empty; never moved later by further additions, so a client
    /// that never asks for EDS delays routes by at most one wait per hold.
    deadline: Option<Instant>,
}

impl WarmGate {
    /// A CDS response added `clusters` (each with a load assignment the client must fetch); `present`
    /// says whether a cluster still exists for the client after that response (awaited names it
    /// removed are dropped: the client will not ask for them). A zero `wait` turns the gate off.
    pub(crate) fn added(
        &mut self,
        clusters: Vec<Arc<str>>,
        present: impl Fn(&str) -> bool,
        now: Instant,
        wait: Duration,
    ) {
        if wait.is_zero() {
            return;
        }
        self.awaiting.retain(|c| present(c));
        self.awaiting.extend(clusters);
        if self.awaiting.is_empty() {
            self.deadline = None;
        } else if self.deadline.is_none() {
            self.deadline = Some(now + wait);
        }
    }

    /// An EDS response carrying `names` (resources or removals) went out.
    pub(crate) fn answered<'a>(&mut self, names: impl IntoIterator<Item = &'a Arc<str>>) {
        if self.awaiting.is_empty() {
            return;
        }
        for n in names {
            self.awaiting.remove(n);
        }
        if self.awaiting.is_empty() {
            self.deadline = None;
        }
    }

    /// Whether a response of `ty` must wait at `now`: listeners and routes, while clusters await
    /// their EDS and the wait has not run out.
    pub(crate) fn holds(&self, ty: ResourceType, now: Instant) -> bool {
        matches!(
            ty,
            ResourceType::Listener | ResourceType::Route | ResourceType::VirtualHost
        ) && self.deadline.is_some_and(|d| now < d)
    }

    /// When the current hold runs out, if one is on.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Ends the hold if it ran out at `now`; returns the clusters the client never got EDS for.
    pub(crate) fn expire(&mut self, now: Instant) -> Option<Vec<Arc<str>>> {
        if self.deadline.is_none_or(|d| now < d) {
            return None;
        }
        self.deadline = None;
        Some(std::mem::take(&mut self.awaiting).into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(5);

    fn names(n: &[&str]) -> Vec<Arc<str>> {
        n.iter().map(|s| Arc::from(*s)).collect()
    }

    /// A gate after a CDS response at `t0` added `clusters`, with `wait`.
    fn armed(clusters: &[&str], wait: Duration) -> (WarmGate, Instant) {
        let t0 = Instant::now();
        let mut g = WarmGate::default();
        g.added(names(clusters), |_| true, t0, wait);
        (g, t0)
    }

    #[test]
    fn routes_wait_until_every_added_cluster_had_its_eds() {
        // SOTW-31: listeners and routes follow the EDS of clusters CDS added.
        assert!(!WarmGate::default().holds(ResourceType::Route, Instant::now()));
        let (mut g, t0) = armed(&["a", "b"], WAIT);
        for ty in [ResourceType::Listener, ResourceType::Route] {
            assert!(g.holds(ty, t0));
        }
        for ty in [ResourceType::Cluster, ResourceType::Endpoint] {
            assert!(!g.holds(ty, t0), "CDS and EDS are never held");
        }
        g.answered(&names(&["a", "unrelated"]));
        assert!(g.holds(ResourceType::Route, t0), "b still awaits its EDS");
        g.answered(&names(&["b"]));
        assert!(!g.holds(ResourceType::Route, t0));
        assert_eq!(g.deadline(), None);
    }

    #[test]
    fn the_hold_is_bounded_and_not_extended_by_later_additions() {
        // A client that never asks for EDS delays routes by one wait, not forever.
        let (mut g, t0) = armed(&["a"], WAIT);
        g.added(names(&["b"]), |_| true, t0 + WAIT / 2, WAIT);
        assert_eq!(g.deadline(), Some(t0 + WAIT));
        assert_eq!(g.expire(t0 + WAIT / 2), None, "not yet");
        assert!(!g.holds(ResourceType::Route, t0 + WAIT));
        let given_up = g.expire(t0 + WAIT).expect("ran out");
        assert_eq!(given_up, names(&["a", "b"]));
        assert_eq!(g.deadline(), None);
    }

    #[test]
    fn removed_clusters_and_a_zero_wait_hold_nothing() {
        let (mut g, t0) = armed(&["a"], WAIT);
        // The next CDS response removed "a" and added nothing: the client will not ask for it.
        g.added(Vec::new(), |c| c != "a", t0, WAIT);
        assert!(!g.holds(ResourceType::Listener, t0));
        assert_eq!(g.deadline(), None);
        // A zero wait turns the gate off.
        let (g, t0) = armed(&["a"], Duration::ZERO);
        assert!(!g.holds(ResourceType::Route, t0));
        assert_eq!(g.deadline(), None);
    }
}
