//! What a client subscribed to, for one resource type, and how a SotW or delta request changes it.
//!
//! Kept apart from the ACK/NACK machinery of either protocol so both share one subscription model
//! (wildcard flag + explicit names) and one reading of the wildcard rules (SOTW-21/22, DELTA-4/16,
//! G-3).

use std::sync::Arc;

use imbl::OrdSet;

use super::names::{SharedNames, delta_key};
use crate::envoy::ResourceType;
use crate::snapshot::TypeResources;

/// The explicit wildcard name (SOTW-21).
pub const WILDCARD: &str = "*";

/// The resources a client wants of one type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Subscription {
    /// Whether the client wants every resource of the type (explicit `"*"` or legacy empty list).
    pub wildcard: bool,
    /// Names asked for explicitly (never contains `"*"`). A persistent set, so debug views take a
    /// copy in O(1).
    pub names: OrdSet<Arc<str>>,
    /// Whether the client ever sent a non-empty name list on this stream: from then on an empty
    /// list means "nothing", never the legacy wildcard (SOTW-21 step 4).
    explicit_seen: bool,
    /// SotW: length and 128-bit hash of the last name list applied, so a request repeating it
    /// byte for byte (every EDS ACK of a proxy whose clusters did not change) is recognised by
    /// hashing its names once instead of looking each one up.
    last_list: Option<(usize, u128)>,
    /// Whether the client ever asked for the type on this stream (set by every request applied).
    requested: bool,
}

/// A SotW request's `resource_names`: a slice of decoded names, or a view over the request's
/// bytes that allocates nothing (`sotw/request.rs`).
pub trait SotwNames {
    /// How many names (repeats included).
    fn count(&self) -> usize;
    /// The count and an order-sensitive 128-bit hash of the list (length-prefixed names, xxh3), which
    /// recognises a repeated list without looking at its names one by one.
    fn list_key(&self) -> (usize, u128);
    /// The names, in request order.
    fn each(&self) -> impl Iterator<Item = &str>;
}

impl SotwNames for [String] {
    fn count(&self) -> usize {
        self.len()
    }

    fn list_key(&self) -> (usize, u128) {
        (self.len(), list_hash(self.iter().map(String::as_str)))
    }

    fn each(&self) -> impl Iterator<Item = &str> {
        self.iter().map(String::as_str)
    }
}

/// What a SotW request's newly subscribed names are taken from instead of being copied.
#[derive(Clone, Copy, Default)]
pub(crate) struct Known<'a> {
    /// The newest snapshot's resources of the type: a name that exists shares its key (`intern`).
    pub resources: Option<&'a TypeResources>,
    /// The name sets streams hold: a first list equal to one of them takes it whole.
    pub sets: Option<&'a SharedNames>,
}

/// How one request changed a [`Subscription`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Change {
    /// Names newly asked for.
    pub added: Vec<Arc<str>>,
    /// Names no longer asked for.
    pub removed: Vec<Arc<str>>,
    /// The wildcard was switched on.
    pub wildcard_on: bool,
    /// The wildcard was switched off.
    pub wildcard_off: bool,
}

impl Change {
    /// Whether the subscription changed at all.
    pub fn any(&self) -> bool {
        !self.added.is_empty() || !self.removed.is_empty() || self.wildcard_on || self.wildcard_off
    }
}

impl Subscription {
    /// Whether the client ever asked for the type on this stream.
    pub fn requested(&self) -> bool {
        self.requested
    }

    /// Whether a response may be sent for the type: it was asked for and something is (INV-5).
    pub fn subscribed(&self) -> bool {
        self.requested && !self.is_empty()
    }

    /// Whether nothing is subscribed: no response may be sent for the type (INV-5).
    pub fn is_empty(&self) -> bool {
        !self.wildcard && self.names.is_empty()
    }

    /// Whether `name` is wanted.
    pub fn covers(&self, name: &str) -> bool {
        self.wildcard || self.names.contains(name)
    }

