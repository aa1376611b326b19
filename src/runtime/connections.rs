//! The HTTP/2 connection loop of both xDS ports, in place of `tonic::transport::Server`'s.
//!
//! tonic gives every connection the same maximum age, so proxies that connected together (the
//! storm after a restart or a scale-out) are all recycled together again, and when a grace period
//! is set it closes an aged connection at age + grace without ever sending GOAWAY. Here each
//! connection draws its own age (TRANS-9), is sent GOAWAY when that age is up, and is closed only
//! if its streams outlive the grace period. Shutdown sends GOAWAY to every connection and waits
//! for them (TRANS-8). The HTTP/2 limits and keepalive are the same settings tonic would apply
//! (TRANS-5, SEC-11), but keepalive judges a peer by anything it sends (TRANS-7, `liveness.rs`):
//! hyper pings, and the connection is closed after `keepalive_interval` + `keepalive_timeout` of
//! silence, not when one PING's answer is late behind a large push. HTTP/1.1 is served too
//! (detected per connection), for REST-JSON xDS polls (`crate::xds::RestService`); gRPC needs
//! HTTP/2 and refuses anything else itself.
//!
//! Untrusted peers are bounded too (docs/hardening.md, "Accepting connections"): a failing accept
//! backs off and is logged rarely (`accept.rs`), each peer IP may hold at most
//! `max_connections_per_peer` connections, and a connection that has not sent its first HTTP/2
//! frames within `first_frames_timeout` is closed (`first_frames.rs`).

use std::io;
use std::net::IpAddr;
use std::pin::pin;
use std::time::Duration;

use futures::{Stream, StreamExt};
use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tonic::transport::server::Connected;
use tower::ServiceExt;
use tracing::debug;

use super::accept::{AcceptErrors, PeerCounts, PeerSlot};
use super::coalesce::Coalesced;
use super::first_frames::Watched;
use super::liveness;
use crate::config::ConnectionSettings;
use crate::tls::TlsConn;

/// The IP address a connection comes from, for the per-peer limit.
pub(super) trait PeerIp {
    /// The peer's IP, when the transport knows it.
    fn peer_ip(&self) -> Option<IpAddr>;
}

impl PeerIp for TcpStream {
    fn peer_ip(&self) -> Option<IpAddr> {
        self.peer_addr().ok().map(|a| a.ip())
    }
}

impl PeerIp for TlsConn {
    fn peer_ip(&self) -> Option<IpAddr> {
        self.connect_info().tcp.remote_addr().map(|a| a.ip())
    }
}

/// Serves `routes` on every connection `incoming` yields until `stop` is cancelled, then sends
/// GOAWAY to every connection and returns once they have all closed. `what` names the listener in
/// logs.
pub(super) async fn serve<I, IO>(
    what: &'static str,
    incoming: I,
    routes: Routes,
    settings: ConnectionSettings,
    stop: CancellationToken,
) where
    I: Stream<Item = io::Result<IO>>,
    IO: AsyncRead + AsyncWrite + Connected + PeerIp + Unpin + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new());
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(settings.keepalive())
        .keep_alive_timeout(liveness::PONG_WAIT)
        .max_concurrent_streams(settings.max_concurrent_streams)
        .max_header_list_size(settings.max_header_list_size);
    let mut connections = JoinSet::new();
    let mut errors = AcceptErrors::new(what);
    let peers = PeerCounts::default();
    {
        // Dropped when accepting stops, which closes the listening socket at once.
        let mut incoming = pin!(incoming);
        loop {
            let io = tokio::select! {
                () = stop.cancelled() => break,
                io = incoming.next() => match io {
                    Some(Ok(io)) => {
                        errors.succeeded();
                        io
                    }
                    Some(Err(e)) => {
                        // Retrying at once would fail at once (EMFILE): wait, still stoppable.
                        let wait = errors.failed(&e, Instant::now());
                        tokio::select! {
                            () = stop.cancelled() => break,
                            () = tokio::time::sleep(wait) => continue,
                        }
                    }
                    None => break,
                },
            };
            let slot = match io.peer_ip() {
                None => None,
                Some(ip) => match peers.admit(ip, settings.max_connections_per_peer) {
                    Some(slot) => Some(slot),
                    None => {
                        debug!(listener = what, peer = %ip, limit = settings.max_connections_per_peer, "connection refused: too many from this peer");
                        continue;
                    }
                },
            };
            let age = settings.connection_age();
            let grace = settings.max_connection_age_grace;
            connections.spawn(serve_connection(
                builder.clone(),
                io,
                routes.clone(),
                Limits {
                    age,
                    grace,
                    first_frames: settings.first_frames_timeout,
                    silence: settings.keepalive().map(|i| i + settings.keepalive_timeout),
                    _slot: slot,
                },
                stop.clone(),
            ));
            while connections.try_join_next().is_some() {}
        }
    }
    while connections.join_next().await.is_some() {}
}

