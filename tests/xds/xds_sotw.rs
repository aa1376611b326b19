//! SotW xDS protocol conformance, against the in-process server over real gRPC (H-RAW).
//!
//! Each test cites the rule it checks in `docs/protocol.md`. The harness checks INV-1,
//! INV-2, INV-3 and INV-5 on every response it receives.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind as ValueKind};
use tonic::Code;
use tributary::xds::{SyncStatus, XdsOptions};

use crate::support;
use crate::support::recorder::{counter, rendered};
use crate::support::resources::*;
use crate::support::*;

fn req(ty: tributary::envoy::ResourceType, names: &[&str], node: Option<Node>) -> DiscoveryRequest {
    DiscoveryRequest {
        node,
        type_url: ty.type_url().into(),
        resource_names: names.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn node(id: &str) -> Node {
    Node {
        id: id.into(),
        ..Default::default()
    }
}

fn string_value(s: &str) -> Value {
    Value {
        kind: Some(ValueKind::StringValue(s.into())),
    }
}

// ---------------------------------------------------------------- A.1 stream start and node

#[tokio::test]
async fn sotw_01a_no_node_is_invalid_argument_and_no_config() {
    // SOTW-1 (a): no node on the first request.
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut c = s.ads("n").await;
    c.send_raw(req(CDS, &[], None)).await;
    let status = c.expect_status().await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("node"), "{status:?}");
    s.wait_connections(0).await;
}

#[tokio::test]
async fn sotw_01b_empty_node_id_is_invalid_argument_and_no_config() {
    // SOTW-1 (b): node with an empty id.
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut c = s.ads("n").await;
    c.send_raw(req(CDS, &[], Some(node("")))).await;
    let status = c.expect_status().await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("node id"), "{status:?}");
}

#[tokio::test]
async fn sotw_02_later_requests_may_omit_node() {
    // SOTW-2: LDS with node, then CDS, EDS, RDS without (the harness sends the node once).
    let s = TestServer::start(vec![
        listener("l1", "r1"),
        cluster("c1", "1"),
        cla("c1", 1),
        route("r1", "c1"),
    ])
    .await;
    let mut c = s.ads("n2").await;
    c.subscribe(LDS, &[]).await;
    c.expect(LDS, &["l1"]).await;
    c.subscribe(CDS, &[]).await;
    c.expect(CDS, &["c1"]).await;
    c.subscribe(EDS, &["c1"]).await;
    c.expect(EDS, &["c1"]).await;
    c.subscribe(RDS, &["r1"]).await;
    c.expect(RDS, &["r1"]).await;
}

#[tokio::test]
async fn sotw_03_a_different_node_later_ends_the_stream() {
    // SOTW-3: the third request carries node B: the stream is rejected, never re-scoped.
    let s = TestServer::start(vec![cluster("a", "1"), cla("a", 1)]).await;
    let mut c = s.ads("node-a").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["a"]).await;
    c.ack(&r, &[]).await;
    let mut other = req(EDS, &["a"], Some(node("node-b")));
    other.response_nonce = String::new();
    c.send_raw(other).await;
    let status = c.expect_status().await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("node changed"), "{status:?}");
}

#[tokio::test]
async fn sotw_04_ads_requires_a_type_url() {
    // SOTW-4: ADS with type_url = "".
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut c = s.ads("n").await;
    let mut r = req(CDS, &[], Some(node("n")));
    r.type_url.clear();
    c.send_raw(r).await;
    let status = c.expect_status().await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("type_url"), "{status:?}");
}

