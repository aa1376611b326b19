//! One ADS stream to the config server, state-of-the-world or delta, and the source's health.
//!
//! A stream subscribes to every collection, then for each response: decodes it (`decode`), hands
//! the objects to the worker, and ACKs — or NACKs it with `error_detail` and hands nothing. It
//! ends when the server or the connection does, saying whether any response came (a stream that
//! worked resets the reconnect backoff).

use std::collections::{BTreeMap, BTreeSet};
use std::error::Error;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::rpc::Status;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::Channel;
use tracing::{debug, warn};

use super::Settings;
use super::decode::{ResponseError, decode, decode_all, kind_of, split_name};
use crate::istio_api::{COLLECTIONS, Collection};
use crate::serviceentry::cluster::{ClusterEvent, Scope};

/// Requests waiting to go out: the four subscriptions, then one ACK or NACK per response, which
/// the server reads before it sends the next response of that type.
const REQUEST_CAPACITY: usize = 16;

/// The largest response accepted. tonic's default (4 MiB) is below what a large mesh's
/// ServiceEntry collection reaches in one SotW response; 64 MiB still bounds a broken server.
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// `google.rpc.Code.INVALID_ARGUMENT`, the code of a NACK's `error_detail`.
const NACK_CODE: i32 = 3;

/// How a stream ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The worker is gone: stop.
    WorkerGone,
    /// The server does not serve delta ADS.
    DeltaUnimplemented,
    /// The stream failed; `responded` when at least one response came first.
    Failed { reason: String, responded: bool },
}

/// The source's health as the worker sees it: the connection's problem and the collections whose
/// last response was refused. Sent only when it changes.
pub(crate) struct Health {
    tx: mpsc::Sender<ClusterEvent>,
    connection: Option<String>,
    refused: BTreeMap<String, String>,
    reported: Option<String>,
}

impl Health {
    pub(crate) fn new(tx: mpsc::Sender<ClusterEvent>) -> Self {
        Self {
            tx,
            connection: None,
            refused: BTreeMap::new(),
            reported: None,
        }
    }

    /// The connection's problem (`None`: a response came).
    pub(crate) async fn connection(&mut self, problem: Option<String>) -> Result<(), Ended> {
        self.connection = problem;
        self.send().await
    }

    /// Why the last response of `type_url` was refused (`None`: it was applied).
    async fn refused(&mut self, type_url: &str, why: Option<String>) -> Result<(), Ended> {
        match why {
            Some(why) => self.refused.insert(type_url.to_string(), why),
            None => self.refused.remove(type_url),
        };
        self.send().await
    }

    async fn send(&mut self) -> Result<(), Ended> {
        let refused = self
            .refused
            .values()
            .map(|why| format!("response refused (NACK): {why}"));
        let now: Vec<String> = self.connection.iter().cloned().chain(refused).collect();
        let now = (!now.is_empty()).then(|| now.join("; "));
        if now == self.reported {
            return Ok(());
        }
        self.reported = now.clone();
        self.tx
            .send(ClusterEvent::Health(now))
            .await
            .map_err(|_| Ended::WorkerGone)
    }
}

fn failed(reason: impl Into<String>, responded: bool) -> Ended {
    Ended::Failed {
        reason: reason.into(),
        responded,
    }
}

/// An error with its sources (tonic's transport errors say little at the top).
fn chain(e: &dyn Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

fn status_failed(status: &tonic::Status, responded: bool) -> Ended {
    failed(
        format!("stream failed: {:?}: {}", status.code(), status.message()),
        responded,
    )
}

/// What a stream reports to: the worker's channel and the source's health.
pub(crate) struct Link<'a> {
    pub(crate) settings: &'a Settings,
    pub(crate) tx: &'a mpsc::Sender<ClusterEvent>,
    pub(crate) health: &'a mut Health,
}

/// An ADS client of the config server.
pub(crate) type Client = AggregatedDiscoveryServiceClient<Channel>;

