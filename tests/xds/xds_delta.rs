//! Delta (incremental) xDS protocol conformance, against the in-process server over real gRPC
//! (H-RAW).
//!
//! Each test cites the rule it checks in `docs/protocol.md` section B. The delta client
//! checks INV-1..5 and DELTA-18 on every response it receives and keeps what it holds, so tests
//! compare holdings rather than single messages where the rule is about state.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, ResourceLocator};
use tonic::Code;
use tributary::xds::SyncStatus;

use crate::support::delta::*;
use crate::support::recorder::{counter, rendered};
use crate::support::resources::*;
use crate::support::*;

fn held_names(c: &DeltaClient, ty: tributary::envoy::ResourceType) -> Vec<String> {
    c.held[ty.index()].keys().cloned().collect()
}

// ---------------------------------------------------------------- wildcard and subscriptions

#[tokio::test]
async fn delta_04_spec_four_step_wildcard_example() {
    // DELTA-4: legacy wildcard; a name keeps it; unsubscribing "*" ends it; empty never revives it.
    let s = TestServer::start(vec![cluster("a", "1"), cluster("b", "1")]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["a", "b"], &[]).await;
    c.ack_with(&r, &["c"], &[]).await;
    // DELTA-10: "c" does not exist: answered as removed.
    let r = c.expect(CDS, &[], &["c"]).await;
    c.ack_with(&r, &[], &["*"]).await;
    c.expect_no_response().await;
    // Only "c" is wanted now: "b" changing is not sent, "c" appearing is (it stayed subscribed).
    s.publish(vec![cluster("b", "2")], vec![]);
    c.expect_no_response().await;
    s.publish(vec![cluster("c", "1")], vec![]);
    let r = c.expect(CDS, &["c"], &[]).await;
    c.ack(&r).await;
    c.expect_no_response().await;
}

