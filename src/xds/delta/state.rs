//! The delta protocol state of one resource type on one stream: subscriptions, ACK/NACK
//! bookkeeping, and what the next response carries.
//!
//! One cohesive state machine, deliberately in one file, and pure (no I/O) so every DELTA rule is
//! unit-tested. The stream owns one per type.
//!
//! What the client holds is tracked without copying it: `view` is the [`TypeResources`] map the
//! last response was built from. For every name the subscription covered then and still covers,
//! the client holds exactly that map's entry, or nothing when the map has none. The next response
//! is the part of `view.diff(newest)` the subscription covers, plus what is owed by the requests
//! since. Maps are persistent and share structure between snapshots, so the diff skips everything
//! unchanged (it costs the change, not the mesh, DELTA-8), and `view` is the same allocation every
//! up-to-date stream shares: per stream, memory is the subscription and what is owed, both bounded
//! by what the client asked for. A slow client simply diffs from an older map to the newest one and
//! skips every snapshot in between.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use imbl::OrdSet;

use super::super::connections::TypeStatus;
use super::super::diffs::{Change, DiffCache, SharedResponse};
use super::super::names::MIN_SHARED_LEN;
use super::super::per_type::TypeState;
use super::super::record::{MAX_ERROR_BYTES, Sent, bounded};
use super::super::request::Kind;
use super::super::subscription::{Known, Subscription, WILDCARD};
use crate::envoy::{EncodedResource, ResourceType};
use crate::snapshot::{Entry, Snapshot, TypeResources, TypeVersion, View};

/// One delta request, as far as this state is concerned.
#[derive(Default)]
pub(crate) struct Request<'a> {
    pub nonce: &'a str,
    pub subscribe: &'a [String],
    pub unsubscribe: &'a [String],
    /// `initial_resource_versions`: only read on the first request of the type (DELTA-11).
    pub initial_versions: Option<&'a HashMap<String, String>>,
    /// `error_detail.message` when present.
    pub error: Option<&'a str>,
    /// The newest snapshot's resources of the type, whose name `Arc`s new subscriptions share,
    /// and the name sets streams hold.
    pub known: Known<'a>,
}

/// What the client is owed beyond what changed in the snapshot.
#[derive(Debug, Default)]
struct Owed {
    /// Every resource the subscription covers (first request, wildcard switched on, admin push).
    all: bool,
    /// These names, when covered: sent if they exist, even unchanged (DELTA-7), and listed as
    /// removed if they do not (DELTA-10).
    names: BTreeSet<Arc<str>>,
    /// Answer even with nothing to send (the first request: the client's initial fetch ends).
    respond: bool,
    /// The first request's `initial_resource_versions` (DELTA-11): what a reconnecting client
    /// already holds. Bounded by the request size limit; dropped once the first response is
    /// acknowledged.
    initial_versions: Option<HashMap<Arc<str>, Box<str>>>,
}

impl Owed {
    fn is_empty(&self) -> bool {
        !self.all && !self.respond && self.names.is_empty() && self.initial_versions.is_none()
    }
}

/// A response's content, ready to frame.
#[derive(Debug)]
pub(crate) struct DeltaBuilt {
    /// The type version of the snapshot it came from, for `system_version_info` (debug only).
    pub version: TypeVersion,
    /// Resources to send, in name order.
    pub resources: Vec<Arc<EncodedResource>>,
    /// Names to list in `removed_resources`, in name order; disjoint from `resources` (INV-4).
    pub removed: Vec<Arc<str>>,
    /// Whether snapshot changes (not only the client's requests) caused it.
    pub change_driven: bool,
    /// Set when `resources` is every resource of this map and nothing is removed: the response's
    /// entries are then the same bytes for every stream and can be shared whole (see `cache.rs`).
    pub whole_set: Option<Arc<TypeResources>>,
    /// The map the client's view came from before this response; `None` for its first response.
    pub previous: Option<Arc<TypeResources>>,
    /// The response every stream making the same change with the same subscription sends (its
    /// nonce and bytes; `diffs.rs`); `None` when this one is the stream's own.
    pub shared: Option<Arc<SharedResponse>>,
}

impl DeltaBuilt {
    /// The map the client's view came from before this response; `None` for its first response.
    pub(crate) fn previous(&self) -> Option<&TypeResources> {
        self.previous.as_deref()
    }
}

