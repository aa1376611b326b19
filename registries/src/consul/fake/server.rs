//! The fake Consul's HTTP side: accept loop (which can stop listening), routing, blocking reads
//! and faults. The agent write API is in `agent`.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{Fault, Inner, LOG_CAPACITY, RecordedRequest, Route, Scripted};

/// Consul's default blocking wait when `?wait=` is absent.
const DEFAULT_WAIT: Duration = Duration::from_secs(300);
/// Consul's cap on `?wait=`.
const MAX_WAIT: Duration = Duration::from_secs(600);
/// Largest agent API body accepted.
const MAX_BODY: usize = 1 << 20;
/// Retries of re-binding the port after a [`Fault::Refuse`] ends (it may linger briefly).
const REBIND_ATTEMPTS: u32 = 50;

pub(super) type Reply = Response<Full<Bytes>>;

/// Serves until aborted, stopping and resuming listening as [`Inner::listening`] says.
pub(super) async fn serve(listener: TcpListener, inner: Arc<Inner>) {
    let Ok(addr) = listener.local_addr() else {
        return;
    };
    let mut listener = Some(listener);
    let mut listening = inner.listening.subscribe();
    loop {
        let l = match listener.take() {
            Some(l) => l,
            None => {
                if listening.wait_for(|on| *on).await.is_err() {
                    return;
                }
                match rebind(addr).await {
                    Some(l) => l,
                    None => return,
                }
            }
        };
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                accepted = l.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    let inner = Arc::clone(&inner);
                    connections.spawn(async move {
                        let service = service_fn(move |req| {
                            let inner = Arc::clone(&inner);
                            async move { Ok::<_, Infallible>(handle(inner, req).await) }
                        });
                        let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
                Some(_) = connections.join_next() => {}
                stopped = listening.wait_for(|on| !*on) => {
                    if stopped.is_err() {
                        return;
                    }
                    break;
                }
            }
        }
        // Refusing: the listener closes and every open connection is dropped.
        drop(l);
        connections.abort_all();
    }
}