#[tokio::test]
async fn delta_05_wildcard_plus_name_unsubscribing_the_name_resends_it() {
    // DELTA-5
    let s = TestServer::start(vec![cluster("a", "1"), cluster("b", "1")]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(CDS, &["*", "a", "ghost"]).await;
    let r = c.expect(CDS, &["a", "b"], &["ghost"]).await;
    c.ack_with(&r, &[], &["a", "ghost"]).await;
    c.expect(CDS, &["a"], &["ghost"]).await;
}

#[tokio::test]
async fn delta_06_unsubscribe_without_wildcard_and_phantoms_get_no_response() {
    // DELTA-6
    let s = TestServer::start(vec![cla("a", 1), cla("b", 1)]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(EDS, &["a", "b"]).await;
    let r = c.expect(EDS, &["a", "b"], &[]).await;
    c.ack_with(&r, &[], &["a", "never-subscribed"]).await;
    c.expect_no_response().await;
    s.publish(vec![cla("a", 2)], vec![]);
    c.expect_no_response().await;
    s.publish(vec![cla("b", 2)], vec![]);
    c.expect(EDS, &["b"], &[]).await;
}

#[tokio::test]
async fn delta_07_subscribed_names_are_sent_even_if_held() {
    // DELTA-7, BUG-6: the client may have forgotten it.
    let s = TestServer::start(vec![cla("a", 1)]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(EDS, &["a"]).await;
    let r = c.expect(EDS, &["a"], &[]).await;
    c.ack_with(&r, &["a"], &[]).await;
    let r = c.expect(EDS, &["a"], &[]).await;
    // unsubscribe then subscribe again (an idle channel waking up)
    c.ack_with(&r, &[], &["a"]).await;
    c.expect_no_response().await;
    c.request(EDS, &["a"], &[], "").await;
    c.expect(EDS, &["a"], &[]).await;
}

#[tokio::test]
async fn delta_16_subscribe_and_unsubscribe_star_is_nothing() {
    // DELTA-16: an on-demand client starts with an empty, non-wildcard subscription.
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut c = s.delta_ads("n").await;
    c.request(CDS, &["*"], &["*"], "").await;
    c.expect_no_response().await;
    s.publish(vec![cluster("b", "1")], vec![]);
    c.expect_no_response().await;
    c.request(CDS, &["a"], &[], "").await;
    c.expect(CDS, &["a"], &[]).await;
}

#[tokio::test]
async fn delta_g3_empty_first_eds_request_is_not_a_wildcard() {
    // G-3: legacy wildcard for LDS/CDS only.
    let s = TestServer::start(vec![cla("a", 1)]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(EDS, &[]).await;
    c.expect_no_response().await;
}

// ---------------------------------------------------------------- nonces, ACK, NACK

#[tokio::test]
async fn delta_01_nonces_unique_and_system_version_is_informational() {
    // DELTA-1 (nonce uniqueness is checked on every response by the client: INV-3)
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r1 = c.expect(CDS, &["a"], &[]).await;
    assert_eq!(r1.system_version_info, s.version(CDS));
    c.ack(&r1).await;
    s.publish(vec![cluster("a", "2")], vec![]);
    let r2 = c.expect(CDS, &["a"], &[]).await;
    assert_ne!(r1.nonce, r2.nonce);
}

#[tokio::test]
async fn delta_02_ack_with_subscription_changes_is_legal() {
    // DELTA-2, G-9: an ACK may carry sub/unsub changes; it is an ACK and the changes apply.
    let s = TestServer::start(vec![cla("a", 1), cla("b", 1)]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(EDS, &["a"]).await;
    let r = c.expect(EDS, &["a"], &[]).await;
    c.ack_with(&r, &["b"], &["a"]).await;
    c.expect(EDS, &["b"], &[]).await;
    let st = s.type_status("n", EDS);
    assert_eq!(st.acked_nonce.as_deref(), Some(r.nonce.as_str()));
    assert_eq!(
        st.names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        ["b"]
    );
}

#[tokio::test]
async fn delta_03_stale_nonce_still_changes_the_subscription() {
    // DELTA-3, G-2, BUG-8
    let s = TestServer::start(vec![cla("a", 1), cla("b", 1)]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(EDS, &["a"]).await;
    let r1 = c.expect(EDS, &["a"], &[]).await;
    s.publish(vec![cla("a", 2)], vec![]);
    let _r2 = c.expect(EDS, &["a"], &[]).await;
    let before = counter("pilot_xds_expired_nonce{type=eds}");
    c.ack_with(&r1, &["b"], &[]).await;
    c.expect(EDS, &["b"], &[]).await;
    assert!(counter("pilot_xds_expired_nonce{type=eds}") > before);
}

#[tokio::test]
async fn delta_14_nack_recorded_not_resent_later_changes_flow() {
    // DELTA-14
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["a"], &[]).await;
    let before = counter("pilot_total_xds_rejects{type=cds}");
    c.nack(&r, "cluster a: bad").await;
    c.expect_no_response().await;
    let st = s
        .wait_status("n", CDS, |t| t.status() == SyncStatus::Error)
        .await;
    assert_eq!(st.last_error.as_deref(), Some("cluster a: bad"));
    assert!(counter("pilot_total_xds_rejects{type=cds}") > before);
    s.publish(vec![cluster("b", "1")], vec![]);
    let r = c.expect(CDS, &["b"], &[]).await;
    c.ack(&r).await;
    s.wait_status("n", CDS, |t| t.status() == SyncStatus::Synced)
        .await;
}

// ---------------------------------------------------------------- updates and removals

#[tokio::test]
async fn delta_08_09_updates_carry_only_changes_and_removals() {
    // DELTA-8, DELTA-9: one changed cluster is the whole response; deletions are removals.
    let s = TestServer::start(vec![
        cluster("a", "1"),
        cluster("b", "1"),
        cluster("c", "1"),
        cla("a", 1),
    ])
    .await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["a", "b", "c"], &[]).await;
    c.ack(&r).await;
    c.subscribe(EDS, &["a"]).await;
    let r = c.expect(EDS, &["a"], &[]).await;
    c.ack(&r).await;
    s.publish(vec![cluster("b", "2")], vec![]);
    let r = c.expect(CDS, &["b"], &[]).await;
    c.ack(&r).await;
    // the EDS of a re-warmed cluster is sent only when that cluster is subscribed in EDS
    c.expect_no_response().await;
    s.publish(vec![], vec![(CDS, "c")]);
    let r = c.expect(CDS, &[], &["c"]).await;
    c.ack(&r).await;
    c.expect_no_response().await;
    assert_eq!(held_names(&c, CDS), ["a", "b"]);
}

#[tokio::test]
async fn delta_sotw32_updated_cluster_gets_its_assignment_again() {
    // SOTW-32 for delta: Envoy re-warms an updated EDS cluster and waits for its assignment
    // (envoyproxy/envoy#31535), so the unchanged CLA follows the CDS update.
    let s = TestServer::start(vec![cluster("a", "1"), cla("a", 1)]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["a"], &[]).await;
    c.ack(&r).await;
    c.subscribe(EDS, &["a"]).await;
    let r = c.expect(EDS, &["a"], &[]).await;
    c.ack(&r).await;
    s.publish(vec![cluster("a", "2")], vec![]);
    let r = c.expect(CDS, &["a"], &[]).await;
    c.ack(&r).await;
    c.expect(EDS, &["a"], &[]).await;
}

#[tokio::test]
async fn delta_10_missing_name_is_removed_and_stays_subscribed() {
    // DELTA-10, BUG-3: answered at once as removed, pushed when it appears.
    let s = TestServer::start(vec![cluster("x", "1")]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(EDS, &["later"]).await;
    let r = c.expect(EDS, &[], &["later"]).await;
    c.ack(&r).await;
    c.expect_no_response().await;
    s.publish(vec![cla("later", 1)], vec![]);
    c.expect(EDS, &["later"], &[]).await;
}

#[tokio::test]
async fn delta_31_cluster_removals_follow_listeners_and_routes() {
    // SOTW-31 over delta ADS: a push that drops a route's cluster removes the cluster last.
    let s = TestServer::start(vec![
        cluster("old", "1"),
        listener("l", "r"),
        route("r", "old"),
    ])
    .await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["old"], &[]).await;
    c.ack(&r).await;
    c.subscribe(LDS, &[]).await;
    let r = c.expect(LDS, &["l"], &[]).await;
    c.ack(&r).await;
    c.subscribe(RDS, &["r"]).await;
    let r = c.expect(RDS, &["r"], &[]).await;
    c.ack(&r).await;
    s.publish(
        vec![cluster("new", "1"), route("r", "new")],
        vec![(CDS, "old")],
    );
    let r = c.expect(CDS, &["new"], &[]).await;
    c.ack(&r).await;
    let r = c.expect(RDS, &["r"], &[]).await;
    c.ack(&r).await;
    c.expect(CDS, &[], &["old"]).await;
}

// ---------------------------------------------------------------- reconnects

#[tokio::test]
async fn delta_11_reconnect_with_initial_versions_gets_exactly_the_difference() {
    // DELTA-11, DELTA-12, DELTA-13, BUG-7, TRANS-11: the server restarts while services were
    // removed, changed and added; the client reconnects with what it holds.
    let before = vec![
        cluster("same", "1"),
        cluster("changed", "1"),
        cluster("gone", "1"),
        cla("same", 1),
        cla("gone", 1),
    ];
    let s1 = TestServer::start(before).await;
    let mut c = s1.delta_ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["changed", "gone", "same"], &[]).await;
    c.ack(&r).await;
    c.subscribe(EDS, &["same", "gone"]).await;
    let r = c.expect(EDS, &["gone", "same"], &[]).await;
    c.ack(&r).await;
    let held_cds = c.held[CDS.index()].clone();
    let held_eds = c.held[EDS.index()].clone();
    drop(c);
    drop(s1);

    // A new process, with a different mesh: versions are content hashes, so "same" matches.
    let s2 = TestServer::start_unready().await;
    // TRANS-11: before the first snapshot, delta streams are refused like SotW ones.
    let refused = match s2.try_delta_ads("n").await {
        Err(status) => status,
        Ok(mut c) => {
            c.subscribe(CDS, &[]).await;
            c.expect_status().await
        }
    };
    assert_eq!(refused.code(), Code::Unavailable);
    s2.publish(
        vec![
            cluster("same", "1"),
            cluster("changed", "2"),
            cluster("new", "1"),
            cla("same", 1),
        ],
        vec![],
    );
    let mut c = s2.delta_ads("n").await;
    // DELTA-12: CDS reconnects as a wildcard (empty subscribe) with IRV.
    c.reconnect(CDS, &[], held_cds).await;
    c.expect(CDS, &["changed", "new"], &["gone"]).await;
    // EDS names go in subscribe and IRV.
    c.reconnect(EDS, &["same", "gone"], held_eds).await;
    c.expect(EDS, &[], &["gone"]).await;
    // What the client holds now equals what a fresh client gets.
    let mut fresh = s2.delta_ads("fresh").await;
    fresh.subscribe(CDS, &[]).await;
    fresh.expect_response().await;
    fresh.subscribe(EDS, &["same", "gone"]).await;
    fresh.expect_response().await;
    assert_eq!(c.held, fresh.held);
}

#[tokio::test]
async fn delta_13_versions_are_content_hashes_equal_across_servers() {
    // DELTA-13: two replicas with the same content give every resource the same version.
    let content = || vec![cluster("a", "1"), cluster("b", "2")];
    let s1 = TestServer::start(content()).await;
    let s2 = TestServer::start(content()).await;
    let mut c1 = s1.delta_ads("n").await;
    let mut c2 = s2.delta_ads("n").await;
    c1.subscribe(CDS, &[]).await;
    c2.subscribe(CDS, &[]).await;
    c1.expect_response().await;
    c2.expect_response().await;
    assert_eq!(c1.held, c2.held);
    s1.publish(vec![cluster("a", "x")], vec![]);
    let r = c1.expect(CDS, &["a"], &[]).await;
    assert_ne!(r.resources[0].version, c2.held[CDS.index()]["a"].version);
}

#[tokio::test]
async fn delta_17_types_are_independent_on_ads() {
    // DELTA-17: each type has its own subscription, nonces and NACK state.
    let s = TestServer::start(vec![cluster("a", "1"), cla("a", 1), listener("l", "r")]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(CDS, &[]).await;
    let rc = c.expect(CDS, &["a"], &[]).await;
    c.subscribe(LDS, &[]).await;
    let rl = c.expect(LDS, &["l"], &[]).await;
    c.nack(&rl, "bad listener").await;
    c.ack(&rc).await;
    s.wait_status("n", CDS, |t| t.status() == SyncStatus::Synced)
        .await;
    s.wait_status("n", LDS, |t| t.status() == SyncStatus::Error)
        .await;
    let conn = &s.conns("n")[0];
    assert!(
        conn.delta,
        "the connection registry knows it is a delta stream"
    );
}

// ---------------------------------------------------------------- robustness

#[tokio::test]
async fn delta_18_resource_locators_are_ignored_not_fatal() {
    // DELTA-18: locators are not implemented; the names in the same request still count.
    let s = TestServer::start(vec![cla("a", 1)]).await;
    let mut c = s.delta_ads("n").await;
    c.send_raw(DeltaDiscoveryRequest {
        node: Some(c.node.clone()),
        type_url: EDS.type_url().into(),
        resource_names_subscribe: vec!["a".into()],
        resource_locators_subscribe: vec![ResourceLocator {
            name: "xdstp://x/y".into(),
            ..Default::default()
        }],
        ..Default::default()
    })
    .await;
    c.expect(EDS, &["a"], &[]).await;
}

#[tokio::test]
async fn delta_first_request_without_node_is_refused() {
    // SOTW-1 applies to delta streams too.
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut c = s.delta_ads("n").await;
    c.send_raw(DeltaDiscoveryRequest {
        type_url: CDS.type_url().into(),
        ..Default::default()
    })
    .await;
    assert_eq!(c.expect_status().await.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn delta_per_type_services_serve_their_type_only() {
    // The per-type Delta* methods; a mismatched type_url is refused (SOTW-4 analogue).
    let s = TestServer::start(vec![cluster("a", "1"), cla("a", 1)]).await;
    let mut c = s.delta_per_type(CDS, "n").await.unwrap();
    c.subscribe(CDS, &[]).await;
    c.expect(CDS, &["a"], &[]).await;
    let mut e = s.delta_per_type(EDS, "n2").await.unwrap();
    e.subscribe(CDS, &[]).await;
    assert_eq!(e.expect_status().await.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn delta_slow_client_ends_with_exactly_the_latest_state() {
    // TRANS-1 for delta: a client that reads nothing while many builds pass gets one catch-up, and
    // holds exactly the newest state afterwards (no intermediate snapshots replayed).
    let s = TestServer::start(vec![cluster("c0", "0")]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["c0"], &[]).await;
    c.ack(&r).await;
    for i in 1..200 {
        s.publish(
            vec![cluster(&format!("c{}", i % 7), &i.to_string())],
            vec![(CDS, &format!("c{}", (i + 3) % 7))],
        );
    }
    let mut responses = 0;
    while let Some(r) = c.next_within(Duration::from_millis(500)).await {
        responses += 1;
        c.ack(&r).await;
    }
    assert!(responses < 50, "{responses} responses for 199 builds");
    let want: BTreeMap<String, String> = s
        .store
        .load()
        .unwrap()
        .resources(CDS)
        .entries
        .iter()
        .map(|(n, e)| (n.to_string(), e.resource.version.to_string()))
        .collect();
    let got: BTreeMap<String, String> = c.held[CDS.index()]
        .iter()
        .map(|(n, h)| (n.clone(), h.version.clone()))
        .collect();
    assert_eq!(got, want);
}

// ---------------------------------------------------------------- parity

#[tokio::test]
async fn delta_21_sotw_and_delta_deliver_the_same_bytes() {
    // DELTA-21: for the same node and snapshot, each resource's Any is byte-identical.
    let s = TestServer::start(vec![
        cluster("a", "1"),
        cluster("b", "1"),
        cla("a", 3),
        listener("l", "r"),
        route("r", "a"),
    ])
    .await;
    let mut d = s.delta_ads("n").await;
    let mut w = s.ads("n").await;
    for (ty, names) in [
        (CDS, vec![]),
        (EDS, vec!["a"]),
        (LDS, vec![]),
        (RDS, vec!["r"]),
    ] {
        d.subscribe(ty, &names).await;
        d.expect_response().await;
        w.subscribe(ty, &names).await;
        let resp = w.expect_response().await;
        for any in &resp.resources {
            let name = name_of(any);
            let held = &d.held[ty.index()][&name];
            assert_eq!(
                prost::Message::encode_to_vec(any),
                held.any,
                "{ty} {name} differs"
            );
        }
        assert_eq!(resp.resources.len(), d.held[ty.index()].len());
    }
}

// ---------------------------------------------------------------- observability

#[tokio::test]
async fn delta_streams_count_in_metrics_and_sync_status() {
    // Metrics and /debug/syncz cover delta streams as they cover SotW ones.
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let cds = "pilot_xds_pushes{type=\"cds\"}";
    let pushes = rendered(cds);
    let mut c = s.delta_ads("metrics").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["a"], &[]).await;
    assert!(rendered(cds) > pushes);
    s.wait_status("metrics", CDS, |t| t.status() == SyncStatus::Stale)
        .await;
    c.ack(&r).await;
    let st = s
        .wait_status("metrics", CDS, |t| t.status() == SyncStatus::Synced)
        .await;
    assert_eq!(st.sent_version.as_deref(), Some(s.version(CDS).as_str()));
    assert!(st.wildcard);
    drop(c);
    s.wait_connections(0).await;
}

#[tokio::test]
async fn delta_15_unknown_alias_is_a_missing_name() {
    // DELTA-15: aliases are not supported; an alias is answered like any name that does not exist.
    let s = TestServer::start(vec![route("r", "a")]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(RDS, &["an-alias-of-r"]).await;
    c.expect(RDS, &[], &["an-alias-of-r"]).await;
}

#[tokio::test]
async fn delta_stream_closed_before_any_request_ends_cleanly() {
    // TRANS-10: the delta methods are served (no longer UNIMPLEMENTED); a client that half-closes
    // at once gets a clean end and no response, and leaves no connection behind.
    use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut client = AggregatedDiscoveryServiceClient::connect(format!("http://{}", s.addr))
        .await
        .unwrap();
    let mut stream = client
        .delta_aggregated_resources(tokio_stream::iter(vec![]))
        .await
        .expect("the delta method is served")
        .into_inner();
    assert!(stream.message().await.unwrap().is_none());
    s.wait_connections(0).await;
}

#[tokio::test]
async fn delta_sec9_accumulated_subscriptions_are_capped() {
    // SEC-9: each request is under the per-request limit, but delta subscriptions add up; past the
    // cap the stream ends with INVALID_ARGUMENT and other streams are unaffected.
    use tributary::xds::MAX_NAMES_PER_REQUEST;
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut other = s.delta_ads("other").await;
    other.subscribe(CDS, &[]).await;
    other.expect(CDS, &["a"], &[]).await;
    let mut c = s.delta_ads("greedy").await;
    let half = MAX_NAMES_PER_REQUEST / 2 + 1;
    for batch in 0..2 {
        let names: Vec<String> = (0..half).map(|i| format!("n{batch}-{i}")).collect();
        c.send_raw(DeltaDiscoveryRequest {
            node: Some(c.node.clone()),
            type_url: EDS.type_url().into(),
            resource_names_subscribe: names,
            ..Default::default()
        })
        .await;
    }
    let mut status = None;
    while status.is_none() {
        match c.next_or_status(Duration::from_secs(20)).await {
            Ok(_) => {}
            Err(st) => status = Some(st),
        }
    }
    let status = status.unwrap();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("limit"), "{status:?}");
    s.publish(vec![cluster("a", "2")], vec![]);
    other.expect(CDS, &["a"], &[]).await;
}

#[tokio::test]
async fn delta_06_08_an_owed_change_survives_an_unsubscribe() {
    // DELTA-6, DELTA-8, SOTW-35: the client stops reading during a 1 MiB CDS response, so hyper
    // holds the next (RDS) and the EDS response carrying s's change is owed but not built. The
    // client then drops t. Dropping t owes nothing (DELTA-6), but s's change still must reach the
    // client without any further snapshot, and nothing about t (INV-5).
    let s =
        TestServer::start_behind_big_cds(vec![cla("s", 1), cla("t", 1), route("r", "c0")]).await;
    let mut c = s.delta_ads_with_window("n", 64 * 1024).await;
    c.subscribe(EDS, &["s", "t"]).await;
    let n1 = c.expect(EDS, &["s", "t"], &[]).await;
    c.ack(&n1).await;
    c.subscribe(RDS, &["r"]).await;
    let r1 = c.expect(RDS, &["r"], &[]).await;
    c.ack(&r1).await;
    c.subscribe(CDS, &[]).await;
    s.owe_eds_behind_stuck_cds("n", &r1.nonce).await;
    c.request(EDS, &[], &["t"], &n1.nonce).await;
    s.wait_status("n", EDS, |st| st.names.len() == 1).await;
    let cds = c.expect_response().await;
    assert_eq!(
        (cds.type_url.as_str(), cds.resources.len()),
        (CDS.type_url(), 10)
    );
    c.expect(RDS, &["r"], &[]).await;
    let r = c.expect(EDS, &["s"], &[]).await;
    assert_eq!(
        decode_cla(r.resources[0].resource.as_ref().unwrap()).endpoints[0].priority,
        2
    );
    c.expect_no_response().await;
}
