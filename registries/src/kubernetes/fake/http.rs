//! The fake API server's HTTP side: routing, list, get and watch on the wire.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use super::selector::Selector;
use super::store::{EventType, Logged, Notice};
use super::{ResourceType, Shared};

type Body = BoxBody<Bytes, Infallible>;

/// Watch lines buffered towards one client before the watch task waits for it.
const WATCH_BUFFER: usize = 64;

/// The default server-side watch timeout when `timeoutSeconds` is absent (the real default is
/// randomised in [30 min, 60 min); an hour is as good for tests).
const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(3600);

/// Accepts connections until `down` turns true, then cuts them all.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>, down: watch::Receiver<bool>) {
    let mut stop = down.clone();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|d| *d) => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let shared = shared.clone();
        let mut down = down.clone();
        tokio::spawn(async move {
            let watch_down = down.clone();
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                let down = watch_down.clone();
                async move { Ok::<_, Infallible>(handle(shared, req, down).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = down.wait_for(|d| *d) => {}
            }
        });
    }
}

fn full(status: StatusCode, body: Value) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// A `metav1.Status` failure object.
fn status_object(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    })
}

fn failure(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    full(code, status_object(code.as_u16(), reason, message))
}

/// The request's query parameters, percent- and `+`-decoded.
fn query(req: &Request<Incoming>) -> HashMap<String, String> {
    serde_urlencoded::from_str(req.uri().query().unwrap_or("")).unwrap_or_default()
}

/// What a request path names.
struct Target {
    rt: ResourceType,
    namespace: Option<String>,
    name: Option<String>,
}

fn route(shared: &Shared, path: &str) -> Option<Target> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (ns, plural, name) = match rest {
        ["namespaces", ns, plural] => (Some(*ns), *plural, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name)),
        [plural] => (None, *plural, None),
        [plural, name] => (None, *plural, Some(*name)),
        _ => return None,
    };
    let rt = shared
        .store
        .lock()
        .types
        .get(&format!("{group}/{version}/{plural}"))?
        .clone();
    Some(Target {
        rt,
        namespace: ns.map(str::to_string),
        name: name.map(str::to_string),
    })
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    down: watch::Receiver<bool>,
) -> Response<Body> {
    if req.method() != Method::GET {
        return failure(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the fake API server only serves GET; tests change objects through its Rust API",
        );
    }
    let path = req.uri().path().to_string();
    let Some(target) = route(&shared, &path) else {
        return failure(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("the server could not find the requested resource ({path})"),
        );
    };
    let q = query(&req);
    if let Some(name) = &target.name {
        return get(&shared, &target, name);
    }
    let labels = match Selector::parse(q.get("labelSelector").map(String::as_str)) {
        Ok(s) => s,
        Err(e) => return failure(StatusCode::BAD_REQUEST, "BadRequest", &e),
    };
    let fields = match Selector::parse(q.get("fieldSelector").map(String::as_str)) {
        Ok(s) => s,
        Err(e) => return failure(StatusCode::BAD_REQUEST, "BadRequest", &e),
    };
    let filter = Filter {
        namespace: target.namespace.clone(),
        labels,
        fields,
    };
    let watching = matches!(q.get("watch").map(String::as_str), Some("true" | "1"));
    if watching {
        watch(&shared, target.rt, filter, &q, down)
    } else {
        shared
            .counts
            .lock()
            .entry(target.rt.clone())
            .or_default()
            .lists += 1;
        list(&shared, &target.rt, filter, &q).await
    }
}

fn get(shared: &Shared, target: &Target, name: &str) -> Response<Body> {
    let ns = match target.rt.namespaced {
        true => target.namespace.clone().unwrap_or_default(),
        false => String::new(),
    };
    let store = shared.store.lock();
    let found = store
        .collections
        .get(&target.rt)
        .and_then(|c| c.objects.get(&(ns, name.to_string())));
    match found {
        Some(obj) => full(StatusCode::OK, (**obj).clone()),
        None => failure(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("{} {name:?} not found", target.rt.plural),
        ),
    }
}