    /// Replaces the subscription with the SotW request's `resource_names` (SOTW-20/21/22, G-3):
    /// - `"*"` anywhere means wildcard, plus any other names explicitly;
    /// - an empty list is the legacy wildcard only for types with [`ResourceType::legacy_wildcard`]
    ///   (LDS, CDS) and only while the client has never sent a non-empty list;
    /// - otherwise an empty list unsubscribes from everything.
    pub fn apply_sotw(&mut self, ty: ResourceType, requested: &[String]) -> Change {
        self.apply_sotw_known(ty, requested, Known::default())
    }

    /// [`Self::apply_sotw`], taking each newly subscribed name's `Arc` from `known` (the newest
    /// snapshot's resources of the type) when it names an existing resource, so the stream holds
    /// no copy of its own (see `intern`), or a first list's whole set from `known.sets`.
    /// `requested` may be any [`SotwNames`].
    pub(crate) fn apply_sotw_known<N: SotwNames + ?Sized>(
        &mut self,
        ty: ResourceType,
        requested: &N,
        known: Known<'_>,
    ) -> Change {
        self.requested = true;
        let list = requested.list_key();
        let repeated = self.last_list.replace(list) == Some(list);
        if self.explicit_seen && requested.count() != 0 && repeated {
            // Envoy repeats every EDS name in every ACK: recognise the unchanged list by its hash
            // instead of looking at thousands of names per ACK.
            return Change::default();
        }
        let mut change = Change::default();
        let wildcard = if requested.count() == 0 {
            change.removed = std::mem::take(&mut self.names).into_iter().collect();
            ty.legacy_wildcard() && !self.explicit_seen
        } else {
            self.explicit_seen = true;
            if let Some(done) = known.sets.and_then(|s| s.recall(&self.names, list)) {
                // A stream holding the same shared set sent this very list: its result, taken.
                change.added = done.added.to_vec();
                change.removed = done.removed.to_vec();
                self.names = done.names;
                return self.set_wildcard(done.wildcard, change);
            }
            let before = self.names.clone();
            // Sorted and without repeats (Envoy lists names in no particular order), the list is
            // compared with the sorted subscription in one walk: a 2,000-name list that gained one
            // name costs that walk and one insertion, not a new set; an unchanged list, nothing.
            let mut listed: Vec<&str> = requested.each().collect();
            if !listed.is_sorted() {
                listed.sort_unstable();
            }
            listed.dedup();
            let first = self.names.is_empty() && listed.binary_search(&WILDCARD).is_err();
            if let Some(set) = known.sets.filter(|_| first).and_then(|s| s.find(&listed)) {
                // Another stream's set with these very names: taken whole, nothing built.
                change.added = set.iter().cloned().collect();
                self.names = set;
                return self.set_wildcard(false, change);
            }
            let mut held = self.names.iter().peekable();
            for &name in listed.iter().filter(|n| **n != WILDCARD) {
                while let Some(gone) = held.next_if(|h| &***h < name) {
                    change.removed.push(Arc::clone(gone));
                }
                if held.next_if(|h| &***h == name).is_none() {
                    change.added.push(intern(name, known.resources));
                }
            }
            change.removed.extend(held.cloned());
            for name in &change.removed {
                self.names.remove(name);
            }
            for name in &change.added {
                self.names.insert(Arc::clone(name));
            }
            let wildcard = listed.contains(&WILDCARD);
            if let Some(sets) = known.sets.filter(|_| !self.names.ptr_eq(&before)) {
                let names = &mut self.names;
                let changed = (&change.added[..], &change.removed[..]);
                sets.share_change(&before, list, names, changed, wildcard);
            }
            wildcard
        };
        self.set_wildcard(wildcard, change)
    }

