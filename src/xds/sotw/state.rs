//! The SotW protocol state of one resource type on one stream: ACK/NACK bookkeeping and deciding
//! what the next response carries.
//!
//! One cohesive state machine, deliberately in one file. It is pure (no I/O, no clock besides
//! timestamps for debug) so every rule can be unit-tested; the stream task owns one per type.
//!
//! Memory: the subscription (a persistent set of shared names), one sent/acked record, a NACK
//! message capped at [`MAX_ERROR_BYTES`], and the names owed to the client (`pending`, `warming`),
//! which are bounded by the subscription. Nothing that was sent is copied.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use imbl::OrdSet;

use super::super::cache::FullSetCache;
use super::super::connections::TypeStatus;
use super::super::per_type::TypeState;
use super::super::record::{MAX_CLIENT_VERSION_BYTES, MAX_ERROR_BYTES, Sent, bounded};
use super::super::request::Kind;
use super::super::response::empty_cla;
use super::super::subscription::{Change, Known, SotwNames, Subscription};
use crate::envoy::ResourceType;
use crate::snapshot::{Snapshot, TypeResources, TypeVersion, View};

/// What the client is owed beyond what the snapshot's changes say.
#[derive(Debug, Default)]
struct Pending {
    /// Everything subscribed (first request, wildcard switched on, admin push).
    all: bool,
    /// These names, even if unchanged (added names SOTW-18/19, warming SOTW-32).
    names: BTreeSet<Arc<str>>,
    /// Answer even if the response carries no resources.
    respond: bool,
}

/// Which clusters a CDS response added or changed for the client.
#[derive(Debug)]
pub(crate) enum Warming {
    /// Every cluster it carries.
    All,
    /// These.
    Some(Vec<Arc<str>>),
}

/// A response's content, ready to frame.
#[derive(Debug)]
pub(crate) struct SotwBuilt {
    /// The snapshot's type version (`version_info`, SOTW-7).
    pub version: TypeVersion,
    /// Shared `resources` entries, in name order.
    pub entries: Vec<Bytes>,
    /// EDS/RDS only: names carried (full-state responses do not list them), kept once sent for
    /// client status (CSDS).
    pub names: Arc<[Arc<str>]>,
    /// CDS only: the clusters this response adds or changes for the client (warming, SOTW-32).
    pub warming: Warming,
    /// Whether snapshot changes (not only the client's request) caused it.
    pub change_driven: bool,
}

/// The SotW state of one type on one stream.
#[derive(Debug)]
pub(crate) struct SotwState {
    ty: ResourceType,
    sub: Subscription,
    sent: Option<Sent>,
    /// EDS/RDS: the names the last response carried, for client status (CSDS): the response's own
    /// list, shared, not a copy; `None` when it carried every subscribed name.
    last_names: Option<Arc<[Arc<str>]>>,
    acked: Option<(Arc<str>, Arc<str>)>,
    last_error: Option<String>,
    /// The snapshot this type's client state was last brought up to.
    synced_seq: u64,
    pending: Pending,
    /// EDS only: clusters a CDS response added or changed that no EDS response has covered since.
    warming: BTreeSet<Arc<str>>,
    /// EDS only, wildcard: a CDS response warmed every cluster; owe everything on the next request.
    warm_all: bool,
    /// What stale requests left out of the subscription: the client may have dropped these, so
    /// the next fresh request that still names them is a re-subscription (BUG-8, SOTW-19).
    dropped_while_stale: Dropped,
    /// CDS only: the current push kept clusters removed since the client's last response
    /// (SOTW-31); a response without them is owed once the push is complete.
    removals_held: bool,
}

/// Subscribed names (and the wildcard) that a stale request did not name.
#[derive(Debug, Default)]
struct Dropped {
    wildcard: bool,
    names: BTreeSet<Arc<str>>,
}

impl TypeState for SotwState {
    fn new(ty: ResourceType) -> Self {
        Self::new(ty)
    }
}

