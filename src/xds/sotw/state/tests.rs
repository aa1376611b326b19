//! Unit tests of the per-type SotW state machine, without a transport.

use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;

use super::*;
use crate::envoy::EncodedResource;
use crate::snapshot::{BuildInput, SnapshotBuilder};

fn cla(name: &str, priority: u32) -> EncodedResource {
    let mut c = ClusterLoadAssignment {
        cluster_name: name.into(),
        ..Default::default()
    };
    c.endpoints.push(Default::default());
    c.endpoints[0].priority = priority;
    EncodedResource::encode(ResourceType::Endpoint, name, &c)
}

fn cluster(name: &str) -> EncodedResource {
    let c = Cluster {
        name: name.into(),
        ..Default::default()
    };
    EncodedResource::encode(ResourceType::Cluster, name, &c)
}

fn snap(b: &mut SnapshotBuilder, upserts: Vec<EncodedResource>) -> Arc<Snapshot> {
    b.build(BuildInput {
        upserts,
        ..Default::default()
    })
    .expect("a change")
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn send(st: &mut SotwState, s: &Snapshot, cache: &FullSetCache, nonce: &str) -> Option<SotwBuilt> {
    let built = st.build(s, View::Envoy, None, cache)?;
    st.sent(
        Sent::spelled(nonce, built.version),
        Arc::clone(&built.names),
    );
    Some(built)
}

#[test]
fn classification_initial_stale_ack_nack() {
    // SOTW-8, SOTW-9, SOTW-11, SOTW-12
    let mut b = SnapshotBuilder::new();
    let s1 = snap(&mut b, vec![cla("a", 1)]);
    let cache = FullSetCache::default();
    let mut st = SotwState::new(ResourceType::Endpoint);
    assert_eq!(
        st.on_request("old-stream-nonce", "v0", &names(&["a"]), None),
        Kind::Initial
    );
    send(&mut st, &s1, &cache, "n1").expect("initial response");
    assert_eq!(st.on_request("n1", "v", &names(&["a"]), None), Kind::Ack);
    assert_eq!(st.status().status(), crate::xds::SyncStatus::Synced);
    assert_eq!(
        st.on_request("n0", "v", &names(&["a", "b"]), None),
        Kind::Stale
    );
    assert_eq!(st.status().names.len(), 1, "stale request changed nothing");
    assert_eq!(
        st.on_request("n1", "v", &names(&["a"]), Some("bad")),
        Kind::Nack
    );
    assert_eq!(st.status().status(), crate::xds::SyncStatus::Error);
    assert!(!st.has_work(s1.seq), "a NACK alone owes nothing (SOTW-13)");
}

#[test]
fn unknown_eds_name_gets_an_empty_cla_only_when_requested() {
    // SOTW-27
    let mut b = SnapshotBuilder::new();
    let s1 = snap(&mut b, vec![cla("a", 1)]);
    let cache = FullSetCache::default();
    let mut st = SotwState::new(ResourceType::Endpoint);
    st.on_request("", "", &names(&["a", "z"]), None);
    let built = send(&mut st, &s1, &cache, "n1").expect("response");
    assert_eq!(built.names[..], [Arc::from("a"), Arc::from("z")]);
    // a change to something else owes nothing; z's creation is pushed
    let s2 = snap(&mut b, vec![cla("other", 1)]);
    assert!(st.build(&s2, View::Envoy, None, &cache).is_none());
    let s3 = snap(&mut b, vec![cla("z", 2)]);
    let built = st.build(&s3, View::Envoy, None, &cache).expect("z created");
    assert_eq!(built.names[..], [Arc::from("z")]);
}

#[test]
fn falls_back_to_changed_seq_when_history_is_short() {
    // "push cost follows the change": past HISTORY_LEN builds, compare the subscription only.
    let mut b = SnapshotBuilder::new();
    let s1 = snap(&mut b, vec![cla("a", 0), cla("b", 0)]);
    let cache = FullSetCache::default();
    let mut st = SotwState::new(ResourceType::Endpoint);
    st.on_request("", "", &names(&["a", "b"]), None);
    send(&mut st, &s1, &cache, "n1");
    for i in 1..=(crate::snapshot::HISTORY_LEN as u32 + 5) {
        snap(&mut b, vec![cla("other", i)]);
    }
    let last = snap(&mut b, vec![cla("b", 9)]);
    assert!(last.changes_since(ResourceType::Endpoint, 1).is_none());
    let built = st
        .build(&last, View::Envoy, None, &cache)
        .expect("b changed");
    assert_eq!(built.names[..], [Arc::from("b")]);
}

#[test]
fn warming_forces_only_the_changed_clusters() {
    // SOTW-32
    let mut b = SnapshotBuilder::new();
    let s1 = snap(
        &mut b,
        vec![cluster("c1"), cluster("c2"), cla("c1", 1), cla("c2", 1)],
    );
    let cache = FullSetCache::default();
    let mut cds = SotwState::new(ResourceType::Cluster);
    let mut eds = SotwState::new(ResourceType::Endpoint);
    cds.on_request("", "", &[], None);
    eds.on_request("", "", &names(&["c1", "c2"]), None);
    let built = send(&mut cds, &s1, &cache, "n1").expect("cds");
    assert_eq!(
        built.entries.len(),
        1,
        "wildcard full set is one shared chunk"
    );
    eds.note_warming(&built.warming);
    send(&mut eds, &s1, &cache, "n2").expect("eds");
    cds.on_request("n1", "", &[], None);
    eds.on_request("n2", "", &names(&["c1", "c2"]), None);
    assert!(!eds.has_work(s1.seq));
    let mut changed = Cluster {
        name: "c1".into(),
        ..Default::default()
    };
    changed.alt_stat_name = "v2".into();
    let s2 = snap(
        &mut b,
        vec![EncodedResource::encode(
            ResourceType::Cluster,
            "c1",
            &changed,
        )],
    );
    let built = send(&mut cds, &s2, &cache, "n3").expect("cds change");
    eds.note_warming(&built.warming);
    assert!(
        eds.build(&s2, View::Envoy, None, &cache).is_none(),
        "no EDS change"
    );
    eds.on_request("n2", "", &names(&["c1", "c2"]), None); // looks like an ACK
    let built = eds
        .build(&s2, View::Envoy, None, &cache)
        .expect("warming response");
    assert_eq!(built.names[..], [Arc::from("c1")]);
}

#[test]
fn long_nack_messages_are_bounded() {
    let mut st = SotwState::new(ResourceType::Cluster);
    st.on_request("", "", &[], Some(&"é".repeat(10_000)));
    let err = st.status().last_error.expect("recorded");
    assert!(err.len() <= MAX_ERROR_BYTES + 4);
}

#[test]
fn per_type_state_is_small() {
    // Per-stream memory budget (docs/floor.md): four of these plus the subscribed names.
    let size = std::mem::size_of::<SotwState>();
    eprintln!("SotwState: {size} bytes");
    assert!(size < 512, "SotwState grew to {size} bytes");
}

#[test]
fn a_name_dropped_and_readded_in_stale_requests_is_resent() {
    // BUG-8 / SOTW-19 across the stale-nonce race (G-4): both subscription changes cross a
    // response and are ignored, so the server's subscription never changed; but the client threw
    // `b` away in between and needs it again.
    let mut b = SnapshotBuilder::new();
    let s1 = snap(&mut b, vec![cla("a", 1), cla("b", 1)]);
    let cache = FullSetCache::default();
    let mut st = SotwState::new(ResourceType::Endpoint);
    st.on_request("", "", &names(&["a", "b"]), None);
    send(&mut st, &s1, &cache, "n1").expect("initial response");
    let s2 = snap(&mut b, vec![cla("a", 2)]);
    let pushed = send(&mut st, &s2, &cache, "n2").expect("a's change");
    assert_eq!(pushed.names.len(), 1);
    assert_eq!(st.on_request("n1", "", &names(&["a"]), None), Kind::Stale);
    assert_eq!(
        st.on_request("n1", "", &names(&["a", "b"]), None),
        Kind::Stale
    );
    assert_eq!(st.status().names.len(), 2, "stale requests change nothing");
    assert_eq!(
        st.on_request("n2", "", &names(&["a", "b"]), None),
        Kind::Ack
    );
    assert!(st.has_work(s2.seq), "b is owed again");
    let resent = send(&mut st, &s2, &cache, "n3").expect("b resent");
    assert_eq!(resent.names[..], vec![Arc::<str>::from("b")]);

    // A stale request that keeps every name owes nothing afterwards.
    assert_eq!(
        st.on_request("n2", "", &names(&["b", "a"]), None),
        Kind::Stale
    );
    assert_eq!(
        st.on_request("n3", "", &names(&["a", "b"]), None),
        Kind::Ack
    );
    assert!(!st.has_work(s2.seq));
}

#[test]
fn an_eds_answer_with_every_assignment_is_one_shared_chunk() {
    let mut b = SnapshotBuilder::new();
    let s1 = snap(&mut b, vec![cla("a", 1), cla("b", 1)]);
    let cache = FullSetCache::default();
    let mut all = SotwState::new(ResourceType::Endpoint);
    all.on_request("", "", &names(&["b", "a"]), None);
    let built = send(&mut all, &s1, &cache, "n1").expect("initial response");
    assert_eq!(built.entries.len(), 1);
    let res = s1.resources_for(ResourceType::Endpoint, View::Envoy);
    assert_eq!(
        built.entries[0],
        cache.get(ResourceType::Endpoint, View::Envoy, &res)
    );

    // A subset, or a name that does not exist, is sent entry by entry.
    let mut some = SotwState::new(ResourceType::Endpoint);
    some.on_request("", "", &names(&["a", "zz"]), None);
    let built = send(&mut some, &s1, &cache, "n1").expect("initial response");
    assert_eq!(built.entries.len(), 2);
}

#[test]
fn a_first_request_for_every_resource_is_answered_with_the_shared_full_set() {
    // SOTW-26: the answer carries what was asked; when that is every CLA, it is the one shared
    // chunk every such stream sends.
    let mut b = SnapshotBuilder::new();
    let s1 = snap(&mut b, vec![cla("a", 1), cla("b", 1), cla("c", 1)]);
    let cache = FullSetCache::default();
    let all: Vec<Arc<str>> = ["a", "b", "c"].map(Arc::from).to_vec();

    let mut every = SotwState::new(ResourceType::Endpoint);
    every.on_request("", "", &names(&["c", "a", "b"]), None);
    let built = send(&mut every, &s1, &cache, "n1").expect("response");
    assert_eq!(built.entries.len(), 1, "one shared chunk");
    assert_eq!(built.names[..], all[..]);
    let res = s1.resources_for(ResourceType::Endpoint, View::Envoy);
    assert_eq!(
        built.entries[0],
        cache.get(ResourceType::Endpoint, View::Envoy, &res)
    );

    // As many names, not the same ones: each answered on its own, the unknown one empty (SOTW-27).
    let mut other = SotwState::new(ResourceType::Endpoint);
    other.on_request("", "", &names(&["a", "b", "z"]), None);
    let built = send(&mut other, &s1, &cache, "n1").expect("response");
    assert_eq!(built.entries.len(), 3);
    assert_eq!(built.names[..], ["a", "b", "z"].map(Arc::from)[..]);
    assert_eq!(built.entries[2], empty_cla("z").sotw_entry().clone());
}
