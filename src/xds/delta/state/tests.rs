//! Unit tests of the per-type delta state machine, without a transport.

use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;

use super::*;
use crate::snapshot::{BuildInput, SnapshotBuilder};
use crate::xds::names::SharedNames;

fn cluster(name: &str, tag: &str) -> EncodedResource {
    let c = Cluster {
        name: name.into(),
        alt_stat_name: tag.into(),
        ..Default::default()
    };
    EncodedResource::encode(ResourceType::Cluster, name, &c)
}

/// Builds the next snapshot: `upserts` as `(name, tag)`, then `removes`.
fn next(b: &mut SnapshotBuilder, upserts: &[(&str, &str)], removes: &[&str]) -> Arc<Snapshot> {
    b.build(BuildInput {
        upserts: upserts.iter().map(|(n, t)| cluster(n, t)).collect(),
        removes: removes
            .iter()
            .map(|n| (ResourceType::Cluster, Arc::from(*n)))
            .collect(),
        ..Default::default()
    })
    .expect("a change")
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Sends a request; `nonce` "" for none.
fn request(st: &mut DeltaState, nonce: &str, sub: &[&str], unsub: &[&str]) -> Kind {
    let (sub, unsub) = (strings(sub), strings(unsub));
    st.on_request(&Request {
        nonce,
        subscribe: &sub,
        unsubscribe: &unsub,
        ..Default::default()
    })
}

/// Builds and records a response; returns (sent names with their `alt_stat_name`, removed names).
fn respond(st: &mut DeltaState, s: &Snapshot, nonce: &str) -> Option<(Vec<String>, Vec<String>)> {
    let built = st.build(s, View::Envoy, false, &DiffCache::default())?;
    let sent = built
        .resources
        .iter()
        .map(|r| {
            let c = Cluster::decode(&r.to_any().value[..]).expect("a cluster");
            format!("{}:{}", r.name, c.alt_stat_name)
        })
        .collect();
    let removed = built.removed.iter().map(|n| n.to_string()).collect();
    st.sent(Sent::spelled(nonce, built.version));
    Some((sent, removed))
}

use prost::Message;

fn cds() -> DeltaState {
    DeltaState::new(ResourceType::Cluster)
}

#[test]
fn spec_four_step_wildcard_example() {
    // DELTA-4, the spec's example: legacy wildcard, add a name, drop "*", empty stays non-wildcard.
    let mut b = SnapshotBuilder::new();
    let s1 = next(&mut b, &[("a", "1"), ("b", "1")], &[]);
    let mut st = cds();
    assert_eq!(request(&mut st, "", &[], &[]), Kind::Initial);
    assert_eq!(
        respond(&mut st, &s1, "n1"),
        Some((strings(&["a:1", "b:1"]), vec![]))
    );
    assert_eq!(request(&mut st, "n1", &["c"], &[]), Kind::Ack);
    // DELTA-10: "c" does not exist: removed, and stays subscribed.
    assert_eq!(respond(&mut st, &s1, "n2"), Some((vec![], strings(&["c"]))));
    request(&mut st, "n2", &[], &["*"]);
    assert!(!st.sub.wildcard);
    // Out of the wildcard, only "c" is wanted now: its creation is pushed, "b" changing is not.
    let s2 = next(&mut b, &[("b", "2"), ("c", "1")], &[]);
    assert_eq!(
        respond(&mut st, &s2, "n3"),
        Some((strings(&["c:1"]), vec![]))
    );
    request(&mut st, "n3", &[], &[]);
    assert!(!st.sub.wildcard && st.sub.names.len() == 1);
}

#[test]
fn updates_carry_only_changed_resources() {
    // DELTA-8, DELTA-9
    let mut b = SnapshotBuilder::new();
    let s1 = next(&mut b, &[("a", "1"), ("b", "1"), ("c", "1")], &[]);
    let mut st = cds();
    request(&mut st, "", &[], &[]);
    respond(&mut st, &s1, "n1");
    request(&mut st, "n1", &[], &[]);
    let s2 = next(&mut b, &[("b", "2")], &["c"]);
    assert_eq!(
        respond(&mut st, &s2, "n2"),
        Some((strings(&["b:2"]), strings(&["c"])))
    );
    // Content that comes back to what the client holds is not a change for it.
    let s3 = next(&mut b, &[("a", "x")], &[]);
    let s4 = next(&mut b, &[("a", "1")], &[]);
    assert!(st.has_work(s4.seq));
    assert_eq!(respond(&mut st, &s4, "n3"), None);
    assert!(!st.has_work(s4.seq));
    let _ = s3;
}

#[test]
fn slow_client_skips_snapshots_and_ends_at_the_latest() {
    // A client that could not take responses for several builds gets one diff to the newest.
    let mut b = SnapshotBuilder::new();
    let s1 = next(&mut b, &[("a", "1"), ("b", "1")], &[]);
    let mut st = cds();
    request(&mut st, "", &[], &[]);
    respond(&mut st, &s1, "n1");
    next(&mut b, &[("c", "1")], &[]);
    next(&mut b, &[("c", "2"), ("a", "2")], &["b"]);
    let s4 = next(&mut b, &[("d", "1")], &["c"]);
    assert_eq!(
        respond(&mut st, &s4, "n2"),
        Some((strings(&["a:2", "d:1"]), strings(&["b"])))
    );
}

#[test]
fn wildcard_and_name_then_unsubscribe_name_resends_it() {
    // DELTA-5
    let mut b = SnapshotBuilder::new();
    let s1 = next(&mut b, &[("a", "1")], &[]);
    let mut st = cds();
    request(&mut st, "", &["*", "a", "ghost"], &[]);
    respond(&mut st, &s1, "n1");
    request(&mut st, "n1", &[], &["a", "ghost"]);
    assert_eq!(
        respond(&mut st, &s1, "n2"),
        Some((strings(&["a:1"]), strings(&["ghost"])))
    );
}

#[test]
fn unsubscribe_without_wildcard_needs_no_response_and_phantoms_are_ignored() {
    // DELTA-6
    let mut b = SnapshotBuilder::new();
    let s1 = next(&mut b, &[("a", "1"), ("b", "1")], &[]);
    let mut st = DeltaState::new(ResourceType::Cluster);
    request(&mut st, "", &["a", "b"], &[]);
    respond(&mut st, &s1, "n1");
    request(&mut st, "n1", &[], &["a", "never-subscribed"]);
    assert_eq!(respond(&mut st, &s1, "n2"), None);
    // and "a" changing is no longer sent
    let s2 = next(&mut b, &[("a", "2")], &[]);
    assert_eq!(respond(&mut st, &s2, "n3"), None);
}

#[test]
fn resubscribing_sends_even_an_unchanged_resource() {
    // DELTA-7
    let mut b = SnapshotBuilder::new();
    let s1 = next(&mut b, &[("a", "1")], &[]);
    let mut st = DeltaState::new(ResourceType::Cluster);
    request(&mut st, "", &["a"], &[]);
    respond(&mut st, &s1, "n1");
    request(&mut st, "n1", &["a"], &[]);
    assert_eq!(
        respond(&mut st, &s1, "n2"),
        Some((strings(&["a:1"]), vec![]))
    );
}

#[test]
fn stale_nonce_still_changes_the_subscription() {
    // DELTA-3, G-2
    let mut b = SnapshotBuilder::new();
    let s1 = next(&mut b, &[("a", "1"), ("b", "1")], &[]);
    let mut st = DeltaState::new(ResourceType::Cluster);
    request(&mut st, "", &["a"], &[]);
    respond(&mut st, &s1, "n1");
    let s2 = next(&mut b, &[("a", "2")], &[]);
    respond(&mut st, &s2, "n2");
    assert_eq!(request(&mut st, "n1", &["b"], &[]), Kind::Stale);
    assert_eq!(
        respond(&mut st, &s2, "n3"),
        Some((strings(&["b:1"]), vec![]))
    );
}

#[test]
fn ack_may_carry_subscription_changes() {
    // DELTA-2, G-9
    let mut b = SnapshotBuilder::new();
    let s1 = next(&mut b, &[("a", "1"), ("b", "1")], &[]);
    let mut st = DeltaState::new(ResourceType::Cluster);
    request(&mut st, "", &["a"], &[]);
    respond(&mut st, &s1, "n1");
    assert_eq!(request(&mut st, "n1", &["b"], &["a"]), Kind::Ack);
    assert_eq!(st.status().acked_nonce.as_deref(), Some("n1"));
    assert_eq!(
        respond(&mut st, &s1, "n2"),
        Some((strings(&["b:1"]), vec![]))
    );
}

#[test]
fn nack_is_recorded_not_resent_and_later_changes_flow() {
    // DELTA-14
    let mut b = SnapshotBuilder::new();
    let s1 = next(&mut b, &[("a", "1")], &[]);
    let mut st = cds();
    request(&mut st, "", &[], &[]);
    respond(&mut st, &s1, "n1");
    let (sub, unsub) = (strings(&["b"]), vec![]);
    let kind = st.on_request(&Request {
        nonce: "n1",
        subscribe: &sub,
        unsubscribe: &unsub,
        error: Some("bad cluster a"),
        ..Default::default()
    });
    assert_eq!(kind, Kind::Nack);
    assert_eq!(st.status().last_error.as_deref(), Some("bad cluster a"));
    // The NACK's subscription change is applied; "a" is not sent again.
    assert_eq!(respond(&mut st, &s1, "n2"), Some((vec![], strings(&["b"]))));
    let s2 = next(&mut b, &[("a", "2")], &[]);
    assert_eq!(
        respond(&mut st, &s2, "n3"),
        Some((strings(&["a:2"]), vec![]))
    );
    request(&mut st, "n3", &[], &[]);
    assert_eq!(st.status().last_error, None);
}

#[test]
fn reconnect_with_initial_versions_gets_exactly_the_difference() {
    // DELTA-11, DELTA-12 (wildcard by empty subscribe with IRV), DELTA-13, BUG-7
    let mut b = SnapshotBuilder::new();
    let s1 = next(
        &mut b,
        &[("same", "1"), ("changed", "1"), ("gone", "1")],
        &[],
    );
    let old: HashMap<String, String> = s1
        .resources(ResourceType::Cluster)
        .entries
        .iter()
        .map(|(n, e)| (n.to_string(), e.resource.version.to_string()))
        .collect();
    // The server restarts: a fresh builder produces the same versions for the same content.
    let mut b2 = SnapshotBuilder::new();
    let s2 = next(
        &mut b2,
        &[("same", "1"), ("changed", "2"), ("new", "1")],
        &[],
    );
    let mut st = cds();
    st.on_request(&Request {
        initial_versions: Some(&old),
        ..Default::default()
    });
    assert_eq!(
        respond(&mut st, &s2, "n1"),
        Some((strings(&["changed:2", "new:1"]), strings(&["gone"])))
    );
    // After that the client is tracked like any other.
    request(&mut st, "n1", &[], &[]);
    let s3 = next(&mut b2, &[("same", "2")], &[]);
    assert_eq!(
        respond(&mut st, &s3, "n2"),
        Some((strings(&["same:2"]), vec![]))
    );
}

#[test]
fn reconnect_with_named_subscription_and_versions() {
    // DELTA-12: named types send the names in subscribe and in the IRV.
    let mut b = SnapshotBuilder::new();
    let s1 = next(&mut b, &[("a", "1"), ("b", "1")], &[]);
    let irv: HashMap<String, String> = [("a", "1"), ("b", "1"), ("x", "?")]
        .iter()
        .map(|(n, _)| {
            let v = s1
                .resources(ResourceType::Cluster)
                .get(n)
                .map_or("stale".to_owned(), |e| e.resource.version.to_string());
            (n.to_string(), v)
        })
        .collect();
    let mut st = DeltaState::new(ResourceType::Endpoint);
    let mut st_c = cds();
    let sub = strings(&["a", "b", "x"]);
    st_c.on_request(&Request {
        subscribe: &sub,
        initial_versions: Some(&irv),
        ..Default::default()
    });
    assert_eq!(
        respond(&mut st_c, &s1, "n1"),
        Some((vec![], strings(&["x"])))
    );
    // An EDS first request naming nothing is not a wildcard (G-3).
    request(&mut st, "", &[], &[]);
    assert!(!st.subscribed());
}

#[test]
fn subscribe_and_unsubscribe_star_is_nothing() {
    // DELTA-16
    let mut b = SnapshotBuilder::new();
    let s1 = next(&mut b, &[("a", "1")], &[]);
    let mut st = cds();
    request(&mut st, "", &["*"], &["*"]);
    assert!(!st.subscribed());
    assert_eq!(respond(&mut st, &s1, "n1"), None);
    request(&mut st, "", &["a"], &[]);
    assert_eq!(
        respond(&mut st, &s1, "n2"),
        Some((strings(&["a:1"]), vec![]))
    );
}

#[test]
fn first_response_is_sent_even_when_empty() {
    // The client's initial fetch must end even for an empty mesh.
    let mut b = SnapshotBuilder::new();
    let s1 = next(&mut b, &[("a", "1")], &[]);
    let s2 = next(&mut b, &[], &["a"]);
    let mut st = cds();
    request(&mut st, "", &[], &[]);
    assert_eq!(respond(&mut st, &s2, "n1"), Some((vec![], vec![])));
    let _ = s1;
}

#[test]
fn deferred_removals_follow_when_released() {
    // SOTW-31 for delta ADS: removals wait for the push's listeners and routes.
    let mut b = SnapshotBuilder::new();
    let s1 = next(&mut b, &[("a", "1"), ("b", "1")], &[]);
    let mut st = cds();
    request(&mut st, "", &[], &[]);
    respond(&mut st, &s1, "n1");
    let s2 = next(&mut b, &[("c", "1")], &["b"]);
    let built = st
        .build(&s2, View::Envoy, true, &DiffCache::default())
        .expect("c is new");
    assert_eq!(built.removed, Vec::<Arc<str>>::new());
    st.sent(Sent::spelled("n2", built.version));
    assert!(!st.has_work(s2.seq));
    st.release_deferred();
    assert_eq!(respond(&mut st, &s2, "n3"), Some((vec![], strings(&["b"]))));
}

#[test]
fn diff_cost_follows_the_change_not_the_mesh() {
    // DELTA-8: one change in a large type is found without visiting the rest (the persistent maps
    // share structure). Checked by result here; the cost is measured in benches.
    let mut b = SnapshotBuilder::new();
    let many: Vec<(String, String)> = (0..5000)
        .map(|i| (format!("c{i:05}"), "1".into()))
        .collect();
    let refs: Vec<(&str, &str)> = many.iter().map(|(n, t)| (&**n, &**t)).collect();
    let s1 = next(&mut b, &refs, &[]);
    let mut st = cds();
    request(&mut st, "", &[], &[]);
    assert_eq!(
        respond(&mut st, &s1, "n1").map(|(s, _)| s.len()),
        Some(5000)
    );
    let s2 = next(&mut b, &[("c02500", "2")], &[]);
    assert_eq!(
        respond(&mut st, &s2, "n2"),
        Some((strings(&["c02500:2"]), vec![]))
    );
}

#[test]
fn one_change_on_a_large_mesh_sends_one_resource() {
    // DELTA-8: on a 20,000-cluster mesh, after the full first response, every push that follows a
    // one-cluster change carries that cluster alone. (What such a push costs is measured by the
    // criterion bench "delta diff for one stream after one endpoint change".)
    let mut b = SnapshotBuilder::new();
    let many: Vec<(String, String)> = (0..20_000)
        .map(|i| {
            (
                format!("outbound|80||svc-{i:05}.ns.svc.cluster.local"),
                "1".into(),
            )
        })
        .collect();
    let refs: Vec<(&str, &str)> = many.iter().map(|(n, t)| (&**n, &**t)).collect();
    let mut snap = next(&mut b, &refs, &[]);
    let mut st = cds();
    request(&mut st, "", &[], &[]);
    let first = st
        .build(&snap, View::Envoy, false, &DiffCache::default())
        .expect("full response");
    st.sent(Sent::spelled("n0", first.version));
    for i in 0..200 {
        let name = &many[(i * 97) % many.len()].0;
        snap = next(&mut b, &[(name, &format!("v{i}"))], &[]);
        let built = st
            .build(&snap, View::Envoy, false, &DiffCache::default())
            .expect("one change");
        assert_eq!(built.resources.len(), 1);
        st.sent(Sent::spelled(&format!("n{}", i + 1), built.version));
    }
}

#[test]
fn a_response_with_the_whole_map_is_marked_shareable_and_names_share_the_snapshot_keys() {
    let mut b = SnapshotBuilder::new();
    let s1 = next(&mut b, &[("a", "1"), ("b", "1")], &[]);
    let mut eds_like = DeltaState::new(ResourceType::Cluster);
    let sub = strings(&["a", "b"]);
    eds_like.on_request(&Request {
        subscribe: &sub,
        known: Known {
            resources: Some(s1.resources(ResourceType::Cluster)),
            sets: None,
        },
        ..Default::default()
    });
    let (key, _) = s1
        .resources(ResourceType::Cluster)
        .entries
        .get_key_value("a")
        .expect("a exists");
    let held = eds_like.sub.names.get("a").expect("subscribed");
    assert!(
        Arc::ptr_eq(key, held),
        "the subscription holds the snapshot's own name"
    );
    let built = eds_like
        .build(&s1, View::Envoy, false, &DiffCache::default())
        .expect("first response");
    assert!(built.whole_set.is_some());
    eds_like.sent(Sent::spelled("n1", built.version));

    // One of two changed: not the whole map.
    request(&mut eds_like, "n1", &[], &[]);
    let s2 = next(&mut b, &[("a", "2")], &[]);
    let built = eds_like
        .build(&s2, View::Envoy, false, &DiffCache::default())
        .expect("the change");
    assert_eq!(built.resources.len(), 1);
    assert!(built.whole_set.is_none());
}

#[test]
fn a_first_response_answers_names_walked_with_the_map_or_looked_up() {
    // Names many for the map are answered in one walk of both, few by lookups: the same answer,
    // in name order, with names the map lacks removed (DELTA-9).
    let mut b = SnapshotBuilder::new();
    let all: Vec<String> = (0..100).map(|i| format!("c{i:03}")).collect();
    let upserts: Vec<(&str, &str)> = all.iter().map(|n| (n.as_str(), "1")).collect();
    let s = next(&mut b, &upserts, &[]);
    let few = vec!["zz", "c099", "c000", "a", "c050"];
    let many: Vec<&str> = all
        .iter()
        .step_by(2)
        .map(String::as_str)
        .chain(["zz", "a"])
        .collect();
    for names in [few, many] {
        let mut st = cds();
        request(&mut st, "", &names, &[]);
        let (sent, removed) = respond(&mut st, &s, "n1").expect("a first response");
        let mut present: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| n.starts_with('c'))
            .collect();
        present.sort_unstable();
        let expected: Vec<String> = present.iter().map(|n| format!("{n}:1")).collect();
        assert_eq!(sent, expected);
        assert_eq!(removed, strings(&["a", "zz"]));
    }
}

