//! Bounds on untrusted input, over real gRPC on loopback (SEC-8, SEC-9): a huge NACK message is
//! kept bounded; too many names, too many `initial_resource_versions`, an oversized message and a
//! flood of unknown type URLs are refused or ignored without growing the stream, and other streams
//! are unaffected.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use prost::Message;
use tonic::Code;
use tributary::xds::{MAX_ERROR_BYTES, MAX_NAMES_PER_REQUEST, XdsOptions};

use crate::support::resources::*;
use crate::support::*;

/// A NACK message of 1 MiB that repeats what a proxy might echo from config.
fn huge_message() -> String {
    "cluster 'x' rejected: ".repeat((1 << 20) / 22 + 1)
}

#[tokio::test]
async fn sec8_a_huge_sotw_nack_message_is_kept_bounded() {
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut c = s.ads("n").await;
    c.subscribe(CDS, &[]).await;
    let resp = c.expect(CDS, &["a"]).await;
    let message = huge_message();
    assert!(message.len() > 1_000_000);
    c.nack(&resp, &[], "", &message).await;
    let st = s.wait_status("n", CDS, |st| st.last_error.is_some()).await;
    let kept = st.last_error.unwrap();
    assert!(
        kept.len() <= MAX_ERROR_BYTES + 16,
        "kept {} bytes of a {}-byte NACK message",
        kept.len(),
        message.len()
    );
    assert!(kept.starts_with("cluster 'x' rejected"));
}

#[tokio::test]
async fn sec8_a_huge_delta_nack_message_is_kept_bounded() {
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut c = s.delta_ads("n").await;
    c.subscribe(CDS, &[]).await;
    let resp = c.expect(CDS, &["a"], &[]).await;
    c.nack(&resp, &huge_message()).await;
    let st = s.wait_status("n", CDS, |st| st.last_error.is_some()).await;
    assert!(st.last_error.unwrap().len() <= MAX_ERROR_BYTES + 16);
}

/// How long the server may take to refuse `request`: the usual wait, plus three times what
/// encoding and decoding `request` takes here and now. A request past a SEC-9 limit is refused
/// only once decoded, and its 200,001 names cost about a second of CPU in a debug build (the
/// client's encode plus the server's decode, on this test's one thread), several seconds on a busy
/// machine: a fixed wait for the status failed there. Measured under the same load, the wait grows
/// with it.
fn refusal_wait<M: Message + Default>(request: &M) -> Duration {
    let started = Instant::now();
    let bytes = request.encode_to_vec();
    drop(M::decode(bytes.as_slice()).expect("what we encoded decodes"));
    RESPONSE_TIMEOUT + 3 * started.elapsed()
}

#[tokio::test]
async fn sec9_too_many_names_in_one_sotw_request_end_the_stream() {
    let s = TestServer::start(vec![cluster("a", "1"), cla("a", 1)]).await;
    let mut good = s.ads("good").await;
    good.subscribe(EDS, &["a"]).await;
    good.expect(EDS, &["a"]).await;
    let mut bad = s.ads("bad").await;
    let request = DiscoveryRequest {
        node: Some(bad.node.clone()),
        type_url: EDS.type_url().into(),
        resource_names: (0..=MAX_NAMES_PER_REQUEST)
            .map(|i| format!("c{i}"))
            .collect(),
        ..Default::default()
    };
    let wait = refusal_wait(&request);
    bad.send_raw(request).await;
    let status = bad.expect_status_within(wait).await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("limit"), "{status:?}");
    s.publish(vec![cla("a", 2)], vec![]);
    good.expect(EDS, &["a"]).await;
}

#[tokio::test]
async fn sec9_too_many_initial_resource_versions_end_the_delta_stream() {
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut c = s.delta_ads("irv").await;
    let irv: HashMap<String, String> = (0..=MAX_NAMES_PER_REQUEST)
        .map(|i| (format!("c{i}"), "v".to_string()))
        .collect();
    let request = DeltaDiscoveryRequest {
        node: Some(c.node.clone()),
        type_url: CDS.type_url().into(),
        initial_resource_versions: irv,
        ..Default::default()
    };
    let wait = refusal_wait(&request);
    c.send_raw(request).await;
    let status = c.expect_status_within(wait).await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let mut other = s.delta_ads("other").await;
    other.subscribe(CDS, &[]).await;
    other.expect(CDS, &["a"], &[]).await;
}

#[tokio::test]
async fn sec9_an_oversized_request_is_refused_before_it_is_decoded() {
    let s = TestServer::start_with(XdsOptions {
        max_decoding_message_size: 64 * 1024,
        ..XdsOptions::default()
    })
    .await;
    s.publish(vec![cluster("a", "1")], vec![]);
    let mut bad = s.ads("big").await;
    bad.send_raw(DiscoveryRequest {
        node: Some(bad.node.clone()),
        type_url: EDS.type_url().into(),
        resource_names: vec!["y".repeat(1000); 100],
        ..Default::default()
    })
    .await;
    let status = bad.expect_status().await;
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let mut good = s.ads("good").await;
    good.subscribe(CDS, &[]).await;
    good.expect(CDS, &["a"]).await;
}

#[tokio::test]
async fn sec9_a_flood_of_unknown_type_urls_is_ignored_and_the_stream_still_served() {
    // Unknown types hold no state (SOTW-5): ten thousand distinct ones change nothing on the
    // stream, which then gets clusters as usual.
    let s = TestServer::start(vec![cluster("a", "1")]).await;
    let mut c = s.ads("flood").await;
    for i in 0..10_000 {
        c.send_raw(DiscoveryRequest {
            node: (i == 0).then(|| c.node.clone()),
            type_url: format!("type.googleapis.com/flood.T{i}"),
            ..Default::default()
        })
        .await;
    }
    c.expect_no_response_for(Duration::from_millis(200)).await;
    c.subscribe(CDS, &[]).await;
    c.expect(CDS, &["a"]).await;
    let conns = s.conns("flood");
    assert_eq!(conns.len(), 1);
    let requested: Vec<_> = conns[0]
        .types
        .iter()
        .filter(|(_, st)| st.requested)
        .collect();
    assert_eq!(requested.len(), 1, "only CDS holds state");
}
