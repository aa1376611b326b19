//! The admin HTTP server (istiod's monitoring port, 15014): readiness, Prometheus metrics and the
//! `/debug/*` views.
//!
//! It only reads: the snapshot store, the aggregate's registry view and the xDS server's connection
//! status (through [`XdsStatus`], so this module does not depend on stream internals). The one
//! action it takes is `/debug/adsz?push=true`, which asks every stream to resend its state.

mod debug;
pub mod metrics;
mod xds_status;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::aggregate::RegistriesView;
use crate::config::Config;
use crate::snapshot::SnapshotStore;

/// What the xDS server tells the admin about its connections.
pub trait XdsStatus: Send + Sync + 'static {
    /// `/debug/syncz`: per connection and type, sent/acked nonces and SYNCED / STALE / NOT SENT /
    /// ERROR with the last NACK message.
    fn syncz(&self) -> Value;
    /// `/debug/adsz`: connections and their subscriptions, optionally only `proxy_id`'s.
    fn adsz(&self, proxy_id: Option<&str>) -> Value;
    /// Asks every stream to resend everything it is subscribed to; returns how many streams.
    fn push_all(&self) -> usize;
    /// `Some(bind)` with the listener address the proxy chose (`None`: default) if `proxy_id` is
    /// connected; `None` if it is not.
    fn listener_address(&self, proxy_id: &str) -> Option<Option<IpAddr>>;
}

/// Everything the admin server reads.
#[derive(Clone)]
pub struct AdminState {
    /// The published snapshots.
    pub store: SnapshotStore,
    /// Registry sync and health.
    pub registries: RegistriesView,
    /// Connected proxies.
    pub xds: Arc<dyn XdsStatus>,
    /// The effective configuration, for `/debug/configz`.
    pub config: Arc<Config>,
    /// Cancelled when shutdown starts: `/ready` turns 503 first (TRANS-8).
    pub draining: CancellationToken,
}

type Reply = Response<Full<Bytes>>;

/// Serves admin HTTP on `listener` until `shutdown` is cancelled.
pub async fn serve(listener: TcpListener, state: AdminState, shutdown: CancellationToken) {
    let mut connections = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    warn!(error = %e, "admin accept failed");
                    continue;
                }
            },
        };
        let state = state.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(route(&state, req)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                r = conn => if let Err(e) = r { debug!(%peer, error = %e, "admin connection ended") },
                _ = shutdown.cancelled() => {}
            }
        });
        while connections.try_join_next().is_some() {}
    }
    connections.shutdown().await;
}

fn route(state: &AdminState, req: Request<Incoming>) -> Reply {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served\n");
    }
    let query: HashMap<String, String> = req
        .uri()
        .query()
        .map(|q| {
            q.split('&')
                .filter(|p| !p.is_empty())
                .map(|p| match p.split_once('=') {
                    Some((k, v)) => (k.to_string(), v.to_string()),
                    None => (p.to_string(), String::new()),
                })
                .collect()
        })
        .unwrap_or_default();
    let pretty = query.contains_key("pretty");
    match req.uri().path() {
        "/ready" => ready(state),
        "/metrics" => Response::builder()
            .header(header::CONTENT_TYPE, "text/plain; version=0.0.4")
            .body(Full::new(Bytes::from(metrics::render())))
            .expect("static headers are valid"),
        "/debug" | "/debug/" => Response::builder()
            .header(header::CONTENT_TYPE, "text/html")
            .body(Full::new(Bytes::from(debug::index_html())))
            .expect("static headers are valid"),
        "/debug/list" => json_reply(
            &json!(debug::HANDLERS.iter().map(|(p, _)| p).collect::<Vec<_>>()),
            pretty,
        ),
        "/debug/registryz" => json_reply(&debug::registryz(state), pretty),
        "/debug/endpointz" | "/debug/endpointShardz" => {
            json_reply(&debug::endpointz(state), pretty)
        }
        "/debug/configz" => json_reply(&debug::configz(state), pretty),
        "/debug/push_status" => json_reply(&debug::push_status(state), pretty),
        "/debug/syncz" => json_reply(&state.xds.syncz(), pretty),
        "/debug/adsz" if query.get("push").is_some_and(|v| v == "true") => {
            let n = state.xds.push_all();
            text(StatusCode::OK, &format!("Pushed to {n} servers\n"))
        }
        "/debug/adsz" => json_reply(
            &state.xds.adsz(query.get("proxyID").map(String::as_str)),
            pretty,
        ),
        "/debug/config_dump" => match query.get("proxyID") {
            None => text(
                StatusCode::BAD_REQUEST,
                "You must provide a proxyID in the query string\n",
            ),
            Some(id) => match state.xds.listener_address(id) {
                None => text(
                    StatusCode::NOT_FOUND,
                    "Proxy not connected to this tributary instance. It may be connected to another instance.\n",
                ),
                Some(bind) => json_reply(&debug::config_dump(state, bind), pretty),
            },
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "not found; see /debug for the handlers\n",
        ),
    }
}

/// 200 once the first snapshot is published (every registry synced or timed out), else 503 naming
/// what is missing (TRANS-16, ecosystem.md §5.2).
fn ready(state: &AdminState) -> Reply {
    if state.draining.is_cancelled() {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: shutting down\n",
        );
    }
    if state.store.is_ready() {
        return text(StatusCode::OK, "ready\n");
    }
    let view = state.registries.load();
    let waiting: Vec<String> = view
        .registries
        .iter()
        .filter(|r| matches!(r.sync, crate::aggregate::SyncState::Pending))
        .map(|r| r.id.to_string())
        .collect();
    let reason = match waiting.is_empty() {
        true => "building the first snapshot".to_string(),
        false => format!("waiting for registries to sync: {}", waiting.join(", ")),
    };
    text(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("not ready: {reason}\n"),
    )
}

fn text(status: StatusCode, body: &str) -> Reply {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("static headers are valid")
}

fn json_reply(v: &Value, pretty: bool) -> Reply {
    let body = match pretty {
        true => serde_json::to_vec_pretty(v),
        false => serde_json::to_vec(v),
    }
    .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}").into_bytes());
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("static headers are valid")
}