#[tokio::test]
async fn sotw_04_per_type_service_rejects_a_conflicting_type_url() {
    // SOTW-4: StreamClusters called with the EDS type_url.
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut c = s.per_type(CDS, "n").await.unwrap();
    c.send_raw(req(EDS, &["a"], Some(node("n")))).await;
    let status = c.expect_status().await;
    assert_eq!(status.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn sotw_05_unknown_type_is_ignored_and_counted() {
    // SOTW-5: unknown type URLs interleaved with CDS/EDS; those keep working.
    let s = TestServer::start(vec![cluster("a", "1"), cla("a", 1)]).await;
    let before = counter("pilot_xds_invalid_requests{reason=unknown_type}");
    let mut c = s.ads("n").await;
    let mut foo = req(CDS, &[], Some(c.node.clone()));
    foo.type_url = "type.googleapis.com/foo.Bar".into();
    c.send_raw(foo.clone()).await;
    foo.node = None;
    c.request(CDS, &[], "", "").await;
    let r = c.expect(CDS, &["a"]).await;
    c.send_raw(foo.clone()).await;
    c.ack(&r, &[]).await;
    c.subscribe(EDS, &["a"]).await;
    c.send_raw(foo).await;
    c.expect(EDS, &["a"]).await;
    c.expect_no_response().await;
    assert!(counter("pilot_xds_invalid_requests{reason=unknown_type}") >= before + 3);
}

// ---------------------------------------------------------------- A.2 version_info and nonce

#[tokio::test]
async fn sotw_06_nonces_unique_across_types_over_many_pushes() {
    // SOTW-6, INV-3: ~200 pushes across four types on one stream; the harness checks every nonce.
    let s = TestServer::start(vec![
        cluster("c", "0"),
        cla("c", 0),
        listener("l", "r"),
        route("r", "c"),
    ])
    .await;
    let mut c = s.ads("n").await;
    for (ty, names) in [
        (CDS, vec![]),
        (EDS, vec!["c"]),
        (LDS, vec![]),
        (RDS, vec!["r"]),
    ] {
        c.subscribe(ty, &names).await;
        let r = c.expect_response().await;
        c.ack(&r, &names).await;
    }
    for i in 1..=50u32 {
        let tag = i.to_string();
        s.publish(
            vec![
                cluster("c", &tag),
                cla("c", i),
                listener("l", "r"),
                route("r", &tag),
            ],
            vec![],
        );
        s.publish(vec![listener("l", &format!("r{i}"))], vec![]);
        let mut seen = BTreeSet::new();
        while seen.len() < 4 {
            let r = c.expect_response().await;
            let names: &[&str] = if r.type_url == EDS.type_url() {
                &["c"]
            } else if r.type_url == RDS.type_url() {
                &["r"]
            } else {
                &[]
            };
            c.ack(&r, names).await;
            seen.insert(r.type_url.clone());
        }
    }
    c.expect_no_response().await;
}

#[tokio::test]
async fn sotw_07_version_is_per_type_and_content_derived() {
    // SOTW-7: changing one cluster changes the CDS version only; versions are content-derived.
    let content = || {
        vec![
            cluster("a", "1"),
            cluster("b", "1"),
            listener("l", "r"),
            route("r", "a"),
        ]
    };
    let s = TestServer::start(content()).await;
    let twin = TestServer::start(content()).await;
    assert_eq!(
        s.version(CDS),
        twin.version(CDS),
        "same content, same version (G-5)"
    );
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r1 = c.expect(CDS, &["a", "b"]).await;
    c.ack(&r1, &[]).await;
    c.subscribe(LDS, &[]).await;
    let l1 = c.expect(LDS, &["l"]).await;
    c.ack(&l1, &[]).await;
    let (lds_v, rds_v) = (s.version(LDS), s.version(RDS));
    s.publish(vec![cluster("a", "2")], vec![]);
    let r2 = c.expect(CDS, &["a", "b"]).await;
    assert_ne!(r2.version_info, r1.version_info);
    assert_eq!(r2.version_info, s.version(CDS));
    c.ack(&r2, &[]).await;
    c.expect_no_response().await;
    assert_eq!((s.version(LDS), s.version(RDS)), (lds_v, rds_v));
    // Back to the old content: back to the old version.
    s.publish(vec![cluster("a", "1")], vec![]);
    let r3 = c.expect(CDS, &["a", "b"]).await;
    assert_eq!(r3.version_info, r1.version_info);
}

#[tokio::test]
async fn sotw_08_first_request_on_a_new_stream_is_answered_in_full() {
    // SOTW-8: stream 2 starts with the version and nonce ACKed on stream 1.
    let s = TestServer::start(vec![cla("a", 1), cla("b", 1)]).await;
    let mut c1 = s.ads("n").await;
    c1.subscribe(EDS, &["a", "b"]).await;
    let r1 = c1.expect(EDS, &["a", "b"]).await;
    c1.ack(&r1, &["a", "b"]).await;
    drop(c1);
    let mut c2 = s.ads("n").await;
    c2.request(EDS, &["a", "b"], &r1.version_info, &r1.nonce)
        .await;
    c2.expect(EDS, &["a", "b"]).await;
}

#[tokio::test]
async fn sotw_09_stale_nonce_is_ignored_then_next_fresh_request_reevaluates() {
    // SOTW-9, G-4, BUG-8.
    let s = TestServer::start(vec![cla("a", 1), cla("b", 1)]).await;
    let before = counter("pilot_xds_expired_nonce{type=eds}");
    let mut c = s.ads("n").await;
    c.subscribe(EDS, &["a"]).await;
    let n1 = c.expect(EDS, &["a"]).await;
    s.publish(vec![cla("a", 2)], vec![]);
    let n2 = c.expect(EDS, &["a"]).await;
    // Stale: nonce n1 with new names → no response, no subscription change.
    c.request(EDS, &["a", "b"], &n1.version_info, &n1.nonce)
        .await;
    c.expect_no_response().await;
    assert!(counter("pilot_xds_expired_nonce{type=eds}") > before);
    let st = s.type_status("n", EDS);
    assert_eq!(st.names.len(), 1, "stale request changed nothing");
    // BUG-8: the fresh ACK carrying the same names delivers the added one.
    c.request(EDS, &["a", "b"], &n2.version_info, &n2.nonce)
        .await;
    c.expect(EDS, &["b"]).await;
}

// ---------------------------------------------------------------- A.3 ACK and NACK

#[tokio::test]
async fn sotw_11_ack_gets_no_response_and_is_recorded() {
    // SOTW-11
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["a"]).await;
    assert_eq!(s.type_status("n", CDS).status(), SyncStatus::Stale);
    c.ack(&r, &[]).await;
    c.expect_no_response().await;
    let st = s.type_status("n", CDS);
    assert_eq!(st.acked_nonce, st.sent_nonce);
    assert_eq!(st.acked_version.as_deref(), Some(r.version_info.as_str()));
    assert_eq!(st.status(), SyncStatus::Synced);
    assert_eq!(s.type_status("n", EDS).status(), SyncStatus::NotSent);
}

#[tokio::test]
async fn sotw_12_nack_is_detected_by_error_detail_only() {
    // SOTW-12, SOTW-15: Envoy PR #14841. EDS [A] at v1/n1 ACKed; [A,B] with v1/n1; server sends B
    // at v1/n2; the client answers v1/n2 *with* error_detail: a NACK although the version matches.
    let s = TestServer::start(vec![cla("A", 1), cla("B", 1)]).await;
    let before = counter("pilot_total_xds_rejects{type=eds}");
    let mut c = s.ads("n").await;
    c.subscribe(EDS, &["A"]).await;
    let r1 = c.expect(EDS, &["A"]).await;
    c.ack(&r1, &["A"]).await;
    c.request(EDS, &["A", "B"], &r1.version_info, &r1.nonce)
        .await;
    let r2 = c.expect(EDS, &["B"]).await;
    assert_eq!(r2.version_info, r1.version_info, "type version unchanged");
    c.nack(&r2, &["A", "B"], &r1.version_info, "B: bad endpoint")
        .await;
    let st = s.wait_status("n", EDS, |st| st.last_error.is_some()).await;
    assert_eq!(st.status(), SyncStatus::Error);
    assert_eq!(st.last_error.as_deref(), Some("B: bad endpoint"));
    assert!(counter("pilot_total_xds_rejects{type=eds}") > before);
    c.expect_no_response().await;
}

#[tokio::test]
async fn sotw_13_no_resend_after_nack_until_config_changes() {
    // SOTW-13, SOTW-15, G-7, BUG-4.
    let s = TestServer::start(vec![cluster("a", "bad")]).await;
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r1 = c.expect(CDS, &["a"]).await;
    // NACK, reporting an older applied version: no rollback, no resend.
    c.nack(&r1, &[], "", "a: invalid").await;
    c.expect_no_response().await;
    assert_eq!(s.type_status("n", CDS).status(), SyncStatus::Error);
    // Fix the input: a new version arrives, is ACKed, and the error clears.
    s.publish(vec![cluster("a", "good")], vec![]);
    let r2 = c.expect(CDS, &["a"]).await;
    assert_ne!(r2.version_info, r1.version_info);
    c.ack(&r2, &[]).await;
    let st = s
        .wait_status("n", CDS, |st| st.acked_nonce == st.sent_nonce)
        .await;
    assert_eq!(st.last_error, None);
    assert_eq!(st.status(), SyncStatus::Synced);
}

#[tokio::test]
async fn sotw_14_nack_carrying_new_names_delivers_them() {
    // SOTW-14, G-1: EDS [A], then a NACK carrying [A,B]: B arrives, A is not replayed.
    let s = TestServer::start(vec![cla("A", 1), cla("B", 1)]).await;
    let mut c = s.ads("n").await;
    c.subscribe(EDS, &["A"]).await;
    let r1 = c.expect(EDS, &["A"]).await;
    c.nack(&r1, &["A", "B"], "", "A: rejected").await;
    c.expect(EDS, &["B"]).await;
}

#[tokio::test]
async fn sotw_16_nack_state_is_per_type() {
    // SOTW-16: a CDS NACK does not hold back EDS.
    let s = TestServer::start(vec![cluster("a", "1"), cla("a", 1)]).await;
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &[]).await;
    let cds = c.expect(CDS, &["a"]).await;
    c.subscribe(EDS, &["a"]).await;
    let eds = c.expect(EDS, &["a"]).await;
    c.ack(&eds, &["a"]).await;
    c.nack(&cds, &[], "", "cluster a rejected").await;
    s.wait_status("n", CDS, |st| st.last_error.is_some()).await;
    s.publish(vec![cla("a", 2)], vec![]);
    let eds2 = c.expect(EDS, &["a"]).await;
    c.ack(&eds2, &["a"]).await;
    s.wait_status("n", EDS, |st| st.status() == SyncStatus::Synced)
        .await;
    assert_eq!(s.type_status("n", CDS).status(), SyncStatus::Error);
}

