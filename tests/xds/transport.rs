//! The xDS transport's HTTP/2 limits and keepalive over real loopback sockets, in process:
//! streams beyond `max_concurrent_streams` are refused cleanly while the others go on (TRANS-5);
//! server pings drop a blackholed peer, and a client's own frequent pings are tolerated (TRANS-7).

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tonic::Streaming;
use tonic::transport::{Channel, Endpoint};
use tributary::config::{Config, ConnectionSettings};
use tributary::runtime::Running;

use crate::support;
use crate::support::raw_ads;
use crate::support::type_url::LDS;

const ADS_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
const WAIT: Duration = Duration::from_secs(10);
/// The node id every stream of these tests uses.
const NODE: &str = "transport-test";

async fn start(connections: ConnectionSettings) -> Running {
    let config = Config {
        connections,
        ..Config::default()
    };
    support::start_ready(config, WAIT).await
}

fn request(type_url: &str) -> DiscoveryRequest {
    DiscoveryRequest {
        node: Some(Node {
            id: NODE.into(),
            ..Default::default()
        }),
        type_url: type_url.into(),
        ..Default::default()
    }
}

/// An ADS stream on `ch` asking for every cluster, with its first response.
async fn ads(
    ch: Channel,
) -> (
    mpsc::Sender<DiscoveryRequest>,
    Streaming<DiscoveryResponse>,
    DiscoveryResponse,
) {
    raw_ads::open_first(ch, raw_ads::node(NODE), WAIT)
        .await
        .expect("an ADS stream and its first response in time")
}

/// Asks for listeners on an open stream and waits for the answer.
async fn answers_lds(
    tx: &mpsc::Sender<DiscoveryRequest>,
    stream: &mut Streaming<DiscoveryResponse>,
) {
    tx.send(request(LDS)).await.unwrap();
    let resp = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("answered in time")
        .unwrap()
        .expect("a response");
    assert_eq!(resp.type_url, LDS);
}

// --- TRANS-5 -----------------------------------------------------------------------------------

/// One HTTP/2 frame as read off the wire.
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const REFUSED_STREAM: u32 = 0x7;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = len.to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
    out
}

/// A gRPC request header block in HPACK, every field a literal without indexing (RFC 7541 §6.2.2),
/// so no encoder state is needed.
fn grpc_headers(authority: &str) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", ADS_PATH),
        (":authority", authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        block.push(0x00);
        for s in [name, value] {
            assert!(s.len() < 127, "one-byte HPACK length");
            block.push(s.len() as u8);
            block.extend(s.as_bytes());
        }
    }
    block
}

async fn read_frame(sock: &mut TcpStream) -> Frame {
    let mut head = [0u8; 9];
    tokio::time::timeout(WAIT, sock.read_exact(&mut head))
        .await
        .expect("a frame in time")
        .expect("the connection stays open");
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0; len];
    sock.read_exact(&mut payload).await.unwrap();
    Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
        payload,
    }
}