/// Which objects a request selects.
struct Filter {
    namespace: Option<String>,
    labels: Selector,
    fields: Selector,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        let ns_ok = self.namespace.as_deref().is_none_or(|ns| {
            obj.pointer("/metadata/namespace").and_then(Value::as_str) == Some(ns)
        });
        ns_ok && self.labels.matches_object_labels(obj) && self.fields.matches_object_fields(obj)
    }
}

async fn list(
    shared: &Shared,
    rt: &ResourceType,
    filter: Filter,
    q: &HashMap<String, String>,
) -> Response<Body> {
    let settings = shared.settings.lock().clone();
    if !settings.list_delay.is_zero() {
        tokio::time::sleep(settings.list_delay).await;
    }
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let limit = match (limit, settings.max_page_size) {
        (Some(l), Some(m)) => Some(l.min(m)),
        (l, m) => l.or(m),
    };
    let mut store = shared.store.lock();
    let mut paging = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => match store.pages.remove(token) {
            Some(p) => p,
            None => {
                return failure(
                    StatusCode::GONE,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result.",
                );
            }
        },
        None => {
            let exact = q.get("resourceVersionMatch").map(String::as_str) == Some("Exact");
            let asked = q.get("resourceVersion").and_then(|v| v.parse::<u64>().ok());
            let compacted = store.collections.get(rt).map_or(0, |c| c.compacted);
            if let Some(rv) = asked
                && exact
                && rv != 0
                && rv < compacted
            {
                return failure(
                    StatusCode::GONE,
                    "Expired",
                    &format!("too old resource version: {rv} ({compacted})"),
                );
            }
            store.snapshot(rt, |o| filter.matches(o))
        }
    };
    let end = limit.map_or(paging.items.len(), |l| {
        (paging.offset + l).min(paging.items.len())
    });
    let items: Vec<Value> = paging.items[paging.offset..end]
        .iter()
        .map(|o| (**o).clone())
        .collect();
    let rv = paging.rv;
    let mut metadata = json!({ "resourceVersion": rv.to_string() });
    if end < paging.items.len() {
        let remaining = paging.items.len() - end;
        paging.offset = end;
        let token = store.park(paging);
        metadata["continue"] = json!(token);
        metadata["remainingItemCount"] = json!(remaining);
    }
    drop(store);
    full(
        StatusCode::OK,
        json!({
            "kind": format!("{}List", rt.kind),
            "apiVersion": rt.api_version(),
            "metadata": metadata,
            "items": items,
        }),
    )
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut text = json!({ "type": kind, "object": object }).to_string();
    text.push('\n');
    Bytes::from(text)
}

fn bookmark(rt: &ResourceType, rv: u64) -> Bytes {
    line(
        "BOOKMARK",
        &json!({
            "kind": rt.kind, "apiVersion": rt.api_version(),
            "metadata": { "resourceVersion": rv.to_string() },
        }),
    )
}

/// What one logged change looks like to a watch with `filter`: label-selector transitions turn
/// into ADDED / DELETED, as the API server's watch cache does.
fn view(filter: &Filter, e: &Logged) -> Option<Bytes> {
    let new_in = filter.matches(&e.new);
    let old_in = e.old.as_deref().is_some_and(|o| filter.matches(o));
    let kind = match (e.kind, old_in, new_in) {
        (EventType::Deleted, true, _) => EventType::Deleted,
        (EventType::Deleted, false, _) => return None,
        (EventType::Added, _, true) => EventType::Added,
        (EventType::Modified, true, true) => EventType::Modified,
        (EventType::Modified, false, true) => EventType::Added,
        (EventType::Modified, true, false) => EventType::Deleted,
        _ => return None,
    };
    Some(line(kind.wire(), &e.new))
}