// ---------------------------------------------------------------- A.4 subscriptions and wildcard

#[tokio::test]
async fn sotw_17_newest_request_supersedes() {
    // SOTW-17: ten EDS requests in a burst; the final answer reflects the last.
    let names: Vec<String> = (0..10).map(|i| format!("e{i}")).collect();
    let s = TestServer::start(names.iter().map(|n| cla(n, 1)).collect()).await;
    let mut c = s.ads("n").await;
    for n in &names {
        c.subscribe(EDS, &[n.as_str()]).await;
    }
    let mut last = None;
    while let Ok(r) = tokio::time::timeout(QUIET, c.expect_response()).await {
        assert_eq!(resource_names(&r).len(), 1, "one name per response");
        last = Some(r);
    }
    assert_eq!(resource_names(&last.expect("a response")), ["e9"]);
}

#[tokio::test]
async fn sotw_18_rds_a_b_ab_a_sequence() {
    // SOTW-18: Istio TestEnvoyRDSUpdatedRouteRequest. Added names are sent even if unchanged;
    // removals need no response on RDS.
    let s = TestServer::start(vec![route("A", "c"), route("B", "c")]).await;
    let mut c = s.ads("n").await;
    c.subscribe(RDS, &["A"]).await;
    let r = c.expect(RDS, &["A"]).await;
    c.ack(&r, &["B"]).await;
    let r = c.expect(RDS, &["B"]).await;
    c.ack(&r, &["A", "B"]).await;
    let r = c.expect(RDS, &["A"]).await;
    c.ack(&r, &["A"]).await;
    c.expect_no_response().await;
}

#[tokio::test]
async fn sotw_18_eds_add_and_remove() {
    // SOTW-18: [a] → [a,b] sends b; [b] sends nothing; [a,b] sends a again.
    let s = TestServer::start(vec![cla("a", 1), cla("b", 1)]).await;
    let mut c = s.ads("n").await;
    c.subscribe(EDS, &["a"]).await;
    let r = c.expect(EDS, &["a"]).await;
    c.ack(&r, &["a", "b"]).await;
    let r = c.expect(EDS, &["b"]).await;
    c.ack(&r, &["b"]).await;
    c.expect_no_response().await;
    c.ack(&r, &["a", "b"]).await;
    c.expect(EDS, &["a"]).await;
}

#[tokio::test]
async fn sotw_19_resubscribe_resends() {
    // SOTW-19, BUG-5
    let s = TestServer::start(vec![cla("A", 1), cla("B", 1)]).await;
    let mut c = s.ads("n").await;
    c.subscribe(EDS, &["A"]).await;
    let r = c.expect(EDS, &["A"]).await;
    c.ack(&r, &["A"]).await;
    c.ack(&r, &[]).await;
    c.expect_no_response().await;
    c.ack(&r, &["A"]).await;
    let r = c.expect(EDS, &["A"]).await;
    c.ack(&r, &["A", "B"]).await;
    let r = c.expect(EDS, &["B"]).await;
    c.ack(&r, &["A"]).await;
    c.expect_no_response().await;
    c.ack(&r, &["A", "B"]).await;
    c.expect(EDS, &["B"]).await;
}

#[tokio::test]
async fn sotw_20_empty_eds_after_names_unsubscribes_all() {
    // SOTW-20
    let s = TestServer::start(vec![cla("a", 1)]).await;
    let mut c = s.ads("n").await;
    c.subscribe(EDS, &["a"]).await;
    let r = c.expect(EDS, &["a"]).await;
    c.ack(&r, &[]).await;
    s.wait_status("n", EDS, |st| st.names.is_empty()).await;
    s.publish(vec![cla("a", 2)], vec![]);
    c.expect_no_response().await;
    c.ack(&r, &["a"]).await;
    let r = c.expect(EDS, &["a"]).await;
    assert_eq!(decode_cla(&r.resources[0]).endpoints[0].priority, 2);
}

#[tokio::test]
async fn sotw_21_spec_four_step_wildcard_sequence_on_cds() {
    // SOTW-21: [] → ["*","A"] → ["A"] → [], then ["*"] → [] → ["*"].
    let s = TestServer::start(vec![
        cluster("A", "1"),
        cluster("B", "1"),
        cluster("C", "1"),
    ])
    .await;
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &[]).await; // (1) legacy wildcard
    let r = c.expect(CDS, &["A", "B", "C"]).await;
    c.ack(&r, &["*", "A"]).await; // (2) wildcard + A: still everything
    let r = c.expect(CDS, &["A", "B", "C"]).await;
    c.ack(&r, &["A"]).await; // (3) wildcard ends, A stays
    let r = c.expect(CDS, &["A"]).await;
    c.ack(&r, &[]).await; // (4) unsubscribe from everything, not wildcard
    c.expect_no_response().await;
    s.publish(vec![cluster("A", "2"), cluster("D", "1")], vec![]);
    c.expect_no_response().await;
    c.ack(&r, &["*"]).await;
    let r = c.expect(CDS, &["A", "B", "C", "D"]).await;
    c.ack(&r, &[]).await;
    c.expect_no_response().await;
    s.publish(vec![cluster("B", "2")], vec![]);
    c.expect_no_response().await;
    c.ack(&r, &["*"]).await;
    c.expect(CDS, &["A", "B", "C", "D"]).await;
}

#[tokio::test]
async fn sotw_22_empty_first_eds_request_is_not_wildcard() {
    // SOTW-22, G-3: legacy "empty = wildcard" is for LDS/CDS only.
    let s = TestServer::start(vec![cla("a", 1), route("r", "a")]).await;
    let mut c = s.ads("n").await;
    c.subscribe(EDS, &[]).await;
    c.subscribe(RDS, &[]).await;
    c.expect_no_response().await;
    // an explicit "*" is a wildcard for any type
    c.subscribe(EDS, &["*"]).await;
    c.expect(EDS, &["a"]).await;
}

#[tokio::test]
async fn sotw_23_named_cds_and_lds() {
    // SOTW-23, SOTW-27: named CDS/LDS (the gRPC client pattern); unknown names are remembered.
    let s = TestServer::start(vec![
        cluster("a", "1"),
        cluster("b", "1"),
        listener("l1", "r"),
    ])
    .await;
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &["a", "z"]).await;
    let r = c.expect(CDS, &["a"]).await;
    c.ack(&r, &["a", "z"]).await;
    s.publish(vec![cluster("b", "2")], vec![]); // unrelated: nothing to send (SOTW-28)
    c.expect_no_response().await;
    s.publish(vec![cluster("z", "1")], vec![]);
    let r = c.expect(CDS, &["a", "z"]).await;
    c.ack(&r, &["a", "z"]).await;
    c.subscribe(LDS, &["l1", "l2"]).await;
    let r = c.expect(LDS, &["l1"]).await;
    c.ack(&r, &["l1", "l2"]).await;
    s.publish(vec![listener("l2", "r")], vec![]);
    c.expect(LDS, &["l1", "l2"]).await;
}