/// Opens a raw HTTP/2 connection: preface, empty SETTINGS, the server's SETTINGS acknowledged.
/// Returns the socket and the server's SETTINGS_MAX_CONCURRENT_STREAMS, if it sent one.
async fn handshake(addr: SocketAddr) -> (TcpStream, Option<u32>) {
    let mut sock = TcpStream::connect(addr).await.unwrap();
    sock.set_nodelay(true).unwrap();
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(SETTINGS, 0, 0, &[]));
    sock.write_all(&hello).await.unwrap();
    loop {
        let f = read_frame(&mut sock).await;
        if f.kind == SETTINGS && f.flags & ACK == 0 {
            let limit = f
                .payload
                .chunks(6)
                .find(|s| u16::from_be_bytes([s[0], s[1]]) == 0x3)
                .map(|s| u32::from_be_bytes([s[2], s[3], s[4], s[5]]));
            sock.write_all(&frame(SETTINGS, ACK, 0, &[])).await.unwrap();
            return (sock, limit);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_beyond_the_limit_are_refused_and_the_others_go_on() {
    // TRANS-5: a peer that ignores SETTINGS_MAX_CONCURRENT_STREAMS gets RST_STREAM(REFUSED_STREAM)
    // for the extra stream; the connection, its other streams and the server carry on.
    let running = start(ConnectionSettings {
        max_concurrent_streams: 4,
        ..ConnectionSettings::default()
    })
    .await;
    let addr = running.xds_addr;
    // Take the server's settings (which carry the limit) before opening streams, as a conforming
    // client would, then break the limit on purpose.
    let (mut sock, limit) = handshake(addr).await;
    assert_eq!(limit, Some(4), "the configured limit is advertised");
    let authority = addr.to_string();
    let ids = [1u32, 3, 5, 7, 9];
    for id in ids {
        sock.write_all(&frame(HEADERS, END_HEADERS, id, &grpc_headers(&authority)))
            .await
            .unwrap();
    }
    sock.write_all(&frame(PING, 0, 0, b"tributar"))
        .await
        .unwrap();

    let (mut answered, mut refused, mut pong) = (Vec::new(), Vec::new(), false);
    while !(pong && answered.len() + refused.len() == ids.len()) {
        let f = read_frame(&mut sock).await;
        match f.kind {
            HEADERS => answered.push(f.stream),
            RST_STREAM => {
                let code = u32::from_be_bytes(f.payload[..4].try_into().unwrap());
                refused.push((f.stream, code));
            }
            PING if f.flags & ACK != 0 => pong = true,
            GOAWAY => panic!("the connection was closed: {:?}", f.payload),
            _ => {}
        }
    }
    answered.sort_unstable();
    assert_eq!(
        answered,
        [1, 3, 5, 7],
        "the streams within the limit are served"
    );
    assert_eq!(
        refused,
        [(9, REFUSED_STREAM)],
        "the fifth is refused, cleanly"
    );

    // A well-behaved client on another connection is served as usual, and a client that queues
    // its fifth stream gets it once one of the four ends.
    let ch = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut open = Vec::new();
    for _ in 0..4 {
        open.push(ads(ch.clone()).await);
    }
    let fifth = tokio::spawn(ads(ch.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!fifth.is_finished(), "the fifth stream waits for a slot");
    let (tx, stream, _) = &mut open[0];
    answers_lds(tx, stream).await;
    open.pop();
    let (_tx, _stream, first) = tokio::time::timeout(WAIT, fifth).await.unwrap().unwrap();
    assert!(!first.resources.is_empty());
    drop(sock);
    running.stop().await;
}

// --- TRANS-9 -----------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aged_connections_get_goaway_at_ages_drawn_per_connection() {
    // TRANS-9: connections opened together are told to leave (GOAWAY, not a dropped socket) at
    // different times: each draws its own jitter. The connection still works during the grace.
    let (age, jitter) = (Duration::from_millis(100), Duration::from_secs(2));
    let running = start(ConnectionSettings {
        max_connection_age: Some(age),
        max_connection_age_jitter: jitter,
        max_connection_age_grace: Duration::from_secs(10),
        ..ConnectionSettings::default()
    })
    .await;
    let addr = running.xds_addr;
    let t0 = Instant::now();
    let mut waits = Vec::new();
    for _ in 0..8 {
        waits.push(tokio::spawn(async move {
            let (mut sock, _) = handshake(addr).await;
            let authority = addr.to_string();
            sock.write_all(&frame(HEADERS, END_HEADERS, 1, &grpc_headers(&authority)))
                .await
                .unwrap();
            loop {
                let f = read_frame(&mut sock).await;
                if f.kind == GOAWAY {
                    let at = t0.elapsed();
                    let last = u32::from_be_bytes(f.payload[..4].try_into().unwrap()) & 0x7fff_ffff;
                    assert!(last >= 1, "the open stream may finish: last stream {last}");
                    sock.write_all(&frame(PING, 0, 0, b"in grace"))
                        .await
                        .unwrap();
                    loop {
                        let f = read_frame(&mut sock).await;
                        if f.kind == PING && f.flags & ACK != 0 {
                            break;
                        }
                    }
                    return at;
                }
            }
        }));
    }
    let mut at = Vec::new();
    for w in waits {
        at.push(w.await.unwrap());
    }
    at.sort_unstable();
    println!("GOAWAY after {at:?}");
    assert!(at[0] >= age, "not before the age: {at:?}");
    assert!(
        at[7] - at[0] > Duration::from_millis(300),
        "eight connections opened together leave at different times: {at:?}"
    );
    running.stop().await;
}

// --- TRANS-7 -----------------------------------------------------------------------------------

/// A loopback TCP relay to `upstream` for one connection that can be made to drop every byte in
/// both directions while keeping both sockets open: a blackholed network path.
struct Relay {
    addr: SocketAddr,
    blackhole: Arc<AtomicBool>,
    /// Fires when the upstream side (the server) closes its socket.
    upstream_closed: oneshot::Receiver<()>,
}

impl Relay {
    async fn start(upstream: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let blackhole = Arc::new(AtomicBool::new(false));
        let (closed_tx, upstream_closed) = oneshot::channel();
        let hole = blackhole.clone();
        tokio::spawn(async move {
            let (client, _) = listener.accept().await.unwrap();
            let server = TcpStream::connect(upstream).await.unwrap();
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            let up_hole = hole.clone();
            tokio::spawn(async move {
                let mut buf = vec![0; 16 * 1024];
                while let Ok(n @ 1..) = cr.read(&mut buf).await {
                    if !up_hole.load(Ordering::SeqCst) && sw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                // Keep the upstream write half open: a blackhole never closes anything.
                std::future::pending::<()>().await;
            });
            let mut buf = vec![0; 16 * 1024];
            while let Ok(n @ 1..) = sr.read(&mut buf).await {
                if !hole.load(Ordering::SeqCst) {
                    let _ = cw.write_all(&buf[..n]).await;
                }
            }
            let _ = closed_tx.send(());
            // Keep the client's socket open too.
            std::future::pending::<()>().await;
        });
        Relay {
            addr,
            blackhole,
            upstream_closed,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_pings_drop_a_blackholed_peer() {
    // TRANS-7: the server's keepalive pings go unanswered once the path is blackholed; the server
    // closes the connection after interval + timeout instead of holding the stream forever.
    let (interval, timeout) = (Duration::from_millis(300), Duration::from_millis(300));
    let running = start(ConnectionSettings {
        keepalive_interval: interval,
        keepalive_timeout: timeout,
        ..ConnectionSettings::default()
    })
    .await;
    let relay = Relay::start(running.xds_addr).await;
    let ch = Endpoint::from_shared(format!("http://{}", relay.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let (_tx, _stream, first) = ads(ch).await;
    assert!(!first.resources.is_empty());
    // Pings while the path works keep the connection: it is still up several intervals later.
    tokio::time::sleep(interval * 4).await;
    let mut closed = relay.upstream_closed;
    assert!(closed.try_recv().is_err(), "a live peer is not dropped");

    relay.blackhole.store(true, Ordering::SeqCst);
    let t0 = Instant::now();
    tokio::time::timeout(WAIT, closed)
        .await
        .expect("the server closes the blackholed connection")
        .unwrap();
    let took = t0.elapsed();
    // No lower bound: a ping in flight when the path went dark times out sooner than a full
    // timeout after the cut.
    println!("blackholed peer dropped after {took:?} (timeout {timeout:?})");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frequent_client_pings_are_tolerated() {
    // TRANS-7: no GOAWAY(too_many_pings) for a client pinging often, even while idle (gRPC clients
    // configured with keepalive_time 10 s and Envoy's connection_keepalive do this): here every
    // 100 ms for 2 s, twenty pings in all, and the stream is still served afterwards.
    let running = start(ConnectionSettings::default()).await;
    let ch = Endpoint::from_shared(format!("http://{}", running.xds_addr))
        .unwrap()
        .http2_keep_alive_interval(Duration::from_millis(100))
        .keep_alive_timeout(Duration::from_secs(1))
        .keep_alive_while_idle(true)
        .connect()
        .await
        .unwrap();
    let (tx, mut stream, _) = ads(ch).await;
    let quiet = tokio::time::timeout(Duration::from_secs(2), stream.message()).await;
    assert!(
        quiet.is_err(),
        "nothing arrives while idle, not even an end: {quiet:?}"
    );
    answers_lds(&tx, &mut stream).await;
    running.stop().await;
}