/// The delta state of one type on one stream.
#[derive(Debug)]
pub(crate) struct DeltaState {
    ty: ResourceType,
    sub: Subscription,
    /// The map the last response was built from (see the module doc); `None` before the first
    /// response or while nothing is subscribed.
    view: Option<Arc<TypeResources>>,
    owed: Owed,
    sent: Option<Sent>,
    acked: Option<(Arc<str>, Arc<str>)>,
    last_error: Option<String>,
    /// The snapshot this type was last brought up to.
    synced_seq: u64,
    /// CDS over ADS: clusters removed by a push whose listeners and routes have not gone out yet;
    /// their removal follows them (make-before-break, SOTW-31).
    deferred_removals: Vec<Arc<str>>,
}

impl TypeState for DeltaState {
    fn new(ty: ResourceType) -> Self {
        Self::new(ty)
    }
}

impl DeltaState {
    pub(crate) fn new(ty: ResourceType) -> Self {
        Self {
            ty,
            sub: Subscription::default(),
            view: None,
            owed: Owed::default(),
            sent: None,
            acked: None,
            last_error: None,
            synced_seq: 0,
            deferred_removals: Vec::new(),
        }
    }

    /// The subscription (its names are shared with equal sets of other streams, `names.rs`).
    pub(crate) fn sub(&self) -> &Subscription {
        &self.sub
    }

    /// Whether a response may be sent for this type (INV-5).
    pub(crate) fn subscribed(&self) -> bool {
        self.sub.subscribed()
    }

    /// Whether the next build may produce a response, given the newest snapshot `latest_seq`.
    pub(crate) fn has_work(&self, latest_seq: u64) -> bool {
        self.subscribed() && (self.synced_seq < latest_seq || !self.owed.is_empty())
    }

    /// Applies one request (DELTA-2/3/4/5/6/7/10/11/14/16) and says what it was.
    pub(crate) fn on_request(&mut self, req: &Request<'_>) -> Kind {
        let first = !self.sub.requested();
        let matches_sent = self.sent.as_ref().is_some_and(|s| *s.nonce == *req.nonce);
        let kind = if let Some(message) = req.error {
            // DELTA-14: record; the versions it rejected are not sent again, later changes are.
            self.last_error = Some(bounded(message, MAX_ERROR_BYTES));
            Kind::Nack
        } else if first {
            Kind::Initial
        } else if req.nonce.is_empty() {
            Kind::Update
        } else if let Some(sent) = self.sent.as_ref().filter(|_| matches_sent) {
            // What was sent, shared: the ACK names our nonce and the version is ours (DELTA-3).
            self.acked = Some((Arc::clone(&sent.nonce), Arc::clone(&sent.version_text)));
            self.last_error = None;
            Kind::Ack
        } else {
            Kind::Stale
        };
        let change =
            self.sub
                .apply_delta_known(self.ty, first, req.subscribe, req.unsubscribe, req.known);
        if self.sub.is_empty() {
            // Nothing wanted: nothing owed, and what the client held no longer matters.
            self.owed = Owed::default();
            self.view = None;
            self.deferred_removals.clear();
            return kind;
        }
        if first {
            self.owed.all = true;
            self.owed.respond = true;
            self.owed.initial_versions =
                req.initial_versions
                    .filter(|irv| !irv.is_empty())
                    .map(|irv| {
                        irv.iter()
                            .map(|(n, v)| (Arc::from(n.as_str()), Box::from(v.as_str())))
                            .collect()
                    });
            return kind;
        }
        if change.wildcard_on {
            self.owed.all = true;
            self.owed.respond = true;
        }
        for name in req.subscribe.iter().filter(|n| *n != WILDCARD) {
            // DELTA-7, DELTA-10: every name in subscribe is answered, even one already held.
            if let Some(name) = self.sub.names.get(name.as_str()) {
                self.owed.names.insert(Arc::clone(name));
                self.owed.respond = true;
            }
        }
        for name in change.removed {
            if self.sub.wildcard {
                // DELTA-5: the client dropped it, but the wildcard still wants it.
                self.owed.names.insert(name);
            } else {
                // DELTA-6: nothing to say.
                self.owed.names.remove(&name);
            }
        }
        kind
    }

    /// Whether a response built from `snap` would carry something for this client: something owed,
    /// or a change to a covered name since the map the last response came from. Costs the size of
    /// the change (the maps share structure), not of the mesh, worked out once for all streams
    /// (`diffs.rs`).
    pub(crate) fn would_send(&self, snap: &Snapshot, view: View, diffs: &DiffCache) -> bool {
        if !self.subscribed() {
            return false;
        }
        if !self.owed.is_empty() {
            return true;
        }
        if self.synced_seq >= snap.seq {
            return false;
        }
        let Some(held) = &self.view else {
            return true;
        };
        let res = snap.resources_for(self.ty, view);
        !held.entries.ptr_eq(&res.entries)
            && diffs
                .between(held, &res)
                .changes
                .iter()
                .any(|c| self.sub.covers(&c.name))
    }