/// The time limits of one connection, and its place in the per-peer count.
struct Limits {
    /// When it gets GOAWAY (TRANS-9); never when `None`.
    age: Option<Duration>,
    /// How long its streams may outlive GOAWAY.
    grace: Duration,
    /// How long the peer has to send its first HTTP/2 frames.
    first_frames: Duration,
    /// How long the peer may send nothing at all before the connection is closed (TRANS-7);
    /// never when `None`.
    silence: Option<Duration>,
    /// Held while the connection lives.
    _slot: Option<PeerSlot>,
}

/// One connection: served until the peer leaves, it stays silent past `first_frames` (closed),
/// nothing is read from it for `silence` (closed: keepalive), its age is up (GOAWAY, then at most
/// `grace` more), or the server stops (GOAWAY, then until its streams end; the drain ended them).
async fn serve_connection<IO>(
    builder: auto::Builder<TokioExecutor>,
    io: IO,
    routes: Routes,
    limits: Limits,
    stop: CancellationToken,
) where
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
{
    let Limits {
        age,
        grace,
        first_frames,
        silence,
        _slot,
    } = limits;
    // What the services know of their peer (addresses, the TLS identity), as tonic provides it.
    let info = io.connect_info();
    let (io, greeted, last_read) = Watched::new(io);
    let service = routes.map_request(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(info.clone());
        req.map(tonic::body::Body::new)
    });
    let mut conn = pin!(builder.serve_connection(
        TokioIo::new(Coalesced::new(io)),
        TowerToHyperService::new(service),
    ));
    let aged = async {
        match age {
            Some(age) => tokio::time::sleep(age).await,
            None => std::future::pending().await,
        }
    };
    let silent = async {
        if tokio::time::timeout(first_frames, greeted.wait())
            .await
            .is_ok()
        {
            std::future::pending::<()>().await;
        }
    };
    let dead = async {
        match silence {
            Some(silence) => liveness::silent_for(&last_read, silence).await,
            None => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        // The connection first: it reads what the peer sent before its silence is judged.
        biased;
        r = conn.as_mut() => r,
        () = silent => {
            debug!(timeout = ?first_frames, "no HTTP/2 preface in time; closing the connection");
            Ok(())
        }
        () = dead => {
            debug!(silence = ?silence, "keepalive: nothing read from the peer; closing the connection");
            Ok(())
        }
        () = aged => {
            debug!("connection reached its maximum age; GOAWAY");
            conn.as_mut().graceful_shutdown();
            match tokio::time::timeout(grace, conn.as_mut()).await {
                Ok(r) => r,
                Err(_) => {
                    debug!("streams outlived the connection age grace period; closing");
                    Ok(())
                }
            }
        }
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.as_mut().await
        }
    };
    if let Err(e) = result {
        debug!(error = %e, "xDS connection ended with an error");
    }
}
