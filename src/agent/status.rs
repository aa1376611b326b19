//! The agent's status server (pilot-agent's 15021): `/healthz/ready` and `/stats/prometheus`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::{debug, warn};

use super::envoy::Admin;
use super::metrics::AgentMetrics;

type Reply = Response<Full<Bytes>>;

/// What the status server reads.
#[derive(Debug, Clone)]
pub(super) struct StatusState {
    /// Envoy's admin API.
    pub admin: Admin,
    /// The agent's metrics.
    pub metrics: Arc<AgentMetrics>,
    /// Set once shutdown began: readiness fails from then on.
    pub draining: Arc<AtomicBool>,
}

/// Serves until the task is dropped (the agent owns it).
pub(super) async fn serve(listener: TcpListener, state: StatusState) {
    let mut connections = JoinSet::new();
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                warn!(error = %e, "status accept failed");
                continue;
            }
        };
        let state = state.clone();
        connections.spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(route(&state, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                debug!(%peer, error = %e, "status connection ended");
            }
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn route(state: &StatusState, req: Request<Incoming>) -> Reply {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served\n");
    }
    match req.uri().path() {
        "/healthz/ready" => ready(state).await,
        "/stats/prometheus" => prometheus(state).await,
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: /healthz/ready, /stats/prometheus\n",
        ),
    }
}

async fn ready(state: &StatusState) -> Reply {
    if state.draining.load(Ordering::Relaxed) {
        return text(StatusCode::SERVICE_UNAVAILABLE, "not ready: draining\n");
    }
    match state.admin.ready().await {
        Ok(()) => text(StatusCode::OK, "ready\n"),
        Err(reason) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("not ready: {reason}\n"),
        ),
    }
}

/// Envoy's Prometheus stats (when it answers) followed by the agent's.
async fn prometheus(state: &StatusState) -> Reply {
    let mut body = match state.admin.get("/stats/prometheus").await {
        Ok((200, b)) => b,
        Ok((s, _)) => format!("# Envoy's admin answered {s}\n"),
        Err(e) => format!("# {e}\n"),
    };
    let times = state
        .admin
        .stats(r"^(cluster_manager\.cds|listener_manager\.lds)\.update_time$")
        .await
        .unwrap_or_default();
    body.push_str(&state.metrics.render(&times));
    Response::builder()
        .header(header::CONTENT_TYPE, "text/plain; version=0.0.4")
        .body(Full::new(Bytes::from(body)))
        .expect("static headers are valid")
}

fn text(status: StatusCode, body: &str) -> Reply {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("static headers are valid")
}
