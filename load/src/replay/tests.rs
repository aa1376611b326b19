//! Replay: a trace becomes the floor's responses and the clients' replies; responses have exactly
//! the recorded sizes.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::wire::Response;

fn got(type_index: usize, bytes: usize) -> Event {
    Event::Response { type_index, bytes }
}

fn req(s: &'static str) -> Event {
    Event::Request(Bytes::from_static(s.as_bytes()))
}

#[test]
fn a_trace_groups_requests_under_the_response_they_answer() {
    let trace = vec![
        req("straggler"),
        got(0, 345_000),
        req("cds ack"),
        req("eds names"),
        Event::Hit,
        got(1, 300),
        req("eds ack"),
        got(3, 20_000),
        Event::Hit,
    ];
    let push = Push::from_trace("new service", trace).unwrap();
    assert_eq!(push.kind, "new service");
    assert_eq!(
        push.responses,
        [
            Sent {
                type_index: 0,
                bytes: 345_000
            },
            Sent {
                type_index: 1,
                bytes: 300
            },
            Sent {
                type_index: 3,
                bytes: 20_000
            },
        ]
    );
    assert_eq!(push.marker, 0, "the first hit is the one timed");
    assert_eq!(
        push.replies,
        [
            vec![
                Bytes::from_static(b"cds ack"),
                Bytes::from_static(b"eds names")
            ],
            vec![Bytes::from_static(b"eds ack")],
            vec![],
        ]
    );
    assert_eq!(push.response_bytes(), 365_300);
}

#[test]
fn the_storm_is_synced_at_its_last_response() {
    let storm = Push::storm(vec![
        req("cds+lds requests"),
        got(0, 340_000),
        req("cds ack"),
        req("eds names"),
        got(2, 900),
        got(1, 1_500_000),
        req("eds ack"),
    ])
    .unwrap();
    assert_eq!(storm.kind, STORM);
    assert_eq!(storm.marker, 2);
    assert_eq!(storm.response_bytes(), 1_840_900);
    assert_eq!(storm.reply_bytes(), "cds ackeds nameseds ack".len());
    assert_eq!(Push::storm(vec![req("x")]), Err(ReplayError::EmptyStorm));
}

#[test]
fn a_trace_without_its_change_cannot_be_replayed() {
    assert_eq!(
        Push::from_trace("endpoint", vec![got(1, 10)]),
        Err(ReplayError::NoHit("endpoint".into()))
    );
    assert_eq!(
        Push::from_trace("endpoint", vec![req("x"), Event::Hit]),
        Err(ReplayError::HitFirst("endpoint".into()))
    );
}

#[test]
fn responses_have_exactly_the_recorded_size_and_type() {
    // around the one- to three-byte varint boundaries of every length prefix involved
    let sizes = (90..600)
        .chain(16_300..16_500)
        .chain([345_123, 2_097_100, 2_097_152, 2_097_200]);
    for delta in [false, true] {
        for bytes in sizes.clone() {
            for (type_index, type_url) in TYPES.iter().enumerate() {
                let sent = Sent { type_index, bytes };
                let framed = response(delta, sent, &Push::nonce(12, 3));
                assert_eq!(framed.len(), bytes + 5, "delta {delta}, {bytes} B");
                assert_eq!(&framed[1..5], &(bytes as u32).to_be_bytes());
                let r = Response::parse(framed.slice(5..), delta).unwrap();
                assert_eq!(r.type_url, *type_url);
                assert_eq!(Push::parse_nonce(&r.nonce), Some((12, 3)));
            }
        }
    }
}

#[test]
fn a_response_smaller_than_any_is_the_smallest() {
    let sent = Sent {
        type_index: 0,
        bytes: 10,
    };
    let framed = response(false, sent, "p0.0");
    assert!(framed.len() > 15);
    assert_eq!(
        Response::parse(framed.slice(5..), false).unwrap().type_url,
        TYPES[0]
    );
}

#[test]
fn the_replay_file_round_trips_without_the_replies() {
    let dir = std::env::temp_dir().join(format!("replay-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("replay.json");
    let push = Push::from_trace("endpoint", vec![got(1, 277), req("ack"), Event::Hit]).unwrap();
    write(&path, std::slice::from_ref(&push)).unwrap();
    let back = read(&path).unwrap();
    assert_eq!(back[0].responses, push.responses);
    assert_eq!(back[0].marker, 0);
    assert!(
        back[0].replies.is_empty(),
        "the server never needs the requests"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(matches!(read(&path), Err(ReplayError::File { .. })));
}