    /// Owes `names` again if they are subscribed (admin push, CDS warming).
    pub(crate) fn owe(&mut self, names: impl IntoIterator<Item = Arc<str>>) {
        if !self.subscribed() {
            return;
        }
        for name in names {
            if self.sub.covers(&name) {
                self.owed.names.insert(name);
            }
        }
    }

    /// Owes everything subscribed (`/debug/adsz?push=true`).
    pub(crate) fn force_all(&mut self) {
        if self.subscribed() {
            self.owed.all = true;
            self.owed.respond = true;
        }
    }

    /// Owes the removals held back by [`Self::build`] with `defer_removals` (end of an ADS push).
    pub(crate) fn release_deferred(&mut self) {
        let names = std::mem::take(&mut self.deferred_removals);
        self.owe(names);
    }

    /// Computes the next response from `snap`, consuming what was owed, and records `snap`'s map as
    /// the client's view. `None` when there is nothing to send.
    ///
    /// With `defer_removals`, removals found by the diff are held back (see
    /// [`Self::release_deferred`]); owed names that do not exist are still answered at once.
    pub(crate) fn build(
        &mut self,
        snap: &Snapshot,
        view: View,
        defer_removals: bool,
        diffs: &DiffCache,
    ) -> Option<DeltaBuilt> {
        self.synced_seq = self.synced_seq.max(snap.seq);
        if !self.subscribed() {
            return None;
        }
        let owed = std::mem::take(&mut self.owed);
        let res = snap.resources_for(self.ty, view);
        if owed.is_empty() && !defer_removals {
            if let Some(held) = self.view.replace(Arc::clone(&res)) {
                return self.shared(held, res, diffs);
            }
            self.view = None;
        }
        let mut out = Picked::default();
        let mut change_driven = false;
        if let Some(held) = &owed.initial_versions {
            self.reconcile(&res, held, &mut out);
        } else {
            if let Some(view) = self.view.clone() {
                self.diff(&view, &res, defer_removals, diffs, &mut out);
                change_driven = !out.is_empty();
            }
            if owed.all || self.view.is_none() {
                if self.sub.wildcard {
                    out.send
                        .extend(res.entries.values().map(|e| Arc::clone(&e.resource)));
                }
                out.answer_all(&res, &self.sub.names);
            }
        }
        for name in owed.names.iter().filter(|n| self.sub.covers(n)) {
            out.answer(&res, name);
        }
        let previous = self.view.replace(Arc::clone(&res));
        if out.is_empty() && !owed.respond {
            return None;
        }
        let (resources, removed) = out.finish();
        // `resources` holds entries of `res` only, so the same count means the same set.
        let whole = removed.is_empty() && !resources.is_empty() && resources.len() == res.len();
        Some(DeltaBuilt {
            version: res.version,
            whole_set: whole.then(|| Arc::clone(&res)),
            resources,
            removed,
            change_driven,
            previous,
            shared: None,
        })
    }

    /// A response for nothing but the change from `held` to `res`: for a subscription other
    /// streams share (`names.rs`), or a wildcard one, the one response they all send.
    fn shared(
        &self,
        held: Arc<TypeResources>,
        res: Arc<TypeResources>,
        diffs: &DiffCache,
    ) -> Option<DeltaBuilt> {
        if held.entries.ptr_eq(&res.entries) {
            // The type did not change (every other type's push).
            return None;
        }
        let transition = diffs.between(&held, &res);
        let pick = || {
            let mut out = Picked::default();
            out.changes(&transition.changes, &self.sub, None);
            out.finish()
        };
        let names = (!self.sub.wildcard).then_some(&self.sub.names);
        let (resources, removed, shared) = if names.is_none_or(|n| n.len() >= MIN_SHARED_LEN) {
            let shared = transition.response(names, pick);
            (
                shared.resources.clone(),
                shared.removed.clone(),
                Some(shared),
            )
        } else {
            let (resources, removed) = pick();
            (resources, removed, None)
        };
        if resources.is_empty() && removed.is_empty() {
            return None;
        }
        let whole = removed.is_empty() && resources.len() == res.len();
        Some(DeltaBuilt {
            version: res.version,
            whole_set: whole.then(|| Arc::clone(&res)),
            resources,
            removed,
            change_driven: true,
            previous: Some(held),
            shared,
        })
    }