#[test]
fn streams_with_a_shared_subscription_send_one_response_per_change() {
    // A change reaches every stream holding the same (shared) subscription as one response, one
    // nonce (`diffs.rs`); a small subscription of its own builds its own.
    let mut b = SnapshotBuilder::new();
    let all: Vec<String> = (0..MIN_SHARED_LEN + 8)
        .map(|i| format!("c{i:03}"))
        .collect();
    let upserts: Vec<(&str, &str)> = all.iter().map(|n| (n.as_str(), "1")).collect();
    let s1 = next(&mut b, &upserts, &[]);
    let names: Vec<&str> = all.iter().map(String::as_str).collect();
    let shared = SharedNames::default();
    let diffs = DiffCache::default();
    let mut streams: Vec<DeltaState> = (0..3).map(|_| cds()).collect();
    for st in &mut streams {
        let sub = strings(&names);
        st.on_request(&Request {
            subscribe: &sub,
            known: Known {
                resources: None,
                sets: Some(&shared),
            },
            ..Default::default()
        });
        let first = st.build(&s1, View::Envoy, false, &diffs).expect("first");
        assert!(
            first.shared.is_none(),
            "a first response is the stream's own"
        );
    }
    let mut small = cds();
    request(&mut small, "", &["c000"], &[]);
    small.build(&s1, View::Envoy, false, &diffs).expect("first");

    let s2 = next(&mut b, &[("c000", "2")], &[]);
    let built: Vec<DeltaBuilt> = streams
        .iter_mut()
        .map(|st| {
            st.build(&s2, View::Envoy, false, &diffs)
                .expect("the change")
        })
        .collect();
    let first = built[0].shared.as_ref().expect("shared");
    for other in &built[1..] {
        assert!(Arc::ptr_eq(first, other.shared.as_ref().unwrap()));
    }
    assert_eq!(built[0].resources.len(), 1);
    assert!(built[0].change_driven);
    let own = small
        .build(&s2, View::Envoy, false, &diffs)
        .expect("the change");
    assert!(own.shared.is_none());
    assert_eq!(own.resources.len(), 1);
    // Nothing more once up to date.
    assert!(streams[0].build(&s2, View::Envoy, false, &diffs).is_none());
}