// ---------------------------------------------------------------- A.5 full state, deletion

#[tokio::test]
async fn sotw_24_cds_carries_the_full_set_every_time() {
    // SOTW-24: 100 clusters, change one: one response with all 100.
    let names: Vec<String> = (0..100).map(|i| format!("c{i:03}")).collect();
    let s = TestServer::start(names.iter().map(|n| cluster(n, "1")).collect()).await;
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect_response().await;
    assert_eq!(r.resources.len(), 100);
    c.ack(&r, &[]).await;
    s.publish(vec![cluster("c042", "2")], vec![]);
    let r2 = c.expect_response().await;
    assert_eq!(resource_names(&r2), names);
    c.ack(&r2, &[]).await;
    c.expect_no_response().await;
}

#[tokio::test]
async fn sotw_25_deleting_a_cluster_omits_exactly_it() {
    // SOTW-25
    let s = TestServer::start(vec![
        cluster("a", "1"),
        cluster("b", "1"),
        cluster("c", "1"),
    ])
    .await;
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["a", "b", "c"]).await;
    c.ack(&r, &[]).await;
    s.publish(vec![], vec![(CDS, "b")]);
    c.expect(CDS, &["a", "c"]).await;
}

#[tokio::test]
async fn sotw_26_eds_sends_only_what_changed() {
    // SOTW-26: change a → [a] only; zero endpoints → an empty CLA; deletion → nothing owed.
    let s = TestServer::start(vec![cla("a", 1), cla("b", 1), cla("c", 1)]).await;
    let mut c = s.ads("n").await;
    c.subscribe(EDS, &["a", "b", "c"]).await;
    let r = c.expect(EDS, &["a", "b", "c"]).await;
    c.ack(&r, &["a", "b", "c"]).await;
    s.publish(vec![cla("a", 2)], vec![]);
    let r = c.expect(EDS, &["a"]).await;
    c.ack(&r, &["a", "b", "c"]).await;
    let empty = tributary::envoy::EncodedResource::encode(
        EDS,
        "b",
        &envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment {
            cluster_name: "b".into(),
            ..Default::default()
        },
    );
    s.publish(vec![empty], vec![]);
    let r = c.expect(EDS, &["b"]).await;
    assert!(decode_cla(&r.resources[0]).endpoints.is_empty());
    c.ack(&r, &["a", "b", "c"]).await;
    s.publish(vec![], vec![(EDS, "c")]);
    c.expect_no_response().await;
}

#[tokio::test]
async fn sotw_27_unknown_eds_gets_an_empty_cla_then_its_creation() {
    // SOTW-27, BUG-3, G-6; and unknown RDS names remembered.
    let s = TestServer::start(vec![cla("a", 1), route("r1", "a")]).await;
    let mut c = s.ads("n").await;
    c.subscribe(EDS, &["a", "z"]).await;
    let r = c.expect(EDS, &["a", "z"]).await;
    let z = decode_cla(&r.resources[1]);
    assert_eq!(z.cluster_name, "z");
    assert!(z.endpoints.is_empty());
    c.ack(&r, &["a", "z"]).await;
    s.publish(vec![cla("z", 7)], vec![]);
    let r = c.expect(EDS, &["z"]).await;
    assert_eq!(decode_cla(&r.resources[0]).endpoints[0].priority, 7);
    c.subscribe(RDS, &["r1", "rz"]).await;
    let r = c.expect(RDS, &["r1"]).await;
    c.ack(&r, &["r1", "rz"]).await;
    s.publish(vec![route("rz", "a")], vec![]);
    c.expect(RDS, &["rz"]).await;
}

#[tokio::test]
async fn sotw_28_no_response_when_nothing_changed_for_this_client() {
    // SOTW-28
    let s = TestServer::start(vec![
        cluster("a", "1"),
        cla("a", 1),
        cla("other", 1),
        route("r", "a"),
    ])
    .await;
    let mut c = s.ads("n").await;
    c.subscribe(EDS, &["a"]).await;
    let r = c.expect(EDS, &["a"]).await;
    c.ack(&r, &["a"]).await;
    c.subscribe(CDS, &["a"]).await;
    let r = c.expect(CDS, &["a"]).await;
    c.ack(&r, &["a"]).await;
    // An endpoint change for another cluster, a route nobody here watches, and a no-op rebuild.
    s.publish(vec![cla("other", 2), route("r", "other")], vec![]);
    assert_eq!(
        s.publish(vec![cla("a", 1)], vec![]),
        None,
        "same content is no change"
    );
    c.expect_no_response().await;
}

// ---------------------------------------------------------------- A.6 ordering and warming

#[tokio::test]
async fn sotw_30_one_push_goes_out_cds_eds_lds_rds() {
    // SOTW-30
    let s = TestServer::start(vec![
        cluster("c", "1"),
        cla("c", 1),
        listener("l", "r"),
        route("r", "c"),
    ])
    .await;
    let mut c = s.ads("n").await;
    for (ty, names) in [
        (RDS, vec!["r"]),
        (LDS, vec![]),
        (EDS, vec!["c"]),
        (CDS, vec![]),
    ] {
        c.subscribe(ty, &names).await;
        let r = c.expect_response().await;
        c.ack(&r, &names).await;
    }
    c.expect_no_response().await;
    s.publish(
        vec![
            route("r", "c2"),
            listener("l", "r2"),
            cla("c", 2),
            cluster("c", "2"),
        ],
        vec![],
    );
    let mut order = vec![];
    for _ in 0..4 {
        order.push(c.expect_response().await.type_url);
    }
    let expected: Vec<String> = [CDS, EDS, LDS, RDS]
        .iter()
        .map(|t| t.type_url().to_string())
        .collect();
    assert_eq!(order, expected);
}

#[tokio::test]
async fn sotw_31_make_before_break_routes_never_reference_unsent_clusters() {
    // SOTW-31: a route switches from X to a new cluster Y, then X is deleted.
    let s = TestServer::start(vec![cluster("X", "1"), cla("X", 1), route("r", "X")]).await;
    let mut c = s.ads("n").await;
    let mut clusters: BTreeSet<String> = BTreeSet::new();
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["X"]).await;
    clusters.extend(resource_names(&r));
    c.ack(&r, &[]).await;
    c.subscribe(RDS, &["r"]).await;
    let r = c.expect(RDS, &["r"]).await;
    c.ack(&r, &["r"]).await;
    s.publish(
        vec![cluster("Y", "1"), cla("Y", 1), route("r", "Y")],
        vec![],
    );
    s.publish(vec![], vec![(CDS, "X"), (EDS, "X")]);
    let mut saw_route_to_y = false;
    while let Ok(r) = tokio::time::timeout(QUIET, c.expect_response()).await {
        if r.type_url == CDS.type_url() {
            // clusters are only removed after the route moved away from them
            let now: BTreeSet<String> = resource_names(&r).into_iter().collect();
            if !now.contains("X") {
                assert!(
                    saw_route_to_y,
                    "X removed before the route stopped using it"
                );
            }
            clusters.extend(now);
            c.ack(&r, &[]).await;
        } else {
            for cl in route_clusters(&r.resources[0]) {
                assert!(
                    clusters.contains(&cl),
                    "route references {cl} before CDS sent it"
                );
                saw_route_to_y |= cl == "Y";
            }
            c.ack(&r, &["r"]).await;
        }
    }
    assert!(saw_route_to_y);
}