impl SotwState {
    pub(crate) fn new(ty: ResourceType) -> Self {
        Self {
            ty,
            sub: Subscription::default(),
            sent: None,
            last_names: None,
            acked: None,
            last_error: None,
            synced_seq: 0,
            pending: Pending::default(),
            warming: BTreeSet::new(),
            warm_all: false,
            dropped_while_stale: Dropped::default(),
            removals_held: false,
        }
    }

    /// The subscription (its names are shared with equal sets of other streams, `names.rs`).
    pub(crate) fn sub(&self) -> &Subscription {
        &self.sub
    }

    /// Whether the subscription covers `name`.
    pub(crate) fn covers(&self, name: &str) -> bool {
        self.sub.covers(name)
    }

    /// Whether a response may be sent for this type (INV-5).
    pub(crate) fn subscribed(&self) -> bool {
        self.sub.subscribed()
    }

    /// Whether the next build may produce a response, given the newest snapshot `latest_seq`.
    pub(crate) fn has_work(&self, latest_seq: u64) -> bool {
        self.subscribed()
            && (self.synced_seq < latest_seq
                || self.pending.all
                || self.pending.respond
                || !self.pending.names.is_empty())
    }

    /// Whether a response built from `snap` would carry something for this client: something owed,
    /// or a change to a subscribed name. Costs the size of the change, not of the mesh.
    pub(crate) fn would_send(&self, snap: &Snapshot) -> bool {
        if !self.subscribed() {
            return false;
        }
        if self.pending.all || self.pending.respond || !self.pending.names.is_empty() {
            return true;
        }
        if self.synced_seq >= snap.seq {
            return false;
        }
        match snap.changes_since(self.ty, self.synced_seq) {
            Some(c) => {
                c.changed.iter().any(|n| self.sub.covers(n))
                    || (self.ty.full_state_in_sotw()
                        && c.removed.iter().any(|n| self.sub.covers(n)))
            }
            None => true,
        }
    }

    /// The push is complete: if it held removals back (SOTW-31), owes the client a response with
    /// its full current set.
    pub(crate) fn release_removals(&mut self) {
        if std::mem::take(&mut self.removals_held) && self.subscribed() {
            self.pending.respond = true;
        }
    }

    /// Applies one request. `error` is `error_detail.message` when present.
    #[cfg(test)]
    pub(crate) fn on_request(
        &mut self,
        nonce: &str,
        version_info: &str,
        names: &[String],
        error: Option<&str>,
    ) -> Kind {
        self.on_request_known(nonce, version_info, names, error, Known::default())
    }

    /// Applies one request; newly subscribed names are taken from `known` where it has them.
    pub(crate) fn on_request_known<N: SotwNames + ?Sized>(
        &mut self,
        nonce: &str,
        version_info: &str,
        names: &N,
        error: Option<&str>,
        known: Known<'_>,
    ) -> Kind {
        let initial = !self.sub.requested();
        let matches_sent = self.sent.as_ref().is_some_and(|s| *s.nonce == *nonce);
        if !initial && !nonce.is_empty() && self.sent.is_some() && !matches_sent {
            // SOTW-9: stale. Nothing changes, but what it left out is remembered: the next fresh
            // request re-evaluates those names (G-4).
            self.note_stale(names);
            return Kind::Stale;
        }
        let kind = if let Some(message) = error {
            // SOTW-12/13/15: record, never resend or roll back because of it.
            self.last_error = Some(bounded(message, MAX_ERROR_BYTES));
            Kind::Nack
        } else if initial {
            Kind::Initial
        } else if let Some(sent) = self.sent.as_ref().filter(|_| matches_sent) {
            // The nonce and, from a well-behaved client, the version are those we sent: shared.
            let version = if *sent.version_text == *version_info {
                Arc::clone(&sent.version_text)
            } else {
                Arc::from(bounded(version_info, MAX_CLIENT_VERSION_BYTES))
            };
            self.acked = Some((Arc::clone(&sent.nonce), version));
            self.last_error = None;
            Kind::Ack
        } else {
            Kind::Update
        };
        let change = self.sub.apply_sotw_known(self.ty, names, known);
        if self.sub.is_empty() {
            // SOTW-20/35: nothing owed any more.
            self.pending = Pending::default();
            self.warming.clear();
            self.warm_all = false;
            return kind;
        }
        if initial {
            self.pending.all = true;
            self.pending.respond = true;
        } else {
            self.owe(&change);
            self.owe_resubscribed();
        }
        if std::mem::take(&mut self.warm_all) {
            self.pending.all = true;
            self.pending.respond = true;
        }
        if self.ty == ResourceType::Endpoint && !self.warming.is_empty() {
            // SOTW-32: the first EDS request after a CDS response is answered, even if it looks
            // like an ACK, for the clusters that response added or changed.
            let warming = std::mem::take(&mut self.warming);
            for name in warming.into_iter().filter(|n| self.sub.covers(n)) {
                self.pending.names.insert(name);
                self.pending.respond = true;
            }
        }
        kind
    }