    /// Records the wildcard a SotW list left, and whether that switched it on or off.
    fn set_wildcard(&mut self, wildcard: bool, mut change: Change) -> Change {
        change.wildcard_on = wildcard && !self.wildcard;
        change.wildcard_off = !wildcard && self.wildcard;
        self.wildcard = wildcard;
        change
    }

    /// What of this subscription a SotW request naming `requested` leaves out, without applying
    /// it: whether it drops the wildcard, and which names. Read the way [`Self::apply_sotw`] reads
    /// a list.
    pub fn left_out_by_sotw<N: SotwNames + ?Sized>(
        &self,
        ty: ResourceType,
        requested: &N,
    ) -> (bool, Vec<Arc<str>>) {
        if requested.count() == 0 {
            if ty.legacy_wildcard() && !self.explicit_seen {
                // The legacy wildcard again: nothing left out.
                return (false, Vec::new());
            }
            return (self.wildcard, self.names.iter().cloned().collect());
        }
        if self.last_list == Some(requested.list_key()) {
            // The list last applied, again (a stale ACK, typically): nothing left out.
            return (false, Vec::new());
        }
        let named: std::collections::HashSet<&str> = requested.each().collect();
        let left_out = self
            .names
            .iter()
            .filter(|n| !named.contains(&***n))
            .cloned()
            .collect();
        (self.wildcard && !named.contains(WILDCARD), left_out)
    }

    /// Applies a delta request's `resource_names_subscribe` / `_unsubscribe` (DELTA-4, DELTA-16):
    /// - a `first` request with both lists empty is the legacy wildcard, for LDS/CDS only (G-3);
    /// - `"*"` in subscribe switches the wildcard on, in unsubscribe off; names are added and
    ///   removed one by one, subscribe first, so subscribing and unsubscribing `"*"` together is
    ///   "nothing" (DELTA-16);
    /// - later empty lists change nothing: the wildcard never comes back by itself.
    ///
    /// Unsubscribing a name never subscribed is a no-op (DELTA-6).
    pub fn apply_delta(
        &mut self,
        ty: ResourceType,
        first: bool,
        subscribe: &[String],
        unsubscribe: &[String],
    ) -> Change {
        self.apply_delta_known(ty, first, subscribe, unsubscribe, Known::default())
    }

    /// [`Self::apply_delta`], taking newly subscribed names from `known` when it has them, as
    /// [`Self::apply_sotw_known`] does: a subscription that starts with a list another stream's
    /// set holds takes that set whole.
    pub(crate) fn apply_delta_known(
        &mut self,
        ty: ResourceType,
        first: bool,
        subscribe: &[String],
        unsubscribe: &[String],
        known: Known<'_>,
    ) -> Change {
        self.requested = true;
        self.last_list = None;
        let mut change = Change::default();
        let was_wildcard = self.wildcard;
        // Only a request that names something can change the set (not an ACK): the clone is a
        // reference count on a root thousands of streams share.
        let before = (!subscribe.is_empty() || !unsubscribe.is_empty()).then(|| self.names.clone());
        if first && subscribe.is_empty() && unsubscribe.is_empty() && ty.legacy_wildcard() {
            self.wildcard = true;
        }
        let shared = known
            .sets
            .filter(|_| self.names.is_empty() && unsubscribe.is_empty())
            .and_then(|sets| {
                let mut listed: Vec<&str> = subscribe.iter().map(String::as_str).collect();
                if !listed.is_sorted() {
                    listed.sort_unstable();
                }
                listed.dedup();
                listed
                    .binary_search(&WILDCARD)
                    .is_err()
                    .then(|| sets.find(&listed))
                    .flatten()
            });
        if let Some(set) = shared {
            // Another stream's set with these very names: taken whole, nothing built.
            change.added = set.iter().cloned().collect();
            self.names = set;
        } else {
            for n in subscribe {
                if n == WILDCARD {
                    self.wildcard = true;
                } else if !self.names.contains(n.as_str()) {
                    let name = intern(n, known.resources);
                    self.names.insert(Arc::clone(&name));
                    change.added.push(name);
                }
            }
        }
        for n in unsubscribe {
            if n == WILDCARD {
                self.wildcard = false;
            } else if let Some(name) = self.names.remove(n.as_str()) {
                // A name subscribed and unsubscribed in the same request was never held.
                let before = change.added.len();
                change.added.retain(|a| *a != name);
                if change.added.len() == before {
                    change.removed.push(name);
                }
            }
        }
        if let (Some(sets), Some(before)) = (known.sets, &before)
            && !self.names.ptr_eq(before)
        {
            // Streams holding one shared set make the same change: the first shares the result,
            // the others take it (`names.rs`).
            let key = delta_key(subscribe, unsubscribe);
            match sets.recall(before, key) {
                Some(done) => self.names = done.names,
                None => {
                    let changed = (&change.added[..], &change.removed[..]);
                    sets.share_change(before, key, &mut self.names, changed, false);
                }
            }
        }
        change.wildcard_on = self.wildcard && !was_wildcard;
        change.wildcard_off = !self.wildcard && was_wildcard;
        change
    }
}