#[tokio::test]
async fn sotw_31_cluster_removed_in_the_same_push_outlives_the_route_update() {
    // SOTW-31: one snapshot adds Y, moves the route to Y and deletes X. CDS goes first and must
    // keep X (the client's route still uses it); once RDS moved, a follow-up CDS drops X.
    let s = TestServer::start(vec![cluster("X", "1"), route("r", "X"), listener("l", "r")]).await;
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["X"]).await;
    c.ack(&r, &[]).await;
    c.subscribe(RDS, &["r"]).await;
    let r = c.expect(RDS, &["r"]).await;
    c.ack(&r, &["r"]).await;
    s.publish(vec![cluster("Y", "1"), route("r", "Y")], vec![(CDS, "X")]);
    let interim = c.expect(CDS, &["Y", "X"]).await;
    c.ack(&interim, &[]).await;
    let rds = c.expect(RDS, &["r"]).await;
    assert_eq!(route_clusters(&rds.resources[0]), ["Y"]);
    c.ack(&rds, &["r"]).await;
    let fin = c.expect(CDS, &["Y"]).await;
    assert_ne!(
        fin.version_info, interim.version_info,
        "different content, different version"
    );
    assert_eq!(fin.version_info, s.version(CDS));
    c.ack(&fin, &[]).await;
    c.expect_no_response().await;
    // Without a listener/route change in the same push, a removal goes out at once.
    s.publish(vec![], vec![(CDS, "Y")]);
    c.expect(CDS, &[]).await;
}

#[tokio::test]
async fn sotw_31_a_removal_alone_sends_routes_first_and_no_cds_the_client_holds() {
    // SOTW-31: one snapshot moves the route from X to Y (both known) and deletes X. A CDS response
    // keeping X would repeat what the client holds, so none goes out before the routes; the CDS
    // that drops X follows them.
    let s = TestServer::start(vec![
        cluster("X", "1"),
        cluster("Y", "1"),
        route("r", "X"),
        listener("l", "r"),
    ])
    .await;
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect(CDS, &["X", "Y"]).await;
    c.ack(&r, &[]).await;
    c.subscribe(RDS, &["r"]).await;
    let r = c.expect(RDS, &["r"]).await;
    c.ack(&r, &["r"]).await;
    s.publish(vec![route("r", "Y")], vec![(CDS, "X")]);
    let rds = c.expect(RDS, &["r"]).await;
    assert_eq!(route_clusters(&rds.resources[0]), ["Y"]);
    c.ack(&rds, &["r"]).await;
    let fin = c.expect(CDS, &["Y"]).await;
    assert_eq!(fin.version_info, s.version(CDS));
    c.ack(&fin, &[]).await;
    c.expect_no_response().await;
}

#[tokio::test]
async fn sotw_32_istio_ads_reconnect_requests_sequence() {
    // SOTW-32, BUG-2: Istio TestAdsReconnectRequests. On a new stream EDS comes first with a nonce
    // from the old stream (e1) and is answered (e2); then CDS; then EDS with e2, which looks like
    // an ACK, must still be answered.
    let s = TestServer::start(vec![cluster("c1", "1"), cla("c1", 1)]).await;
    let mut c = s.ads("n").await;
    c.request(EDS, &["c1"], "old-version", "old-e1").await;
    let e2 = c.expect(EDS, &["c1"]).await;
    c.subscribe(CDS, &[]).await;
    let cds = c.expect(CDS, &["c1"]).await;
    c.ack(&cds, &[]).await;
    c.ack(&e2, &["c1"]).await;
    let e3 = c.expect(EDS, &["c1"]).await;
    c.ack(&e3, &["c1"]).await;
    c.expect_no_response().await;
}

#[tokio::test]
async fn sotw_32_cds_change_forces_eds_for_changed_clusters_only() {
    // SOTW-32: a CDS change to c1 (say its circuit breakers) with no EDS change: the next EDS
    // request, ACK-like, is answered with c1's CLA only.
    let s = TestServer::start(vec![
        cluster("c1", "1"),
        cluster("c2", "1"),
        cla("c1", 1),
        cla("c2", 1),
    ])
    .await;
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &[]).await;
    let cds = c.expect(CDS, &["c1", "c2"]).await;
    c.ack(&cds, &[]).await;
    c.subscribe(EDS, &["c1", "c2"]).await;
    let eds = c.expect(EDS, &["c1", "c2"]).await;
    c.ack(&eds, &["c1", "c2"]).await;
    c.expect_no_response().await;
    s.publish(vec![cluster("c1", "2")], vec![]);
    let cds = c.expect(CDS, &["c1", "c2"]).await;
    c.expect_no_response().await; // no EDS change: nothing pushed
    c.ack(&cds, &[]).await;
    c.ack(&eds, &["c1", "c2"]).await; // looks exactly like an ACK
    c.expect(EDS, &["c1"]).await;
}

#[tokio::test]
async fn sotw_33_lds_rds_warming() {
    // SOTW-33: a new listener's new route is answered at once; a listener change that keeps its
    // route name needs no RDS resend.
    let s = TestServer::start(vec![
        listener("l1", "r1"),
        route("r1", "c"),
        route("r2", "c"),
    ])
    .await;
    let mut c = s.ads("n").await;
    c.subscribe(LDS, &[]).await;
    let lds = c.expect(LDS, &["l1"]).await;
    c.ack(&lds, &[]).await;
    c.subscribe(RDS, &[&listener_route(&lds.resources[0])])
        .await;
    let rds = c.expect(RDS, &["r1"]).await;
    c.ack(&rds, &["r1"]).await;
    s.publish(vec![listener("l2", "r2")], vec![]);
    let lds = c.expect(LDS, &["l1", "l2"]).await;
    c.ack(&lds, &[]).await;
    c.ack(&rds, &["r1", "r2"]).await;
    let rds = c.expect_response_within(Duration::from_secs(1)).await;
    assert_eq!(resource_names(&rds), ["r2"]);
    c.ack(&rds, &["r1", "r2"]).await;
    // change l2, same route name
    s.publish(
        vec![listener("l2", "r2"), {
            let l = envoy_types::pb::envoy::config::listener::v3::Listener {
                name: "l2".into(),
                stat_prefix: "r2".into(),
                continue_on_listener_filters_timeout: true,
                ..Default::default()
            };
            tributary::envoy::EncodedResource::encode(LDS, "l2", &l)
        }],
        vec![],
    );
    let lds = c.expect(LDS, &["l1", "l2"]).await;
    c.ack(&lds, &[]).await;
    c.ack(&rds, &["r1", "r2"]).await;
    c.expect_no_response().await;
}