    fn owe(&mut self, change: &Change) {
        if change.wildcard_on {
            self.pending.all = true;
            self.pending.respond = true;
        }
        if !change.added.is_empty() {
            // SOTW-18/19: added names are sent even if unchanged or sent before.
            self.pending.names.extend(change.added.iter().cloned());
            self.pending.respond = true;
        }
        if self.ty.full_state_in_sotw() && change.any() {
            // SOTW-24: a full-state type answers every subscription change with the full set.
            self.pending.respond = true;
        }
        for name in &change.removed {
            self.pending.names.remove(name);
        }
    }

    /// Records what a stale request left out of the current subscription. A client that dropped a
    /// name in a request crossing our responses, then asked for it again in another, has thrown it
    /// away and needs it resent, while the server, ignoring both, saw no change (BUG-8).
    fn note_stale<N: SotwNames + ?Sized>(&mut self, requested: &N) {
        let (wildcard, names) = self.sub.left_out_by_sotw(self.ty, requested);
        self.dropped_while_stale.wildcard |= wildcard;
        self.dropped_while_stale.names.extend(names);
    }

    /// After a fresh request: owes what stale requests had dropped and this one names again.
    fn owe_resubscribed(&mut self) {
        let dropped = std::mem::take(&mut self.dropped_while_stale);
        if dropped.wildcard && self.sub.wildcard {
            self.pending.all = true;
            self.pending.respond = true;
        }
        for name in dropped.names {
            if self.sub.names.contains(&name) {
                self.pending.names.insert(name);
                self.pending.respond = true;
            }
        }
    }

    /// Owes the client everything it subscribes to (admin push).
    pub(crate) fn force_all(&mut self) {
        if self.subscribed() {
            self.pending.all = true;
            self.pending.respond = true;
        }
    }

    /// CDS sent `clusters` as added or changed: owe their EDS on the next EDS request (SOTW-32).
    ///
    /// With [`Warming::All`] on a wildcard EDS subscription nothing is noted: the next EDS request
    /// is answered in full instead (`pending.all`), without listing the mesh here.
    pub(crate) fn note_warming(&mut self, clusters: &Warming) {
        if !self.subscribed() {
            // The first EDS request will be answered in full anyway.
            return;
        }
        match clusters {
            Warming::Some(names) => {
                for c in names {
                    if self.sub.covers(c) {
                        self.warming.insert(Arc::clone(c));
                    }
                }
            }
            Warming::All if self.sub.wildcard => self.warm_all = true,
            Warming::All => self.warming.extend(self.sub.names.iter().cloned()),
        }
    }

