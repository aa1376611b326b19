//! The admin's routes: istiod's paths, query parameters and reply texts, on an axum [`Router`].
//! Query strings are percent-decoded by axum's `Query` extractor (`%7E` is `~`).

use std::collections::HashMap;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use serde_json::{Value, json};

use super::config_dump::{self, DumpRequest};
use super::{AdminState, auth, debug, metrics};

/// Query parameters, percent-decoded.
type Params = Query<HashMap<String, String>>;

/// The admin's routes over `state`.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/ready", read(ready))
        .route("/metrics", read(metrics_text))
        .route("/debug", read(index))
        .route("/debug/", read(index))
        .route("/debug/list", read(list))
        .route("/debug/registryz", read(registryz))
        .route("/debug/endpointz", read(endpointz))
        .route("/debug/endpointShardz", read(endpointz))
        .route("/debug/configz", read(configz))
        .route("/debug/push_status", read(push_status))
        .route("/debug/syncz", read(syncz))
        .route("/debug/adsz", read(adsz))
        .route("/debug/config_dump", read(config_dump_handler))
        .fallback(not_found)
        .with_state(state)
}

/// A GET (and HEAD) route; other methods get istiod-style text instead of an empty 405.
fn read<H, T>(handler: H) -> MethodRouter<AdminState>
where
    H: axum::handler::Handler<T, AdminState>,
    T: 'static,
{
    get(handler).fallback(method_not_allowed)
}

async fn method_not_allowed() -> Response {
    text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served\n")
}

async fn not_found() -> Response {
    text(
        StatusCode::NOT_FOUND,
        "not found; see /debug for the handlers\n",
    )
}

/// 200 once the first snapshot is published (every registry synced or timed out), else 503 naming
/// what is missing (TRANS-16).
async fn ready(State(state): State<AdminState>) -> Response {
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

async fn metrics_text() -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics::render(),
    )
        .into_response()
}

async fn index() -> Response {
    ([(header::CONTENT_TYPE, "text/html")], debug::index_html()).into_response()
}

async fn list(q: Params) -> Response {
    let paths: Vec<&str> = debug::HANDLERS.iter().map(|(p, _)| *p).collect();
    json_reply(&json!(paths), &q)
}

async fn registryz(State(state): State<AdminState>, q: Params) -> Response {
    json_reply(&debug::registryz(&state), &q)
}

async fn endpointz(State(state): State<AdminState>, q: Params) -> Response {
    json_reply(&debug::endpointz(&state), &q)
}

async fn configz(State(state): State<AdminState>, q: Params) -> Response {
    json_reply(&debug::configz(&state), &q)
}

async fn push_status(State(state): State<AdminState>, q: Params) -> Response {
    json_reply(&debug::push_status(&state), &q)
}

async fn syncz(State(state): State<AdminState>, q: Params) -> Response {
    json_reply(&state.xds.syncz(), &q)
}

/// `/debug/adsz`: connections; `?push=true` pushes to every proxy (when allowed).
async fn adsz(State(state): State<AdminState>, headers: HeaderMap, q: Params) -> Response {
    if q.get("push").is_some_and(|v| v == "true") {
        if let Err(refused) = auth::authorize_mutation(&state.config.admin, &headers) {
            tracing::warn!(error = %refused, "refused /debug/adsz?push=true");
            return text(refused.status(), &format!("{refused}\n"));
        }
        let n = state.xds.push_all();
        return text(StatusCode::OK, &format!("Pushed to {n} servers\n"));
    }
    let proxy = q.get("proxyID").map(String::as_str);
    json_reply(&state.xds.adsz(proxy), &q)
}

/// `/debug/config_dump?proxyID=<id>[&types=cds,eds,...][&include_eds]`: an
/// `envoy.admin.v3.ConfigDump` of what this proxy is sent, in proto3 JSON.
async fn config_dump_handler(State(state): State<AdminState>, q: Params) -> Response {
    let Some(id) = q.get("proxyID") else {
        return text(
            StatusCode::BAD_REQUEST,
            "You must provide a proxyID in the query string\n",
        );
    };
    let request = match DumpRequest::from_query(&q) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, &format!("{e}\n")),
    };
    let Some(proxy) = state.xds.proxy(id) else {
        return text(
            StatusCode::NOT_FOUND,
            "Proxy not connected to this tributary instance. It may be connected to another instance.\n",
        );
    };
    let Some(snapshot) = state.store.load() else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "no snapshot yet: registries have not synced\n",
        );
    };
    match config_dump::render(&snapshot, &proxy, &request) {
        Ok(body) => (
            [(header::CONTENT_TYPE, "application/json")],
            pretty_json(body, &q),
        )
            .into_response(),
        Err(e) => {
            crate::xds::metrics::internal_error("config_dump");
            tracing::error!(error = %e, proxy = %id, "cannot render a config dump");
            text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e}\n"))
        }
    }
}

/// Re-indents `body` when `?pretty` is given.
fn pretty_json(body: String, q: &HashMap<String, String>) -> String {
    if !q.contains_key("pretty") {
        return body;
    }
    serde_json::from_str::<Value>(&body)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or(body)
}

fn text(status: StatusCode, body: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body.to_string(),
    )
        .into_response()
}

fn json_reply(v: &Value, q: &HashMap<String, String>) -> Response {
    let body = match q.contains_key("pretty") {
        true => serde_json::to_string_pretty(v),
        false => serde_json::to_string(v),
    }
    .unwrap_or_else(|e| json!({ "error": e.to_string() }).to_string());
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}