#[tokio::test]
async fn sotw_34_types_are_independent_on_one_stream() {
    // SOTW-34: requests for all types back to back are all answered; ACKs tracked per type.
    let s = TestServer::start(vec![
        cluster("c", "1"),
        cla("c", 1),
        listener("l", "r"),
        route("r", "c"),
    ])
    .await;
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &[]).await;
    c.subscribe(EDS, &["c"]).await;
    c.subscribe(LDS, &[]).await;
    c.subscribe(RDS, &["r"]).await;
    let mut got = vec![];
    for _ in 0..4 {
        got.push(c.expect_response().await);
    }
    let types: BTreeSet<&str> = got.iter().map(|r| r.type_url.as_str()).collect();
    assert_eq!(types.len(), 4);
    let cds = got.iter().find(|r| r.type_url == CDS.type_url()).unwrap();
    c.ack(cds, &[]).await;
    s.wait_status("n", CDS, |st| st.status() == SyncStatus::Synced)
        .await;
    for ty in [EDS, LDS, RDS] {
        assert_eq!(s.type_status("n", ty).status(), SyncStatus::Stale, "{ty}");
    }
}

#[tokio::test]
async fn sotw_35_a_response_owed_for_an_unsubscribed_type_is_never_sent() {
    // SOTW-35, INV-5: the client stops reading during a 1 MiB CDS response. h2 holds that
    // response and hyper has already pulled the next one (RDS) from the body, so the EDS response
    // for [s] is owed but cannot be built; the client then unsubscribes EDS. That response must
    // never be delivered, nor count as sent.
    let s = TestServer::start_behind_big_cds(vec![cla("s", 1), route("r", "c0")]).await;
    let mut c = s.ads_with_window("n", 64 * 1024).await;
    c.subscribe(CDS, &[]).await;
    s.wait_status("n", CDS, |st| st.sent_nonce.is_some()).await;
    c.subscribe(RDS, &["r"]).await;
    s.wait_status("n", RDS, |st| st.sent_nonce.is_some()).await;
    c.subscribe(EDS, &["s"]).await;
    s.wait_status("n", EDS, |st| st.names.len() == 1).await;
    c.request(EDS, &[], "", "").await;
    let st = s.wait_status("n", EDS, |st| st.names.is_empty()).await;
    assert_eq!(
        st.status(),
        SyncStatus::NotSent,
        "nothing was built for EDS"
    );
    let cds = c.expect_response().await;
    assert_eq!(
        (cds.type_url.as_str(), cds.resources.len()),
        (CDS.type_url(), 10)
    );
    c.expect(RDS, &["r"]).await;
    c.expect_no_response().await;
}

/// A stream that owes the client an EDS response for a change to `s` (behind a stuck 1 MiB CDS
/// and an RDS response hyper already pulled), while the client last saw EDS N1.
async fn eds_change_owed_behind_stuck_cds() -> (TestServer, XdsClient, String) {
    let s =
        TestServer::start_behind_big_cds(vec![cla("s", 1), cla("t", 1), route("r", "c0")]).await;
    let mut c = s.ads_with_window("n", 64 * 1024).await;
    c.subscribe(EDS, &["s"]).await;
    let n1 = c.expect(EDS, &["s"]).await;
    c.ack(&n1, &["s"]).await;
    c.subscribe(RDS, &["r"]).await;
    let r1 = c.expect(RDS, &["r"]).await;
    c.ack(&r1, &["r"]).await;
    c.subscribe(CDS, &[]).await;
    s.owe_eds_behind_stuck_cds("n", &r1.nonce).await;
    (s, c, n1.nonce)
}

#[tokio::test]
async fn sotw_35_unsubscribe_with_the_last_seen_nonce_drops_the_owed_response() {
    // SOTW-35, INV-5, the Envoy shape: the unsubscribe carries N1, the last EDS nonce the client
    // saw, while the change to s is owed. Nothing more goes out for s.
    let (s, mut c, n1) = eds_change_owed_behind_stuck_cds().await;
    c.request(EDS, &[], "", &n1).await;
    let st = s.wait_status("n", EDS, |st| st.names.is_empty()).await;
    assert_eq!(
        st.sent_nonce.as_deref(),
        Some(n1.as_str()),
        "nothing was sent after N1"
    );
    assert_eq!(c.expect_response().await.type_url, CDS.type_url());
    c.expect(RDS, &["r"]).await;
    c.expect_no_response().await;
}

#[tokio::test]
async fn bug_08_subscription_change_while_a_response_is_owed_is_honoured() {
    // BUG-8, SOTW-17: the client adds t with nonce N1 while the change to s is owed. The response
    // is built after the change, so the client gets s and t in one response.
    let (s, mut c, n1) = eds_change_owed_behind_stuck_cds().await;
    c.request(EDS, &["s", "t"], "", &n1).await;
    s.wait_status("n", EDS, |st| st.names.len() == 2).await;
    assert_eq!(c.expect_response().await.type_url, CDS.type_url());
    c.expect(RDS, &["r"]).await;
    let r = c.expect(EDS, &["s", "t"]).await;
    assert_eq!(decode_cla(&r.resources[0]).endpoints[0].priority, 2);
}