fn watch(
    shared: &Arc<Shared>,
    rt: ResourceType,
    filter: Filter,
    q: &HashMap<String, String>,
    mut down: watch::Receiver<bool>,
) -> Response<Body> {
    let settings = shared.settings.lock().clone();
    let bookmarks = q.get("allowWatchBookmarks").map(String::as_str) == Some("true");
    let asked = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(DEFAULT_WATCH_TIMEOUT, Duration::from_secs);
    let timeout = settings
        .watch_timeout_cap
        .map_or(asked, |cap| cap.min(asked));
    let from = q.get("resourceVersion").cloned().unwrap_or_default();

    // Under the lock: the backlog to replay and the live subscription, so nothing falls between.
    // `expired`: the backlog is one ERROR event and the watch ends after it.
    let (backlog, expired, mut live): (Vec<Bytes>, bool, broadcast::Receiver<Arc<Notice>>) = {
        let store = shared.store.lock();
        // Counted under the store lock, which is also held while subscribing below: a test that
        // sees the count can rely on the watch receiving whatever it changes next.
        shared.counts.lock().entry(rt.clone()).or_default().watches += 1;
        let Some(c) = store.collections.get(&rt) else {
            return failure(StatusCode::NOT_FOUND, "NotFound", "unknown resource");
        };
        let (backlog, expired) = match from.as_str() {
            "" | "0" => (
                c.objects
                    .values()
                    .filter(|o| filter.matches(o))
                    .map(|o| line("ADDED", o))
                    .collect(),
                false,
            ),
            v => {
                let Ok(rv) = v.parse::<u64>() else {
                    return failure(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        &format!("invalid resource version {v:?}"),
                    );
                };
                if rv < c.compacted {
                    let msg = format!("too old resource version: {rv} ({})", c.compacted);
                    if settings.gone_as_http_status {
                        return failure(StatusCode::GONE, "Expired", &msg);
                    }
                    (
                        vec![line("ERROR", &status_object(410, "Expired", &msg))],
                        true,
                    )
                } else {
                    let events = c
                        .log
                        .iter()
                        .filter(|e| e.rv > rv)
                        .filter_map(|e| view(&filter, e))
                        .collect();
                    (events, false)
                }
            }
        };
        (backlog, expired, store.notices.subscribe())
    };

    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, Infallible>>(WATCH_BUFFER);
    let shared = shared.clone();
    shared.open_watches.fetch_add(1, Ordering::SeqCst);
    tokio::spawn(async move {
        let _open = OpenWatch(shared.clone());
        for b in backlog {
            if tx.send(Ok(Frame::data(b))).await.is_err() {
                return;
            }
        }
        if expired {
            return;
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            let notice = tokio::select! {
                n = live.recv() => n,
                _ = &mut deadline => return,
                _ = down.wait_for(|d| *d) => return,
            };
            let out = match notice {
                Ok(n) => match &*n {
                    Notice::Event { resource, event } if *resource == rt => view(&filter, event),
                    Notice::Bookmark { resource, rv } if *resource == rt && bookmarks => {
                        Some(bookmark(&rt, *rv))
                    }
                    Notice::Expire { resource, rv } if *resource == rt => {
                        let msg = format!("too old resource version: ({rv})");
                        let _ = tx
                            .send(Ok(Frame::data(line(
                                "ERROR",
                                &status_object(410, "Expired", &msg),
                            ))))
                            .await;
                        return;
                    }
                    Notice::End { resource } if *resource == rt => return,
                    _ => None,
                },
                // Fell behind: end the watch; the client resumes from its last version.
                Err(_) => return,
            };
            if let Some(b) = out
                && tx.send(Ok(Frame::data(b))).await.is_err()
            {
                return;
            }
        }
    });
    let mut resp = Response::new(BodyExt::boxed(StreamBody::new(ReceiverStream::new(rx))));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

/// Counts an open watch for as long as its task lives.
struct OpenWatch(Arc<Shared>);

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.open_watches.fetch_sub(1, Ordering::SeqCst);
    }
}
