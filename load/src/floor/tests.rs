//! The floor server in-process on loopback: it sends every client exactly the recorded responses,
//! and its sinks time the response that carried each change.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;

use super::*;
use crate::probe::Marker;
use crate::wire::{CDS, Response};

/// Bound on each wait of these tests: they stop by themselves.
const TEST_LIMIT: Duration = Duration::from_secs(30);
const CLIENTS: usize = 4;

/// The storm and two changes as a SotW trace would give them: a new service (full CDS, the new
/// CLA, a route configuration; the CDS answered with an ACK and a 90 KB EDS request) and a delete.
fn pushes() -> Vec<Push> {
    let sent = |type_index, bytes| crate::replay::Sent { type_index, bytes };
    let req = |n: usize| Bytes::from(vec![0; n]);
    vec![
        Push {
            kind: crate::replay::STORM.into(),
            responses: vec![
                sent(0, 340_000),
                sent(2, 900),
                sent(1, 1_500_000),
                sent(3, 20_000),
            ],
            marker: 3,
            replies: vec![
                vec![req(150), req(90_000)],
                vec![req(60), req(40)],
                vec![req(90_000)],
                vec![req(60)],
            ],
        },
        Push {
            kind: "new service".into(),
            responses: vec![sent(0, 345_123), sent(1, 301), sent(3, 20_480)],
            marker: 0,
            replies: vec![
                vec![req(150), req(90_000)],
                vec![req(90_001)],
                vec![req(60)],
            ],
        },
        Push {
            kind: "delete service".into(),
            responses: vec![sent(0, 344_900), sent(3, 20_300)],
            marker: 0,
            replies: vec![vec![req(150)], vec![]],
        },
    ]
}

async fn start(delta: bool, pushes: Vec<Push>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { serve_on(listener, delta, &pushes).await });
    addr
}

/// A bare client: opens the stream and returns it with the sender that keeps it open.
async fn open(channel: Channel, delta: bool) -> (tonic::Streaming<Response>, mpsc::Sender<Bytes>) {
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(usize::MAX);
    grpc.ready().await.unwrap();
    let (tx, rx) = mpsc::channel(8);
    tx.send(wire::sotw_request(EDS, "", "", &Bytes::new(), None))
        .await
        .unwrap();
    let path = if delta {
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"
    } else {
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
    };
    let stream = grpc
        .streaming(
            tonic::Request::new(ReceiverStream::new(rx)),
            PathAndQuery::from_static(path),
            RawCodec { delta },
        )
        .await
        .unwrap()
        .into_inner();
    (stream, tx)
}

async fn next(stream: &mut tonic::Streaming<Response>) -> Response {
    tokio::time::timeout(TEST_LIMIT, stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn every_client_receives_exactly_the_recorded_responses() {
    for delta in [false, true] {
        let pushes = pushes();
        let addr = start(delta, pushes.clone()).await;
        let chan = crate::channels(addr, 1).await.unwrap().remove(0);
        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            clients.push(open(chan.clone(), delta).await);
        }
        // the storm when a stream opens, then a change per trigger
        for (k, push) in pushes.iter().enumerate() {
            if k > 0 {
                trigger(chan.clone()).await.unwrap();
            }
            for (stream, _) in &mut clients {
                for (j, sent) in push.responses.iter().enumerate() {
                    let r = next(stream).await;
                    assert_eq!(r.len, sent.bytes, "delta {delta}, push {k}, response {j}");
                    assert_eq!(r.type_url, crate::recorder::TYPES[sent.type_index]);
                    assert_eq!(Push::parse_nonce(&r.nonce), Some((k, j)));
                }
            }
        }
    }
}

#[tokio::test]
async fn sinks_time_the_response_that_carried_each_change() {
    let pushes = pushes();
    let addr = start(false, pushes.clone()).await;
    let chan = crate::channels(addr, 1).await.unwrap().remove(0);
    let probe = Probe::new();
    let shared: Arc<[Push]> = pushes.clone().into();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..CLIENTS {
        tasks.spawn(sink(
            chan.clone(),
            i,
            false,
            Arc::clone(&shared),
            Arc::clone(&probe),
        ));
    }
    let wait = |count: fn(&Probe) -> (usize, std::time::Instant)| {
        let probe = Arc::clone(&probe);
        async move {
            tokio::time::timeout(TEST_LIMIT, async {
                while count(&probe).0 < CLIENTS {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .unwrap();
        }
    };
    wait(Probe::synced_count).await;
    assert_eq!(probe.synced_bytes(), pushes[0].response_bytes());
    for (k, push) in pushes.iter().enumerate().skip(1) {
        probe.arm(k as u64, Marker::FloorPush);
        trigger(chan.clone()).await.unwrap();
        wait(Probe::seen).await;
        assert_eq!(probe.marker_bytes(), push.responses[push.marker].bytes);
        // every response of the change reaches every client
        let want = push.responses.len() as u64 * CLIENTS as u64;
        tokio::time::timeout(TEST_LIMIT, async {
            while probe.responses().iter().sum::<u64>() < want {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        assert_eq!(probe.responses()[0], CLIENTS as u64, "one CDS each");
    }
    assert_eq!(probe.failed.load(Ordering::SeqCst), 0);
    assert_eq!(CDS, crate::recorder::TYPES[0]);
    tasks.abort_all();
}
