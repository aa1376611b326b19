//! Keepalive over real loopback connections (TRANS-7): a peer busy receiving a large response keeps
//! its connection, an idle one that answers pings too, a silent one is closed.
#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::StreamBody;
use hyper::body::Frame;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::{Instant, Sleep};
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tonic::server::NamedService;
use tonic::service::Routes;

use super::{LastRead, silent_for};
use crate::config::ConnectionSettings;
use crate::runtime::connections;
use crate::runtime::forward_io::forward_async_write;

/// Keepalive of the server under test: far shorter than the time the response takes to read.
const INTERVAL: Duration = Duration::from_millis(100);
const TIMEOUT: Duration = Duration::from_millis(100);
/// The response: many times what the socket buffers hold, so the server's PING waits behind it.
const CHUNK: usize = 64 * 1024;
const CHUNKS: usize = 32;
/// Socket buffers of both ends (the kernel doubles them), fixed so the backlog ahead of a PING is
/// known: ~512 KiB, over a second's worth of reading at the slow client's pace.
const SOCKET_BUFFER: u32 = 128 * 1024;
/// The slow client reads this much, then pauses this long (~1–2 MB/s).
const SLOW_READ: usize = 4 * 1024;
const SLOW_PAUSE: Duration = Duration::from_millis(2);
/// How often the slow client sends a byte on its request (as a proxy acknowledges responses).
const ACK_EVERY: Duration = Duration::from_millis(20);
/// HTTP/2 windows of the clients: larger than the socket buffers, as Envoy's are.
const WINDOW: u32 = 4 * 1024 * 1024;
/// Bound of every test.
const LIMIT: Duration = Duration::from_secs(30);

/// Answers every request with [`CHUNKS`] × [`CHUNK`] bytes, never reading the request body (as a
/// stream busy pushing does not read its acknowledgements), which it keeps open.
#[derive(Clone)]
struct Flood;

impl NamedService for Flood {
    const NAME: &'static str = "test.Flood";
}

impl tower::Service<http::Request<tonic::body::Body>> for Flood {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        let chunks = futures::stream::iter(0..CHUNKS).map(move |_| {
            let _open = &req;
            Ok::<_, Infallible>(Frame::data(Bytes::from(vec![7u8; CHUNK])))
        });
        let body = tonic::body::Body::new(StreamBody::new(chunks));
        std::future::ready(Ok(http::Response::new(body)))
    }
}

/// Serves [`Flood`] with the test's keepalive until the token is dropped.
async fn server() -> (SocketAddr, tokio_util::sync::DropGuard) {
    let socket = TcpSocket::new_v4().unwrap();
    // Accepted connections inherit the listener's buffer sizes.
    socket.set_send_buffer_size(SOCKET_BUFFER).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(16).unwrap();
    let addr = listener.local_addr().unwrap();
    let settings = ConnectionSettings {
        keepalive_interval: INTERVAL,
        keepalive_timeout: TIMEOUT,
        max_connections_per_peer: 0,
        ..Default::default()
    };
    let stop = CancellationToken::new();
    tokio::spawn(connections::serve(
        "test",
        TcpListenerStream::new(listener),
        Routes::new(Flood),
        settings,
        stop.clone(),
    ));
    (addr, stop.drop_guard())
}

/// A transport that reads [`SLOW_READ`] bytes at a time with a pause after each: a proxy busy with
/// what it receives.
struct Slow {
    io: TcpStream,
    pause: Option<Pin<Box<Sleep>>>,
}

impl AsyncRead for Slow {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(pause) = self.pause.as_mut() {
            std::task::ready!(pause.as_mut().poll(cx));
            self.pause = None;
        }
        let mut tmp = [0u8; SLOW_READ];
        let want = SLOW_READ.min(buf.remaining());
        let mut small = ReadBuf::new(&mut tmp[..want]);
        std::task::ready!(Pin::new(&mut self.io).poll_read(cx, &mut small))?;
        buf.put_slice(small.filled());
        self.pause = Some(Box::pin(tokio::time::sleep(SLOW_PAUSE)));
        Poll::Ready(Ok(()))
    }
}