/// An order-sensitive hash of a SotW name list: of the list's canonical protobuf encoding as
/// `resource_names` entries (key, length, name), so no two lists share an encoding and a request
/// read from the wire can hash its entries' bytes as they are, a whole run at a time.
pub(crate) fn list_hash<'a>(names: impl IntoIterator<Item = &'a str>) -> u128 {
    let mut h = ListHasher::default();
    for n in names {
        h.add(n);
    }
    h.finish()
}

/// [`list_hash`], one name at a time.
#[derive(Default)]
pub(crate) struct ListHasher(xxhash_rust::xxh3::Xxh3);

impl ListHasher {
    /// The key of a `resource_names` entry (field 3, length-delimited).
    pub(crate) const ENTRY_KEY: u8 = (3 << 3) | 2;

    pub(crate) fn add(&mut self, name: &str) {
        let mut prefix = [0u8; 11];
        prefix[0] = Self::ENTRY_KEY;
        let len = 1 + encode_varint(name.len() as u64, &mut prefix[1..]);
        self.0.update(&prefix[..len]);
        self.0.update(name.as_bytes());
    }

    /// Adds entries already in canonical encoding ([`Self::add`]'s bytes for each of them).
    pub(crate) fn add_encoded(&mut self, entries: &[u8]) {
        self.0.update(entries);
    }

    pub(crate) fn finish(&self) -> u128 {
        self.0.digest128()
    }
}

/// Writes `v` as a base-128 varint into `out` (room for 10 bytes); returns its length.
pub(crate) fn encode_varint(mut v: u64, out: &mut [u8]) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        out[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    out[i] = v as u8;
    i + 1
}