async fn rebind(addr: std::net::SocketAddr) -> Option<TcpListener> {
    for _ in 0..REBIND_ATTEMPTS {
        if let Ok(l) = TcpListener::bind(addr).await {
            return Some(l);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

async fn handle(inner: Arc<Inner>, req: Request<Incoming>) -> Reply {
    let path = decode(req.uri().path());
    let query = parse_query(req.uri().query().unwrap_or(""));
    let token = req
        .headers()
        .get("X-Consul-Token")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let method = req.method().clone();
    let kind = match (&method, path.as_str()) {
        (&Method::GET, "/v1/catalog/services") => 0,
        (&Method::GET, p) if p.starts_with("/v1/health/service/") => 1,
        (&Method::PUT, _) => 2,
        _ => 3,
    };
    inner.counts[kind].fetch_add(1, Ordering::Relaxed);
    {
        let mut log = inner.log.lock();
        if log.len() < LOG_CAPACITY {
            log.push(RecordedRequest {
                method: method.to_string(),
                path: path.clone(),
                query: query.clone(),
                token: token.clone(),
            });
        }
    }
    match (kind, path.strip_prefix("/v1/health/service/")) {
        (0, _) => read(&inner, Route::Services, &query, token.as_deref()).await,
        (1, Some(name)) => {
            read(
                &inner,
                Route::Health(name.to_string()),
                &query,
                token.as_deref(),
            )
            .await
        }
        (2, _) => {
            let body = match collect_body(req.into_body()).await {
                Some(b) => b,
                None => {
                    return text(
                        StatusCode::BAD_REQUEST,
                        "request body too large or unreadable",
                    );
                }
            };
            super::agent::write(&inner, &path, &query, &body)
        }
        _ if method == Method::GET && path == "/v1/status/leader" => {
            let leader = match inner.control().fault {
                Some(Fault::NoLeader) => "\"\"",
                _ => "\"127.0.0.1:8300\"",
            };
            json_reply(StatusCode::OK, leader.to_string(), None)
        }
        _ => text(
            StatusCode::NOT_FOUND,
            &format!("Invalid URL path: not found: {path}"),
        ),
    }
}

/// A blocking read of `route`.
async fn read(
    inner: &Inner,
    route: Route,
    query: &BTreeMap<String, String>,
    token: Option<&str>,
) -> Reply {
    let mut version = inner.version.subscribe();
    let wanted: u64 = query.get("index").and_then(|i| i.parse().ok()).unwrap_or(0);
    let wait = query
        .get("wait")
        .and_then(|w| humantime::parse_duration(w).ok())
        .unwrap_or(DEFAULT_WAIT)
        .min(MAX_WAIT);
    // Consul adds up to wait/16 of random jitter to spread out herds of waiting clients.
    let deadline = Instant::now() + wait + (wait / 16).mul_f64(fastrand::f64());
    let stale = query.contains_key("stale");
    let pretty = query.contains_key("pretty");
    let render = |v: &Value| match pretty {
        true => serde_json::to_string_pretty(v).unwrap_or_default(),
        false => v.to_string(),
    };
    if let Some(reply) = refuse_request(inner, query, token) {
        return reply;
    }
    let scripted = inner
        .control()
        .scripts
        .get_mut(&route)
        .and_then(|q| q.pop_front());
    if let Some(s) = scripted {
        return scripted_reply(inner, &route, &s);
    }
    let _in_flight = (wanted > 0).then(|| InFlight::enter(inner));
    let mut timed_out = false;
    loop {
        version.borrow_and_update();
        let fault = inner.control().fault.clone();
        let (index, body) = {
            let c = inner.catalog();
            match &route {
                Route::Services => (c.list_index, c.services_json()),
                Route::Health(name) => (c.health_index(name), c.health_json(name)),
            }
        };
        let mut known_leader = true;
        let mut last_contact = Duration::ZERO;
        match fault {
            Some(Fault::Status(code)) => {
                let status =
                    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                return text(status, &format!("fake consul: injected {code}"));
            }
            Some(Fault::NoLeader) if !stale => {
                return text(StatusCode::INTERNAL_SERVER_ERROR, "No cluster leader");
            }
            Some(Fault::NoLeader) => known_leader = false,
            Some(Fault::LastContact(d)) => last_contact = d,
            Some(Fault::Hang | Fault::Refuse) => {
                // Hung: wait for the fault to change, however long.
                if version.changed().await.is_err() {
                    return text(StatusCode::SERVICE_UNAVAILABLE, "fake consul stopped");
                }
                continue;
            }
            None => {}
        }
        if timed_out || wanted == 0 || index != wanted {
            let meta = Meta {
                index,
                known_leader,
                last_contact,
                stale,
            };
            return json_reply(StatusCode::OK, render(&body), Some(meta));
        }
        tokio::select! {
            changed = version.changed() => {
                if changed.is_err() {
                    return text(StatusCode::SERVICE_UNAVAILABLE, "fake consul stopped");
                }
            }
            () = tokio::time::sleep_until(deadline) => timed_out = true,
        }
    }
}

/// Counts a blocking read in flight while it lives.
struct InFlight<'a>(&'a Inner);

impl<'a> InFlight<'a> {
    fn enter(inner: &'a Inner) -> Self {
        let now = inner.blocking[0].fetch_add(1, Ordering::Relaxed) + 1;
        inner.blocking[1].fetch_max(now, Ordering::Relaxed);
        InFlight(inner)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.blocking[0].fetch_sub(1, Ordering::Relaxed);
    }
}

/// ACL, partition and datacenter checks, as Consul makes them.
fn refuse_request(
    inner: &Inner,
    query: &BTreeMap<String, String>,
    token: Option<&str>,
) -> Option<Reply> {
    if let Some(required) = inner.control().token.clone()
        && token != Some(required.as_str())
    {
        return Some(text(StatusCode::FORBIDDEN, "ACL not found"));
    }
    if query.contains_key("partition") {
        return Some(text(
            StatusCode::BAD_REQUEST,
            "Partitions are a Consul Enterprise feature",
        ));
    }
    let dc = inner.catalog().datacenter.clone();
    if query.get("dc").is_some_and(|d| *d != dc) {
        return Some(text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "No path to datacenter",
        ));
    }
    None
}

fn scripted_reply(inner: &Inner, route: &Route, s: &Scripted) -> Reply {
    if let Some(code) = s.status {
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return text(status, &format!("fake consul: scripted {code}"));
    }
    let c = inner.catalog();
    let (index, body) = match route {
        Route::Services => (c.list_index, c.services_json()),
        Route::Health(name) => (c.health_index(name), c.health_json(name)),
    };
    let meta = Meta {
        index: s.index.unwrap_or(index),
        known_leader: s.known_leader.unwrap_or(true),
        last_contact: Duration::ZERO,
        stale: false,
    };
    json_reply(StatusCode::OK, body.to_string(), Some(meta))
}

/// The consistency headers of a read answer.
pub(super) struct Meta {
    index: u64,
    known_leader: bool,
    last_contact: Duration,
    stale: bool,
}

pub(super) fn json_reply(status: StatusCode, body: String, meta: Option<Meta>) -> Reply {
    let mut b = Response::builder()
        .status(status)
        .header("Content-Type", "application/json")
        .header("Vary", "Accept-Encoding");
    if let Some(m) = meta {
        b = b
            .header("X-Consul-Index", m.index.to_string())
            .header("X-Consul-KnownLeader", m.known_leader.to_string())
            .header(
                "X-Consul-LastContact",
                m.last_contact.as_millis().to_string(),
            )
            .header(
                "X-Consul-Effective-Consistency",
                if m.stale { "stale" } else { "leader" },
            );
    }
    b.body(Full::new(Bytes::from(body)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}

pub(super) fn text(status: StatusCode, body: &str) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Reads a request body of at most [`MAX_BODY`] bytes.
async fn collect_body(body: Incoming) -> Option<Bytes> {
    let collected = http_body_util::Limited::new(body, MAX_BODY)
        .collect()
        .await
        .ok()?;
    Some(collected.to_bytes())
}

/// `a=1&b&c=x%20y` → {a: 1, b: "", c: "x y"}, decoded as Go's `url.ParseQuery` does (`+` is a
/// space; invalid escapes are kept as they are).
fn parse_query(q: &str) -> BTreeMap<String, String> {
    serde_urlencoded::from_str(q).unwrap_or_default()
}

/// Percent-decoding of a path (`+` stays); invalid escapes are kept as they are.
fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_like_go() {
        let q = parse_query("index=12&wait=300000ms&stale&filter=Service.Tags+contains+%22a%22");
        assert_eq!(q["index"], "12");
        assert_eq!(q["stale"], "");
        assert_eq!(q["filter"], "Service.Tags contains \"a\"");
        assert_eq!(
            decode("/v1/health/service/a%20b%2Fc"),
            "/v1/health/service/a b/c"
        );
        assert_eq!(decode("100%"), "100%");
    }
}