forward_async_write!(impl for Slow);

/// An HTTP/2 client over `io`; its connection is driven in the background.
async fn client<IO>(io: IO) -> h2::client::SendRequest<Bytes>
where
    IO: AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .handshake(io)
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

fn request(addr: SocketAddr) -> http::Request<()> {
    http::Request::post(format!("http://{addr}/test.Flood/Get"))
        .header("content-type", "application/grpc")
        .body(())
        .unwrap()
}

/// Reads the whole response to one request, sending a byte on the request every [`ACK_EVERY`];
/// returns the bytes received.
async fn fetch(
    mut send: h2::client::SendRequest<Bytes>,
    addr: SocketAddr,
) -> Result<usize, h2::Error> {
    send = send.ready().await?;
    let (response, mut acks) = send.send_request(request(addr), false)?;
    let mut body = response.await?.into_body();
    let mut ticks = tokio::time::interval(ACK_EVERY);
    let mut got = 0;
    loop {
        tokio::select! {
            data = body.data() => match data {
                Some(data) => {
                    let data = data?;
                    got += data.len();
                    body.flow_control().release_capacity(data.len())?;
                }
                None => return Ok(got),
            },
            _ = ticks.tick() => acks.send_data(Bytes::from_static(b"a"), false)?,
        }
    }
}

#[tokio::test]
async fn a_peer_busy_reading_a_large_response_keeps_its_connection() {
    // TRANS-7
    let (addr, _stop) = server().await;
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(SOCKET_BUFFER).unwrap();
    let io = socket.connect(addr).await.unwrap();
    let send = client(Slow { io, pause: None }).await;
    let started = Instant::now();
    let got = tokio::time::timeout(LIMIT, fetch(send, addr))
        .await
        .expect("bounded")
        .expect("the connection stays open while the peer sends frames");
    assert_eq!(got, CHUNK * CHUNKS);
    // Not a timing goal: the proof that the connection outlived many keepalive periods.
    assert!(
        started.elapsed() > (INTERVAL + TIMEOUT) * 3,
        "the response took {:?}: too fast to outlast the keepalive",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_idle_peer_that_answers_pings_keeps_its_connection() {
    // TRANS-7
    let (addr, _stop) = server().await;
    let send = client(TcpStream::connect(addr).await.unwrap()).await;
    // Many keepalive periods with nothing but the pings' answers.
    tokio::time::sleep((INTERVAL + TIMEOUT) * 5).await;
    let got = tokio::time::timeout(LIMIT, fetch(send, addr))
        .await
        .expect("bounded")
        .expect("the idle connection is still open");
    assert_eq!(got, CHUNK * CHUNKS);
}

#[tokio::test]
async fn a_silent_peer_is_closed_after_the_interval_and_timeout() {
    // TRANS-7
    let (addr, _stop) = server().await;
    let mut peer = TcpStream::connect(addr).await.unwrap();
    // The connection preface and an empty SETTINGS frame, then nothing: pings go unanswered.
    peer.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    let started = Instant::now();
    let closed = tokio::time::timeout(LIMIT, async {
        let mut buf = [0u8; 1024];
        loop {
            match peer.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "a silent peer must be closed");
    assert!(
        started.elapsed() >= INTERVAL + TIMEOUT,
        "closed after {:?}, before its silence reached the interval and timeout",
        started.elapsed()
    );
}

#[tokio::test]
async fn last_read_moves_forward_only() {
    // TRANS-7
    let last = LastRead::new();
    let first = last.at();
    tokio::time::sleep(Duration::from_millis(20)).await;
    last.touch();
    assert!(last.at() > first);
    let silent = tokio::time::timeout(Duration::from_millis(50), silent_for(&last, LIMIT)).await;
    assert!(silent.is_err(), "not silent right after a read");
}