/// `name` as a shared `Arc<str>`: the snapshot's own key when `known` has the resource, else a
/// new one. A proxy subscribes to the EDS name of every cluster it received, so thousands of
/// streams hold the same thousands of names; sharing the snapshot's keys makes each stream's
/// subscription cost its set's nodes, not a copy of every name.
fn intern(name: &str, known: Option<&TypeResources>) -> Arc<str> {
    known
        .and_then(|r| r.entries.get_key_value(name))
        .map_or_else(|| Arc::from(name), |(k, _)| Arc::clone(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn names(s: &Subscription) -> Vec<&str> {
        s.names.iter().map(|n| &**n).collect()
    }

    /// A hundred cluster names, listed in reverse.
    fn hundred_names() -> Vec<String> {
        (0..100).rev().map(|i| format!("c{i:03}")).collect()
    }

    /// Names are taken from `sets` only.
    fn shared_only(sets: &SharedNames) -> Known<'_> {
        Known {
            resources: None,
            sets: Some(sets),
        }
    }

    #[test]
    fn a_first_list_another_stream_holds_takes_its_set() {
        // The storm's case: thousands of proxies name the same 2,000 clusters.
        let sets = SharedNames::default();
        let (listed, known) = (hundred_names(), shared_only(&sets));
        let ty = ResourceType::Endpoint;
        let mut first = Subscription::default();
        first.apply_sotw_known(ty, &listed[..], known);

        let mut second = Subscription::default();
        let c = second.apply_sotw_known(ty, &listed[..], known);
        assert!(second.names.ptr_eq(&first.names));
        assert_eq!(c.added.len(), 100, "every name is new to this stream");
        assert!(!second.wildcard && !c.wildcard_on);
        // Its next list is read against the set as usual.
        let c = second.apply_sotw_known(ty, &listed[1..], known);
        assert_eq!(c.removed, vec![Arc::<str>::from("c099")]);
        assert_eq!(
            first.names.len(),
            100,
            "the other stream's set is untouched"
        );

        // With "*" the list is no set of names: read name by name.
        let mut wild = Subscription::default();
        let mut with_wildcard = listed.clone();
        with_wildcard.push(WILDCARD.into());
        let c = wild.apply_sotw_known(ResourceType::Cluster, &with_wildcard[..], known);
        assert!(wild.wildcard && c.wildcard_on);
        assert_eq!(c.added.len(), 100);
        // The set it built is shared once built, as every changed set is.
        assert!(wild.names.ptr_eq(&first.names));
    }

    #[test]
    fn spec_four_step_wildcard_sequence_on_cds() {
        // SOTW-21
        let mut s = Subscription::default();
        let ty = ResourceType::Cluster;
        s.apply_sotw(ty, &req(&[]));
        assert!(s.wildcard && s.names.is_empty());
        let c = s.apply_sotw(ty, &req(&["*", "A"]));
        assert!(s.wildcard);
        assert_eq!(names(&s), ["A"]);
        assert_eq!(c.added, vec![Arc::<str>::from("A")]);
        let c = s.apply_sotw(ty, &req(&["A"]));
        assert!(!s.wildcard && c.wildcard_off);
        assert_eq!(names(&s), ["A"]);
        s.apply_sotw(ty, &req(&[]));
        assert!(s.is_empty());
    }

    #[test]
    fn explicit_wildcard_then_empty_unsubscribes() {
        // SOTW-21
        let mut s = Subscription::default();
        let ty = ResourceType::Listener;
        s.apply_sotw(ty, &req(&["*"]));
        assert!(s.wildcard);
        s.apply_sotw(ty, &req(&[]));
        assert!(s.is_empty());
        assert!(s.apply_sotw(ty, &req(&["*"])).wildcard_on);
    }

    #[test]
    fn empty_is_never_wildcard_for_eds_and_rds() {
        // SOTW-22, G-3
        for ty in [ResourceType::Endpoint, ResourceType::Route] {
            let mut s = Subscription::default();
            s.apply_sotw(ty, &req(&[]));
            assert!(s.is_empty());
        }
    }

    fn delta(s: &mut Subscription, ty: ResourceType, sub: &[&str], unsub: &[&str]) -> Change {
        let first = s == &Subscription::default();
        s.apply_delta(ty, first, &req(sub), &req(unsub))
    }

    #[test]
    fn delta_wildcard_lifecycle() {
        // DELTA-4: legacy wildcard, names keep it, "*" unsubscribe ends it, empty never revives it.
        let ty = ResourceType::Cluster;
        let mut s = Subscription::default();
        assert!(delta(&mut s, ty, &[], &[]).wildcard_on);
        let c = delta(&mut s, ty, &["a"], &[]);
        assert!(s.wildcard && c.added == vec![Arc::<str>::from("a")]);
        let c = delta(&mut s, ty, &[], &["*"]);
        assert!(!s.wildcard && c.wildcard_off);
        assert_eq!(names(&s), ["a"]);
        assert!(!delta(&mut s, ty, &[], &[]).any());
        assert!(!s.wildcard);
    }

    #[test]
    fn delta_subscribe_and_unsubscribe_star_is_nothing() {
        // DELTA-16
        let mut s = Subscription::default();
        let c = delta(&mut s, ResourceType::Listener, &["*"], &["*"]);
        assert!(s.is_empty() && !c.any());
    }

    #[test]
    fn delta_legacy_wildcard_only_for_lds_and_cds() {
        // G-3
        for ty in [ResourceType::Endpoint, ResourceType::Route] {
            let mut s = Subscription::default();
            delta(&mut s, ty, &[], &[]);
            assert!(s.is_empty());
        }
    }

    #[test]
    fn delta_phantom_unsubscribe_and_resubscribe_are_clean() {
        // DELTA-6
        let ty = ResourceType::Endpoint;
        let mut s = Subscription::default();
        delta(&mut s, ty, &["a"], &[]);
        assert!(!delta(&mut s, ty, &[], &["never"]).any());
        let c = delta(&mut s, ty, &["b"], &["b", "a"]);
        assert_eq!(c.added, Vec::<Arc<str>>::new());
        assert_eq!(c.removed, vec![Arc::<str>::from("a")]);
        assert!(s.is_empty());
    }

    #[test]
    fn an_unchanged_list_changes_nothing_even_reordered_or_repeated() {
        let ty = ResourceType::Endpoint;
        let mut s = Subscription::default();
        s.apply_sotw(ty, &req(&["a", "b"]));
        assert!(!s.apply_sotw(ty, &req(&["b", "a", "b"])).any());
        assert_eq!(names(&s), ["a", "b"]);
        // same length, one name swapped: not the same list
        let c = s.apply_sotw(ty, &req(&["a", "a", "c"]));
        assert_eq!(c.removed, vec![Arc::<str>::from("b")]);
        assert_eq!(names(&s), ["a", "c"]);
        let c = s.apply_sotw(ty, &req(&["a", "c", "*"]));
        assert!(c.wildcard_on);
    }

    #[test]
    fn a_repeated_list_is_recognised_and_a_changed_one_is_not() {
        let ty = ResourceType::Endpoint;
        let mut s = Subscription::default();
        s.apply_sotw(ty, &req(&["a", "b"]));
        assert!(!s.apply_sotw(ty, &req(&["a", "b"])).any());
        // Same names joined differently: a different list.
        let c = s.apply_sotw(ty, &req(&["ab"]));
        assert_eq!(c.added, vec![Arc::<str>::from("ab")]);
        assert_eq!(names(&s), ["ab"]);
        assert!(!s.apply_sotw(ty, &req(&["ab"])).any());
    }

    #[test]
    fn duplicates_collapse_and_changes_are_reported() {
        let mut s = Subscription::default();
        let ty = ResourceType::Endpoint;
        s.apply_sotw(ty, &req(&["a", "b", "a"]));
        assert_eq!(names(&s), ["a", "b"]);
        let c = s.apply_sotw(ty, &req(&["b", "c"]));
        assert_eq!(c.added, vec![Arc::<str>::from("c")]);
        assert_eq!(c.removed, vec![Arc::<str>::from("a")]);
    }

    #[test]
    fn a_first_delta_subscribe_another_stream_holds_takes_its_set() {
        // The delta storm's case: every proxy subscribes to the same clusters' EDS.
        let sets = SharedNames::default();
        let (listed, known) = (hundred_names(), shared_only(&sets));
        let ty = ResourceType::Endpoint;
        let mut first = Subscription::default();
        first.apply_delta_known(ty, true, &listed, &[], known);

        let mut second = Subscription::default();
        let c = second.apply_delta_known(ty, true, &listed, &[], known);
        assert!(second.names.ptr_eq(&first.names), "taken whole");
        assert_eq!(c.added.len(), 100);
        assert!(!second.wildcard && !c.wildcard_on);
        // Later requests change it name by name, the other stream's set untouched.
        let c = second.apply_delta_known(ty, false, &[], &listed[..1], known);
        assert_eq!(c.removed, vec![Arc::<str>::from("c099")]);
        assert_eq!(first.names.len(), 100);

        // Not when it adds to names already held, nor with "*".
        let mut held = Subscription::default();
        held.apply_delta_known(ty, true, &req(&["x"]), &[], known);
        held.apply_delta_known(ty, false, &listed, &[], known);
        assert!(!held.names.ptr_eq(&first.names));
        assert_eq!(held.names.len(), 101);
        let mut wild = Subscription::default();
        let mut with_wildcard = listed.clone();
        with_wildcard.push(WILDCARD.into());
        let c = wild.apply_delta_known(ResourceType::Cluster, true, &with_wildcard, &[], known);
        assert!(wild.wildcard && c.wildcard_on);
        assert_eq!(c.added.len(), 100);
        // The set it built is shared once built, as every changed set is.
        assert!(wild.names.ptr_eq(&first.names));
    }

    #[test]
    fn streams_holding_one_set_take_the_result_of_the_same_change() {
        // A new service: every proxy holding the shared set adds the new cluster.
        let sets = SharedNames::default();
        let (listed, known) = (hundred_names(), shared_only(&sets));
        let ty = ResourceType::Endpoint;
        let mut longer = listed.clone();
        longer.push("new".into());
        let mut sotw: Vec<Subscription> = (0..3).map(|_| Subscription::default()).collect();
        for s in &mut sotw {
            s.apply_sotw_known(ty, &listed[..], known);
        }
        let changes: Vec<Change> = sotw
            .iter_mut()
            .map(|s| s.apply_sotw_known(ty, &longer[..], known))
            .collect();
        for (s, c) in sotw.iter().zip(&changes) {
            assert!(s.names.ptr_eq(&sotw[0].names), "one set for all");
            assert_eq!(c.added, vec![Arc::<str>::from("new")]);
            assert!(c.removed.is_empty() && !s.wildcard);
        }
        assert_eq!(sotw[0].names.len(), 101);

        let mut delta: Vec<Subscription> = (0..3).map(|_| Subscription::default()).collect();
        for s in &mut delta {
            s.apply_delta_known(ty, true, &listed, &[], known);
        }
        for s in &mut delta {
            let c = s.apply_delta_known(ty, false, &req(&["new"]), &listed[..1], known);
            assert_eq!(c.added, vec![Arc::<str>::from("new")]);
            assert_eq!(c.removed, vec![Arc::<str>::from("c099")]);
        }
        for s in &delta {
            assert!(s.names.ptr_eq(&delta[0].names), "one set for all");
            assert!(s.names.contains("new") && !s.names.contains("c099"));
        }
        assert_eq!(delta[0].names.len(), 100);
        assert!(
            !delta[0].names.ptr_eq(&sotw[0].names),
            "a delta change is never taken for a SotW list"
        );
    }

    #[test]
    fn an_unordered_list_is_compared_in_order_and_kept_names_stay_shared() {
        let ty = ResourceType::Endpoint;
        let mut s = Subscription::default();
        s.apply_sotw(ty, &req(&["d", "b", "f", "a"]));
        let kept = s.names.get("d").cloned().expect("d is subscribed");
        let c = s.apply_sotw(ty, &req(&["e", "d", "c", "a", "g", "c"]));
        assert_eq!(c.added, ["c", "e", "g"].map(Arc::<str>::from));
        assert_eq!(c.removed, ["b", "f"].map(Arc::<str>::from));
        assert_eq!(names(&s), ["a", "c", "d", "e", "g"]);
        assert!(Arc::ptr_eq(&kept, s.names.get("d").expect("d is kept")));
    }
}