#[tokio::test]
async fn sotw_36_requests_are_handled_while_pushes_are_stuck() {
    // SOTW-36: the push side is blocked by a client that does not read, yet its ACK is processed.
    let big: Vec<_> = (0..10)
        .map(|i| big_cluster(&format!("c{i}"), 100 * 1024))
        .collect();
    let s = TestServer::start(big.into_iter().chain([cla("e", 1)]).collect()).await;
    let mut c = s.ads_with_window("n", 64 * 1024).await;
    c.subscribe(EDS, &["e"]).await;
    let eds = c.expect(EDS, &["e"]).await;
    c.subscribe(CDS, &[]).await;
    s.wait_status("n", CDS, |st| st.sent_nonce.is_some()).await;
    let expired = counter("pilot_xds_expired_nonce{type=eds}");
    for i in 2..6 {
        s.publish(vec![cla("e", i)], vec![]); // pushes pile up behind the stuck CDS
    }
    // A new subscription and an ACK (now stale: hyper pulled a newer EDS response) are both
    // processed although nothing can be written.
    c.subscribe(RDS, &["r"]).await;
    s.wait_status("n", RDS, |st| st.requested && st.names.len() == 1)
        .await;
    s.wait_status("n", EDS, |st| {
        st.sent_nonce.as_deref() != Some(eds.nonce.as_str())
    })
    .await;
    c.ack(&eds, &["e"]).await;
    for _ in 0..100 {
        if counter("pilot_xds_expired_nonce{type=eds}") > expired {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the ACK was not processed while pushes were stuck");
}

// ---------------------------------------------------------------- C. transport

#[tokio::test]
async fn trans_01_a_stuck_client_does_not_delay_others_and_is_coalesced() {
    // TRANS-1: client A stops reading; B keeps converging; A later sees only the latest state.
    let big = |tag: &str| -> Vec<_> {
        (0..10)
            .map(|i| {
                let mut c = big_cluster(&format!("c{i}"), 100 * 1024);
                if i == 0 {
                    c = cluster("c0", tag);
                }
                c
            })
            .collect()
    };
    let s = TestServer::start(big("0")).await;
    let mut a = s.ads_with_window("stuck", 64 * 1024).await;
    a.subscribe(CDS, &[]).await;
    s.wait_status("stuck", CDS, |st| st.sent_nonce.is_some())
        .await;
    let mut b = s.ads("fine").await;
    b.subscribe(CDS, &[]).await;
    let r = b.expect_response().await;
    b.ack(&r, &[]).await;
    for i in 1..=20 {
        s.publish(vec![cluster("c0", &i.to_string())], vec![]);
        let r = b.expect_response().await;
        assert_eq!(r.version_info, s.version(CDS));
        b.ack(&r, &[]).await;
    }
    // Reading now yields far fewer than 21 responses, the last with the newest version.
    let mut count = 0;
    let mut last = None;
    while let Ok(r) = tokio::time::timeout(Duration::from_secs(1), a.expect_response()).await {
        count += 1;
        a.ack(&r, &[]).await;
        last = Some(r);
    }
    // In flight for a stuck stream: one response in h2's send buffer and the next pulled by
    // hyper; then the newest. Never one per snapshot.
    assert!(
        count <= 4,
        "stuck client got {count} responses: not coalesced"
    );
    assert_eq!(last.unwrap().version_info, s.version(CDS));
}

#[tokio::test]
async fn trans_03_client_killed_mid_push_frees_its_stream() {
    // TRANS-3, BUG-12
    let big: Vec<_> = (0..10)
        .map(|i| big_cluster(&format!("c{i}"), 100 * 1024))
        .collect();
    let s = TestServer::start(big).await;
    for round in 0..5 {
        let mut c = s.ads_with_window(&format!("k{round}"), 64 * 1024).await;
        c.subscribe(CDS, &[]).await;
        s.wait_status(&format!("k{round}"), CDS, |st| st.sent_nonce.is_some())
            .await;
        drop(c); // connection closed with the push half-written
    }
    s.wait_connections(0).await;
    let mut ok = s.ads("after").await;
    ok.subscribe(CDS, &[]).await;
    assert_eq!(ok.expect_response().await.resources.len(), 10);
}

#[tokio::test]
async fn trans_04_streams_with_the_same_node_are_independent() {
    // TRANS-4
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut a1 = s.ads("same").await;
    a1.subscribe(CDS, &[]).await;
    let r = a1.expect_response().await;
    a1.ack(&r, &[]).await;
    let mut a2 = s.ads("same").await;
    a2.subscribe(CDS, &[]).await;
    let r = a2.expect_response().await;
    a2.ack(&r, &[]).await;
    let conns = s.conns("same");
    assert_eq!(conns.len(), 2);
    assert_ne!(conns[0].id, conns[1].id);
    drop(a1);
    s.wait_connections(1).await;
    s.publish(vec![cluster("a", "2")], vec![]);
    assert_eq!(a2.expect_response().await.version_info, s.version(CDS));
    assert_eq!(s.conns("same").len(), 1);
}

#[tokio::test]
async fn trans_10_status_codes() {
    // TRANS-10: one case per code this server produces.
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut cases: Vec<(&str, DiscoveryRequest, Code)> = vec![
        ("missing node", req(CDS, &[], None), Code::InvalidArgument),
        (
            "missing type_url",
            {
                let mut r = req(CDS, &[], Some(node("n")));
                r.type_url.clear();
                r
            },
            Code::InvalidArgument,
        ),
    ];
    let mut bad_md = Struct::default();
    bad_md.fields.insert(
        tributary::xds::LISTENER_ADDRESS_KEY.into(),
        string_value("nope"),
    );
    cases.push((
        "malformed metadata",
        req(
            CDS,
            &[],
            Some(Node {
                id: "n".into(),
                metadata: Some(bad_md),
                ..Default::default()
            }),
        ),
        Code::InvalidArgument,
    ));
    for (what, r, code) in cases {
        let mut c = s.ads("n").await;
        c.send_raw(r).await;
        assert_eq!(c.expect_status().await.code(), code, "{what}");
    }
    // RESOURCE_EXHAUSTED: a request over the server's size limit.
    let small = TestServer::start_with(XdsOptions {
        max_decoding_message_size: 1024,
        ..XdsOptions::default()
    })
    .await;
    small.publish(vec![cluster("a", "1")], vec![]);
    let mut c = small.ads("n").await;
    let names: Vec<String> = (0..200).map(|i| format!("name-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    c.subscribe(EDS, &names).await;
    assert_eq!(c.expect_status().await.code(), Code::ResourceExhausted);
    // UNAVAILABLE: not ready (TRANS-11) and shutting down (TRANS-8).
    let unready = TestServer::start_unready().await;
    assert_eq!(
        unready.try_ads("n").await.err().map(|e| e.code()),
        Some(Code::Unavailable)
    );
    let mut live = s.ads("n").await;
    live.subscribe(CDS, &[]).await;
    live.expect_response().await;
    s.xds.drain();
    assert_eq!(live.expect_status().await.code(), Code::Unavailable);
    assert_eq!(
        s.try_ads("n").await.err().map(|e| e.code()),
        Some(Code::Unavailable)
    );
}

#[tokio::test]
async fn trans_11_unavailable_until_the_first_snapshot() {
    // TRANS-11, BUG-9
    let s = TestServer::start_unready().await;
    let err = s.try_ads("n").await.err().expect("refused");
    assert_eq!(err.code(), Code::Unavailable);
    assert!(err.message().contains("not ready"), "{err:?}");
    s.publish(vec![cluster("a", "1")], vec![]);
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &[]).await;
    c.expect(CDS, &["a"]).await;
}

#[tokio::test]
async fn trans_14_change_during_stream_start_is_not_lost() {
    // TRANS-14: publish right as streams initialize; each converges to the newest version.
    let s = TestServer::start(vec![cluster("a", "0")]).await;
    for i in 1..=20 {
        let mut c = s.ads(&format!("n{i}")).await;
        c.subscribe(CDS, &[]).await;
        s.publish(vec![cluster("a", &i.to_string())], vec![]);
        let mut last = c.expect_response().await;
        while let Ok(r) =
            tokio::time::timeout(Duration::from_millis(100), c.expect_response()).await
        {
            last = r;
        }
        assert_eq!(last.version_info, s.version(CDS), "stream {i}");
    }
}

#[tokio::test]
async fn trans_15_single_writer_under_concurrent_pushes_and_subscription_changes() {
    // TRANS-15: every response decodes, nonces never repeat (harness), and the final state is the
    // newest content for the final names.
    let names: Vec<String> = (0..8).map(|i| format!("e{i}")).collect();
    let s = std::sync::Arc::new(TestServer::start(names.iter().map(|n| cla(n, 0)).collect()).await);
    let mut c = s.ads("n").await;
    c.subscribe(EDS, &["e0"]).await;
    let mut last = c.expect_response().await;
    let publisher = {
        let s = std::sync::Arc::clone(&s);
        let names = names.clone();
        tokio::spawn(async move {
            for round in 1..=40u32 {
                s.publish(names.iter().map(|n| cla(n, round)).collect(), vec![]);
                tokio::task::yield_now().await;
            }
        })
    };
    for i in 1..=8 {
        let subset: Vec<&str> = names[..i].iter().map(String::as_str).collect();
        c.ack(&last, &subset).await;
        if let Ok(r) = tokio::time::timeout(Duration::from_millis(50), c.expect_response()).await {
            last = r;
        }
    }
    publisher.await.unwrap();
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut latest = std::collections::BTreeMap::new();
    loop {
        c.ack(&last, &all).await;
        match tokio::time::timeout(QUIET, c.expect_response()).await {
            Ok(r) => {
                for any in &r.resources {
                    let cla = decode_cla(any);
                    latest.insert(cla.cluster_name, cla.endpoints[0].priority);
                }
                last = r;
            }
            Err(_) => break,
        }
    }
    // Every name the client wants ends at round 40 (names delivered earlier were already current).
    let st = s.type_status("n", EDS);
    assert_eq!(st.names.len(), 8);
    for (name, prio) in latest {
        assert_eq!(prio, 40, "{name} not at the newest content");
    }
}

// ---------------------------------------------------------------- per-type services

#[tokio::test]
async fn per_type_services_serve_without_ads() {
    // SOTW-4: the type is implied by the method; an explicit matching type_url is fine too.
    let s = TestServer::start(vec![
        cluster("a", "1"),
        cla("a", 1),
        listener("l", "r"),
        route("r", "a"),
    ])
    .await;
    let mut cds = s.per_type(CDS, "n").await.unwrap();
    let mut first = req(CDS, &[], Some(cds.node.clone()));
    first.type_url.clear();
    cds.send_raw(first).await;
    let r = cds.expect(CDS, &["a"]).await;
    cds.ack(&r, &[]).await;
    cds.expect_no_response().await;
    let mut eds = s.per_type(EDS, "n").await.unwrap();
    eds.subscribe(EDS, &["a"]).await;
    let r = eds.expect(EDS, &["a"]).await;
    eds.ack(&r, &["a"]).await;
    s.publish(vec![cla("a", 2)], vec![]);
    eds.expect(EDS, &["a"]).await;
    let mut lds = s.per_type(LDS, "n").await.unwrap();
    lds.subscribe(LDS, &[]).await;
    lds.expect(LDS, &["l"]).await;
    let mut rds = s.per_type(RDS, "n").await.unwrap();
    rds.subscribe(RDS, &["r"]).await;
    rds.expect(RDS, &["r"]).await;
}

// ---------------------------------------------------------------- garbage input

#[tokio::test]
async fn garbage_huge_name_is_refused_clearly_and_others_are_served() {
    // SEC-12 guard rails: a name over MAX_NAME_BYTES.
    let s = TestServer::start(vec![cluster("a", "1"), cla("a", 1)]).await;
    let mut bad = s.ads("bad").await;
    let huge = "x".repeat(tributary::xds::MAX_NAME_BYTES + 1);
    bad.subscribe(EDS, &[&huge]).await;
    let status = bad.expect_status().await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("limit"), "{status:?}");
    let mut good = s.ads("good").await;
    good.subscribe(EDS, &["a"]).await;
    good.expect(EDS, &["a"]).await;
}

#[tokio::test]
async fn garbage_metadata_is_refused_clearly_and_others_are_served() {
    // SEC-12: an invalid LISTENER_ADDRESS and absurdly deep metadata.
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut md = Struct::default();
    md.fields.insert(
        tributary::xds::LISTENER_ADDRESS_KEY.into(),
        string_value("garbage"),
    );
    let mut c = s.ads("n").await;
    c.send_raw(req(
        CDS,
        &[],
        Some(Node {
            id: "n".into(),
            metadata: Some(md),
            ..Default::default()
        }),
    ))
    .await;
    let status = c.expect_status().await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("LISTENER_ADDRESS"), "{status:?}");

    let mut v = string_value("leaf");
    for _ in 0..30 {
        let mut s = Struct::default();
        s.fields.insert("k".into(), v);
        v = Value {
            kind: Some(ValueKind::StructValue(s)),
        };
    }
    let mut deep = Struct::default();
    deep.fields.insert("deep".into(), v);
    let mut c = s.ads("n").await;
    c.send_raw(req(
        CDS,
        &[],
        Some(Node {
            id: "n".into(),
            metadata: Some(deep),
            ..Default::default()
        }),
    ))
    .await;
    assert_eq!(c.expect_status().await.code(), Code::InvalidArgument);

    let mut ok_md = Struct::default();
    ok_md.fields.insert(
        tributary::xds::LISTENER_ADDRESS_KEY.into(),
        string_value("127.0.0.2"),
    );
    let mut good = s.ads("good").await;
    good.node.metadata = Some(ok_md);
    good.subscribe(CDS, &[]).await;
    good.expect(CDS, &["a"]).await;
    let conns = s.conns("good");
    assert_eq!(
        conns[0].listener_address,
        Some("127.0.0.2".parse().unwrap())
    );
}

// ---------------------------------------------------------------- metrics and admin

const PUSHES_CDS: &str = "pilot_xds_pushes{type=\"cds\"}";
const SIZES_CDS: &str = "pilot_xds_config_size_bytes_count{type=\"cds\"}";
const CONVERGED: &str = "pilot_proxy_convergence_time_count";

#[tokio::test]
async fn metrics_and_forced_push() {
    // docs/ecosystem.md §1.4 names; /debug/adsz?push=true.
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let pushes = rendered(PUSHES_CDS);
    let converged = rendered(CONVERGED);
    let sizes = rendered(SIZES_CDS);
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &[]).await;
    let r = c.expect_response().await;
    c.ack(&r, &[]).await;
    s.publish(vec![cluster("a", "2")], vec![]);
    let r = c.expect_response().await;
    c.ack(&r, &[]).await;
    assert!(rendered(PUSHES_CDS) >= pushes + 2.0);
    assert!(rendered(SIZES_CDS) >= sizes + 2.0);
    assert!(rendered(CONVERGED) > converged);
    assert!(support::recorder::gauge("pilot_xds{}") >= 1.0);
    c.expect_no_response().await;
    assert_eq!(s.xds.connections().push_all(), 1);
    let forced = c.expect(CDS, &["a"]).await;
    assert_eq!(forced.version_info, r.version_info);
}
