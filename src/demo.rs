//! Real backends for the embedded demo mesh, so `tributary` with no arguments is more than config:
//! curl through an Envoy pointed at it and a demo service answers.
//!
//! HTTP, HTTP2 and gRPC ports get a small HTTP server (HTTP/1.1 and h2c) that answers with the
//! service, version and address that served the request; TCP ports get a banner and echo. A port
//! already in use is reported and skipped: the control plane runs either way.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{info, warn};
use tributary_registries::Protocol;
use tributary_registries::mock::DemoEndpoint;

/// Starts a backend for every demo endpoint; they live as long as the returned set.
pub(crate) async fn start_backends(endpoints: Vec<DemoEndpoint>) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    let mut started = 0;
    for ep in endpoints {
        let addr = SocketAddr::new(ep.address, ep.port);
        let listener = match TcpListener::bind(addr).await {
            Ok(l) => l,
            Err(e) => {
                warn!(%addr, service = %ep.service, error = %e, "demo backend not started");
                continue;
            }
        };
        started += 1;
        let greeting = format!("hello from {} {} at {addr}\n", ep.service, ep.version);
        match ep.protocol {
            Protocol::Tcp => tasks.spawn(serve_tcp(listener, greeting)),
            _ => tasks.spawn(serve_http(listener, greeting)),
        };
    }
    info!(backends = started, "demo backends listening");
    tasks
}

async fn serve_http(listener: TcpListener, greeting: String) {
    let mut conns = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let greeting = greeting.clone();
        conns.spawn(async move {
            let service = service_fn(move |_req| {
                let body = Full::new(Bytes::from(greeting.clone()));
                async move { Ok::<_, Infallible>(Response::new(body)) }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        while conns.try_join_next().is_some() {}
    }
}

async fn serve_tcp(listener: TcpListener, greeting: String) {
    let mut conns = JoinSet::new();
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let greeting = greeting.clone();
        conns.spawn(async move {
            if stream.write_all(greeting.as_bytes()).await.is_err() {
                return;
            }
            let mut buf = [0u8; 4096];
            while let Ok(n) = stream.read(&mut buf).await {
                if n == 0 || stream.write_all(&buf[..n]).await.is_err() {
                    break;
                }
            }
        });
        while conns.try_join_next().is_some() {}
    }
}