    /// Computes the next response from `snap`, consuming what was owed, and marks the state as
    /// brought up to `snap`. `None` when there is nothing to send (SOTW-28).
    ///
    /// `retain_from`, for CDS only, is the snapshot the client's previous CDS response came from:
    /// clusters removed since are kept in this response (SOTW-31): the listeners and routes of the
    /// same push may still reference them. A response without them is owed once the push is
    /// complete ([`Self::release_removals`]); none is sent now if the kept set is what the client
    /// holds already.
    pub(crate) fn build(
        &mut self,
        snap: &Snapshot,
        view: View,
        retain_from: Option<&Snapshot>,
        full_sets: &FullSetCache,
    ) -> Option<SotwBuilt> {
        let since = self.synced_seq;
        let pending = std::mem::take(&mut self.pending);
        let owed = pending.all || pending.respond || !pending.names.is_empty();
        self.synced_seq = self.synced_seq.max(snap.seq);
        if !self.subscribed() {
            return None;
        }
        let res = snap.resources_for(self.ty, view);
        let mut built = SotwBuilt {
            version: res.version,
            entries: Vec::new(),
            names: Arc::default(),
            warming: Warming::Some(Vec::new()),
            change_driven: false,
        };
        if self.ty.full_state_in_sotw() {
            // Only needed to decide whether to answer (nothing owed) or to call the answer
            // change-driven (not a first one): a first answer skips reading the history.
            let needed = !owed || since > 0;
            let changed = needed
                && since < snap.seq
                && if self.sub.wildcard {
                    self.sent.as_ref().is_none_or(|s| s.version != res.version)
                } else {
                    match snap.changes_since(self.ty, since) {
                        Some(c) => c
                            .changed
                            .iter()
                            .chain(c.removed.iter())
                            .any(|n| self.sub.names.contains(n)),
                        // History too short: resend the (named) set once rather than track more.
                        None => true,
                    }
                };
            if !(changed || owed) {
                return None;
            }
            // A stream's first response is not a change reaching it: convergence is measured
            // from changes only, never from a connection's start.
            built.change_driven = changed && since > 0;
            if self.sub.wildcard {
                // Every wildcard stream sends these same bytes: one shared chunk.
                if !res.is_empty() {
                    built.entries.push(full_sets.get(self.ty, view, &res));
                }
                // Warming scope (SOTW-32): what this response adds or changes for the client.
                // Read only when not everything is owed: a first answer (every stream of a storm)
                // would merge the whole history into a set it then drops.
                let since_changes = (!pending.all)
                    .then(|| snap.changes_since(self.ty, since))
                    .flatten();
                built.warming = match since_changes {
                    Some(c) => Warming::Some(c.changed.into_iter().chain(pending.names).collect()),
                    None => Warming::All,
                };
            } else {
                let mut warming = Vec::new();
                for name in &self.sub.names {
                    if let Some(e) = res.get(name) {
                        if pending.all || e.changed_seq > since || pending.names.contains(name) {
                            warming.push(Arc::clone(name));
                        }
                        built.entries.push(e.resource.sotw_entry().clone());
                    }
                }
                built.warming = Warming::Some(warming);
            }
            if let (Some(prev), true) = (retain_from, since < snap.seq) {
                let removed = snap
                    .changes_since(self.ty, since)
                    .map(|c| c.removed)
                    .unwrap_or_default();
                let prev = prev.resources_for(self.ty, view);
                let mut retained = 0;
                for name in removed.iter().filter(|n| self.sub.covers(n)) {
                    if let Some(e) = prev.get(name) {
                        built.version.add(name, e.resource.hash);
                        built.entries.push(e.resource.sotw_entry().clone());
                        retained += 1;
                    }
                }
                self.removals_held |= retained > 0;
                // Every change was a removal held back: the client holds this very set already,
                // and the response that removes them follows the push.
                if retained > 0
                    && !owed
                    && self
                        .sent
                        .as_ref()
                        .is_some_and(|s| s.version == built.version)
                {
                    return None;
                }
            }
            return Some(built);
        }
        // EDS / RDS: only what changed or is owed (SOTW-26).
        if pending.all
            && !self.sub.wildcard
            && let Some(names) = every_resource(&self.sub.names, &res)
        {
            // The names are exactly the type's resources (a proxy's first EDS request for all its
            // clusters): the same bytes for every such stream, shared whole in name order (see
            // `cache.rs`), found in one walk beside the resources.
            built.entries = vec![full_sets.get(self.ty, view, &res)];
            built.names = names;
            return Some(built);
        }
        let mut forced: BTreeSet<Arc<str>> = BTreeSet::new();
        let mut changed: BTreeSet<Arc<str>> = BTreeSet::new();
        if pending.all {
            if self.sub.wildcard {
                changed.extend(res.entries.keys().cloned());
            }
            forced.extend(self.sub.names.iter().cloned());
        } else if since < snap.seq {
            match snap.changes_since(self.ty, since) {
                Some(c) => changed.extend(c.changed.into_iter().filter(|n| self.sub.covers(n))),
                None if self.sub.wildcard => changed.extend(
                    res.entries
                        .iter()
                        .filter(|(_, e)| e.changed_seq > since)
                        .map(|(n, _)| Arc::clone(n)),
                ),
                None => changed.extend(
                    self.sub
                        .names
                        .iter()
                        .filter(|n| res.get(n).is_some_and(|e| e.changed_seq > since))
                        .cloned(),
                ),
            }
        }
        built.change_driven = !changed.is_empty() && since > 0;
        let mut names = Vec::new();
        forced.extend(pending.names.into_iter().filter(|n| self.sub.covers(n)));
        for name in forced.iter().chain(changed.difference(&forced)) {
            match res.get(name) {
                Some(e) => built.entries.push(e.resource.sotw_entry().clone()),
                // SOTW-27, BUG-3, G-6: an unknown cluster gets an empty CLA at once.
                None if self.ty == ResourceType::Endpoint && forced.contains(name) => {
                    built.entries.push(empty_cla(name).sotw_entry().clone())
                }
                // Unknown route names are remembered (they stay subscribed) and sent on creation.
                None => continue,
            }
            names.push(Arc::clone(name));
        }
        if built.entries.is_empty() && !pending.respond {
            return None;
        }
        if !res.is_empty() && names.len() == res.len() && names.iter().all(|n| res.get(n).is_some())
        {
            // Every resource of the type (a proxy's first EDS answer for all its clusters): the
            // same bytes for every such stream, shared whole in name order (see `cache.rs`).
            built.entries = vec![full_sets.get(self.ty, view, &res)];
        }
        built.names = names.into();
        Some(built)
    }