/// Connects to the server (TCP, TLS, HTTP/2).
pub(crate) async fn connect(settings: &Settings) -> Result<Client, Ended> {
    let channel = settings
        .endpoint
        .connect()
        .await
        .map_err(|e| failed(format!("cannot connect: {}", chain(&e)), false))?;
    Ok(
        AggregatedDiscoveryServiceClient::new(channel)
            .max_decoding_message_size(MAX_RESPONSE_BYTES),
    )
}

fn scope(collection: &Collection) -> Scope {
    Scope {
        kind: Some(kind_of(collection)),
        namespace: None,
    }
}

fn nack_detail(e: &ResponseError) -> Option<Status> {
    Some(Status {
        code: NACK_CODE,
        message: e.to_string(),
        details: Vec::new(),
    })
}

fn collection(type_url: &str) -> Result<&'static Collection, ResponseError> {
    Collection::for_type_url(type_url).ok_or_else(|| ResponseError::UnknownType(type_url.into()))
}

/// Hands `event` to the worker, records the outcome in the health, queues the ACK or NACK.
async fn answer<R>(
    tx: &mpsc::Sender<ClusterEvent>,
    health: &mut Health,
    requests: &mpsc::Sender<R>,
    type_url: &str,
    outcome: Result<Vec<ClusterEvent>, ResponseError>,
    request: R,
) -> Result<(), Ended> {
    let why = outcome.as_ref().err().map(ToString::to_string);
    if let Some(why) = &why {
        warn!(collection = type_url, error = %why, "config server response refused (NACK)");
    }
    health.refused(type_url, why).await?;
    for event in outcome.unwrap_or_default() {
        tx.send(event).await.map_err(|_| Ended::WorkerGone)?;
    }
    requests
        .send(request)
        .await
        .map_err(|_| failed("the request stream closed", true))
}

/// The request channel with the four subscriptions queued, as `subscribe` builds them.
fn subscribed<R>(subscribe: impl Fn(&Collection) -> R) -> (mpsc::Sender<R>, ReceiverStream<R>) {
    let (requests, rx) = mpsc::channel(REQUEST_CAPACITY);
    for c in &COLLECTIONS {
        requests
            .try_send(subscribe(c))
            .expect("REQUEST_CAPACITY holds the four subscriptions of a new channel");
    }
    (requests, ReceiverStream::new(rx))
}

/// The next response; the first of a stream marks the connection healthy.
async fn next<T>(
    stream: &mut tonic::Streaming<T>,
    responded: &mut bool,
    health: &mut Health,
    on_error: impl Fn(&tonic::Status, bool) -> Ended,
) -> Result<T, Ended> {
    let r = match stream.message().await {
        Ok(Some(r)) => r,
        Ok(None) => return Err(failed("the server ended the stream", *responded)),
        Err(status) => return Err(on_error(&status, *responded)),
    };
    if !*responded {
        *responded = true;
        health.connection(None).await?;
    }
    Ok(r)
}

/// A state-of-the-world stream: every response is the whole collection.
pub(crate) async fn sotw(mut client: Client, link: Link<'_>) -> Ended {
    let Link {
        settings,
        tx,
        health,
    } = link;
    let node = Some(settings.node());
    let (requests, rx) = subscribed(|c| DiscoveryRequest {
        node: node.clone(),
        type_url: c.type_url.into(),
        ..DiscoveryRequest::default()
    });
    let opened = client.stream_aggregated_resources(rx).await;
    let mut stream = match opened {
        Ok(r) => r.into_inner(),
        Err(status) => return status_failed(&status, false),
    };
    // The version last ACKed per type, which a NACK repeats.
    let mut acked: BTreeMap<String, String> = BTreeMap::new();
    let mut responded = false;
    loop {
        let r: DiscoveryResponse =
            match next(&mut stream, &mut responded, health, status_failed).await {
                Ok(r) => r,
                Err(e) => return e,
            };
        debug!(collection = %r.type_url, version = %r.version_info, resources = r.resources.len(),
            "config server response");
        let outcome = collection(&r.type_url).and_then(|c| {
            let objects = decode_all(c, &r.resources, &settings.default_namespace)?;
            Ok(vec![ClusterEvent::Listed(scope(c), objects)])
        });
        let mut request = DiscoveryRequest {
            node: node.clone(),
            type_url: r.type_url.clone(),
            response_nonce: r.nonce.clone(),
            ..DiscoveryRequest::default()
        };
        match &outcome {
            Ok(_) => {
                acked.insert(r.type_url.clone(), r.version_info.clone());
                request.version_info = r.version_info.clone();
            }
            Err(e) => {
                request.version_info = acked.get(&r.type_url).cloned().unwrap_or_default();
                request.error_detail = nack_detail(e);
            }
        }
        if let Err(e) = answer(tx, health, &requests, &r.type_url, outcome, request).await {
            return e;
        }
    }
}

