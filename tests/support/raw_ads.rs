//! Raw ADS streams for tests that drive the whole pipeline (`support::start_runtime`) or the real
//! binary over plaintext or mTLS: one stream that asks for every cluster as a node, with or without
//! waiting for its first response. H-RAW's scripted client, which checks the invariants on every
//! response, is `support::XdsClient`.

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;
use tonic::{Status, Streaming};

use super::type_url::CDS;

/// The requests side of a stream.
pub type Requests = mpsc::Sender<DiscoveryRequest>;
/// The responses side of a stream.
pub type Responses = Streaming<DiscoveryResponse>;

/// Requests a stream buffers before `send` waits.
const REQUEST_BUFFER: usize = 8;

/// A node with only its id.
pub fn node(id: &str) -> Node {
    Node {
        id: id.into(),
        ..Default::default()
    }
}

/// A plaintext channel to `addr`; UNAVAILABLE if nothing accepts the connection.
pub async fn connect(addr: SocketAddr) -> Result<Channel, Status> {
    Channel::from_shared(format!("http://{addr}"))
        .expect("a socket address makes a valid URI")
        .connect()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))
}

/// Opens ADS on `ch` with a first request for every cluster as `node`.
pub async fn open(ch: Channel, node: Node) -> Result<(Requests, Responses), Status> {
    let (tx, rx) = mpsc::channel(REQUEST_BUFFER);
    tx.send(DiscoveryRequest {
        node: Some(node),
        type_url: CDS.into(),
        ..Default::default()
    })
    .await
    .expect("the request buffer has room");
    let responses = AggregatedDiscoveryServiceClient::new(ch)
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok((tx, responses))
}

/// [`open`], then its first response; each step within `limit` (DEADLINE_EXCEEDED otherwise).
pub async fn open_first(
    ch: Channel,
    node: Node,
    limit: Duration,
) -> Result<(Requests, Responses, DiscoveryResponse), Status> {
    let (tx, mut responses) = tokio::time::timeout(limit, open(ch, node))
        .await
        .map_err(|_| Status::deadline_exceeded("open"))??;
    let first = tokio::time::timeout(limit, responses.message())
        .await
        .map_err(|_| Status::deadline_exceeded("first response"))??
        .ok_or_else(|| Status::ok("ended"))?;
    Ok((tx, responses, first))
}