    /// What changed between the client's `view` and `res`, for the names the subscription covers
    /// (DELTA-8, DELTA-9). Shared subtrees are skipped: this costs the change, worked out once for
    /// all streams going from `view` to `res` (`diffs.rs`).
    fn diff(
        &mut self,
        view: &Arc<TypeResources>,
        res: &Arc<TypeResources>,
        defer_removals: bool,
        diffs: &DiffCache,
        out: &mut Picked,
    ) {
        if view.entries.ptr_eq(&res.entries) {
            // The type did not change (every other type's push): nothing to walk.
            return;
        }
        let deferred = defer_removals.then_some(&mut self.deferred_removals);
        out.changes(&diffs.between(view, res).changes, &self.sub, deferred);
    }

    /// DELTA-11/12: the first response to a reconnecting client that already holds `held`: what
    /// differs or is new, and removals for what it holds that no longer exists. Names it holds at
    /// the current version are skipped.
    fn reconcile(&self, res: &TypeResources, held: &HashMap<Arc<str>, Box<str>>, out: &mut Picked) {
        let stale =
            |name: &str, e: &Entry| held.get(name).is_none_or(|v| **v != *e.resource.version);
        if self.sub.wildcard {
            for (_, e) in res.entries.iter().filter(|(n, e)| stale(n, e)) {
                out.send.push(Arc::clone(&e.resource));
            }
            for name in held.keys().filter(|n| res.get(n).is_none()) {
                out.removed.push(Arc::clone(name));
            }
        }
        for name in &self.sub.names {
            match res.get(name) {
                Some(e) if !stale(name, e) => {}
                Some(e) => out.send.push(Arc::clone(&e.resource)),
                None => out.removed.push(Arc::clone(name)),
            }
        }
    }

    /// Records that the response `built` came from went out with `nonce`.
    pub(crate) fn sent(&mut self, sent: Sent) {
        self.sent = Some(sent);
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
            last_names: None,
        }
    }
}

/// Sends `name` if it exists, else lists it as removed (DELTA-10).
/// What a response carries, gathered from the diff, the subscription and owed names in any
/// order, possibly twice; put in name order without repeats once ([`Self::finish`]): pushing and
/// sorting an already sorted list once costs a fraction of keeping an ordered map (a first EDS
/// response of 2,000 clusters to each of thousands of proxies in a storm).
#[derive(Default)]
struct Picked {
    send: Vec<Arc<EncodedResource>>,
    removed: Vec<Arc<str>>,
}

impl Picked {
    fn is_empty(&self) -> bool {
        self.send.is_empty() && self.removed.is_empty()
    }

    /// The `changes` `sub` covers (DELTA-8, DELTA-9); removals go to `deferred` instead when
    /// given (make-before-break, SOTW-31).
    fn changes(
        &mut self,
        changes: &[Change],
        sub: &Subscription,
        mut deferred: Option<&mut Vec<Arc<str>>>,
    ) {
        for change in changes.iter().filter(|c| sub.covers(&c.name)) {
            match (&change.now, deferred.as_deref_mut()) {
                (Some(resource), _) => self.send.push(Arc::clone(resource)),
                (None, Some(deferred)) => deferred.push(Arc::clone(&change.name)),
                (None, None) => self.removed.push(Arc::clone(&change.name)),
            }
        }
    }

    /// `name` as it is in `res`: sent if there, removed if not.
    fn answer(&mut self, res: &TypeResources, name: &Arc<str>) {
        match res.get(name) {
            Some(e) => self.send.push(Arc::clone(&e.resource)),
            None => self.removed.push(Arc::clone(name)),
        }
    }

    /// [`Self::answer`] for each of `names`: by one walk of both in order when they are many for
    /// the map (a proxy's first EDS request names every cluster), by lookups when they are few.
    fn answer_all(&mut self, res: &TypeResources, names: &OrdSet<Arc<str>>) {
        if names.len() * 8 < res.len() {
            for name in names {
                self.answer(res, name);
            }
            return;
        }
        let mut entries = res.entries.iter().peekable();
        for name in names {
            while entries.next_if(|(n, _)| ***n < **name).is_some() {}
            match entries.next_if(|(n, _)| ***n == **name) {
                Some((_, e)) => self.send.push(Arc::clone(&e.resource)),
                None => self.removed.push(Arc::clone(name)),
            }
        }
    }

    /// The resources and the removed names, each in name order without repeats. Both only ever
    /// hold what one map says of a name, so they are disjoint (INV-4).
    fn finish(mut self) -> (Vec<Arc<EncodedResource>>, Vec<Arc<str>>) {
        self.send.sort_by(|a, b| a.name.cmp(&b.name));
        self.send.dedup_by(|a, b| a.name == b.name);
        self.removed.sort();
        self.removed.dedup();
        (self.send, self.removed)
    }
}

#[cfg(test)]
mod tests;
