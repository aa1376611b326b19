//! The mTLS accept loop: TCP accept, handshake off the loop with a timeout, and a stream of finished
//! TLS connections for the xDS connection loop (`runtime/connections.rs`), each carrying tonic's
//! `Connected` info with the peer's identity.
//!
//! A failed or slow handshake (no client certificate, unknown CA, expired certificate) costs only
//! its own task and is never seen by the connection loop; the accept loop keeps accepting.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::identity::{PeerIdentity, spiffe_ids};
use super::reload::ServerTls;
use crate::runtime::accept::AcceptErrors;

/// Finished handshakes waiting for the connection loop to take them. It takes each at once; a
/// small buffer only smooths bursts, and when full, handshakes wait (back-pressure, not memory).
const ACCEPTED_CAPACITY: usize = 64;

/// What a request on a TLS connection knows about its peer (a request extension).
#[derive(Debug, Clone)]
pub struct XdsConnectInfo {
    /// Addresses of the TCP connection.
    pub tcp: TcpConnectInfo,
    /// The verified client certificate's identity.
    pub identity: Arc<PeerIdentity>,
}

/// One accepted, handshaken TLS connection.
pub struct TlsConn {
    io: TlsStream<TcpStream>,
    info: XdsConnectInfo,
}

impl Connected for TlsConn {
    type ConnectInfo = XdsConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.info.clone()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

crate::runtime::forward_io::forward_async_write!(impl for TlsConn);

/// Accepts on `listener` until `shutdown`, yielding connections whose handshake succeeded. Owns
/// its tasks: dropping the stream (or `shutdown`) stops the loop and every pending handshake.
pub fn incoming(
    listener: TcpListener,
    tls: ServerTls,
    shutdown: CancellationToken,
) -> impl Stream<Item = Result<TlsConn, io::Error>> + Send + 'static {
    let (tx, rx) = mpsc::channel(ACCEPTED_CAPACITY);
    let task = tokio::spawn(accept_loop(listener, tls, tx, shutdown));
    let guard = AbortOnDrop(task);
    ReceiverStream::new(rx).map(move |conn| {
        let _ = &guard;
        Ok(conn)
    })
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: ServerTls,
    tx: mpsc::Sender<TlsConn>,
    shutdown: CancellationToken,
) {
    let acceptor = TlsAcceptor::from(tls.server_config());
    let timeout = tls.config().handshake_timeout;
    let mut handshakes = JoinSet::new();
    let mut errors = AcceptErrors::new("xds_tls");
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tx.closed() => return,
            Some(_) = handshakes.join_next(), if !handshakes.is_empty() => {}
            accepted = listener.accept() => {
                let (tcp, remote) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // EMFILE and friends fail again at once: back off, log rarely.
                        let wait = errors.failed(&e, tokio::time::Instant::now());
                        tokio::select! {
                            () = shutdown.cancelled() => return,
                            () = tokio::time::sleep(wait) => continue,
                        }
                    }
                };
                errors.succeeded();
                // Pushes are small writes that must leave at once: no Nagle delay.
                let _ = tcp.set_nodelay(true);
                let info = TcpConnectInfo {
                    local_addr: tcp.local_addr().ok(),
                    remote_addr: Some(remote),
                };
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                handshakes.spawn(async move {
                    match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
                        Err(_) => tracing::info!(peer = %remote, "TLS handshake timed out"),
                        Ok(Err(e)) => tracing::info!(peer = %remote, error = %e, "TLS handshake refused"),
                        Ok(Ok(io)) => {
                            let spiffe = io
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|c| c.first())
                                .map(|leaf| spiffe_ids(leaf))
                                .unwrap_or_default();
                            let info = XdsConnectInfo {
                                tcp: info,
                                identity: Arc::new(PeerIdentity { spiffe }),
                            };
                            let _ = tx.send(TlsConn { io, info }).await;
                        }
                    }
                });
            }
        }
    }
}