/// A delta stream: the first response of each collection is its whole contents, later ones
/// changes.
pub(crate) async fn delta(mut client: Client, link: Link<'_>) -> Ended {
    let Link {
        settings,
        tx,
        health,
    } = link;
    // No names: a wildcard subscription; no initial versions: send everything.
    let (requests, rx) = subscribed(|c| DeltaDiscoveryRequest {
        type_url: c.type_url.into(),
        node: Some(settings.node()),
        ..DeltaDiscoveryRequest::default()
    });
    let node = Some(settings.node());
    let unimplemented = |status: &tonic::Status, responded: bool| match status.code() {
        Code::Unimplemented if !responded => Ended::DeltaUnimplemented,
        _ => status_failed(status, responded),
    };
    let mut stream = match client.delta_aggregated_resources(rx).await {
        Ok(r) => r.into_inner(),
        Err(status) => return unimplemented(&status, false),
    };
    // Collections whose first response (the whole contents) came on this stream.
    let mut listed: BTreeSet<String> = BTreeSet::new();
    let mut responded = false;
    loop {
        let r: DeltaDiscoveryResponse =
            match next(&mut stream, &mut responded, health, unimplemented).await {
                Ok(r) => r,
                Err(e) => return e,
            };
        debug!(collection = %r.type_url, resources = r.resources.len(),
            removed = r.removed_resources.len(), "config server delta response");
        let first = !listed.contains(&r.type_url);
        let outcome = collection(&r.type_url)
            .and_then(|c| delta_events(c, &r, first, &settings.default_namespace));
        let mut request = DeltaDiscoveryRequest {
            node: node.clone(),
            type_url: r.type_url.clone(),
            response_nonce: r.nonce.clone(),
            ..DeltaDiscoveryRequest::default()
        };
        match &outcome {
            Ok(_) => {
                listed.insert(r.type_url.clone());
            }
            Err(e) => request.error_detail = nack_detail(e),
        }
        if let Err(e) = answer(tx, health, &requests, &r.type_url, outcome, request).await {
            return e;
        }
    }
}

/// The worker's events for one delta response: the whole collection when it is the first,
/// else each update and removal.
fn delta_events(
    c: &'static Collection,
    r: &DeltaDiscoveryResponse,
    first: bool,
    default_namespace: &str,
) -> Result<Vec<ClusterEvent>, ResponseError> {
    let objects = r
        .resources
        .iter()
        .enumerate()
        .map(|(i, res)| {
            decode(
                c,
                i,
                &res.resource.clone().unwrap_or_default(),
                default_namespace,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    if first {
        return Ok(vec![ClusterEvent::Listed(scope(c), objects)]);
    }
    let kind = kind_of(c);
    let removed = r.removed_resources.iter().map(|full| {
        let (namespace, name) = split_name(full, default_namespace);
        ClusterEvent::Deleted {
            kind: Some(kind),
            namespace: namespace.into(),
            name: name.into(),
        }
    });
    Ok(removed
        .chain(objects.into_iter().map(ClusterEvent::Applied))
        .collect())
}