    /// Records that a response with `nonce` and `version` was handed to the body (SOTW-10).
    pub(crate) fn sent(&mut self, sent: Sent, names: Arc<[Arc<str>]>) {
        self.sent = Some(sent);
        if self.ty == ResourceType::Endpoint {
            for n in names.iter() {
                self.warming.remove(n);
            }
        }
        if !self.ty.full_state_in_sotw() {
            // A response carrying every subscribed name is about all of them, as a full-state
            // one is: nothing to keep (a proxy's first EDS answer names every cluster).
            let all = !self.sub.wildcard && names.len() == self.sub.names.len();
            self.last_names = (!all).then_some(names);
        }
    }

    /// The debug view of this type.
    pub(crate) fn status(&self) -> TypeStatus {
        TypeStatus {
            requested: self.sub.requested(),
            wildcard: self.sub.wildcard,
            names: self.sub.names.clone(),
            sent_nonce: self.sent.as_ref().map(|s| Arc::clone(&s.nonce)),
            sent_version: self.sent.as_ref().map(|s| Arc::clone(&s.version_text)),
            sent_at: self.sent.as_ref().map(|s| s.at),
            acked_nonce: self.acked.as_ref().map(|a| Arc::clone(&a.0)),
            acked_version: self.acked.as_ref().map(|a| Arc::clone(&a.1)),
            last_error: self.last_error.clone(),
            last_names: self.last_names.clone(),
        }
    }
}

/// `names` as a list when they are exactly the names of `res` (both sorted): one walk, no lookups.
fn every_resource(names: &OrdSet<Arc<str>>, res: &TypeResources) -> Option<Arc<[Arc<str>]>> {
    let same = names.len() == res.len()
        && names
            .iter()
            .zip(res.entries.keys())
            .all(|(a, b)| Arc::ptr_eq(a, b) || a == b);
    same.then(|| names.iter().cloned().collect())
}

#[cfg(test)]
mod tests;
