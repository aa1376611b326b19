//! Requests, as both protocols receive them: decoding (malformed input is the client's fault,
//! TRANS-10), the checks every request passes before a protocol applies it (type, names, node,
//! SEC-2 authorisation), and how a request is classified ([`Kind`]).
//!
//! Nothing here knows about streams or protocol state: `stream.rs` runs these checks, the protocols
//! (`sotw.rs`, `delta.rs`) apply what passes.

mod frames;

use std::marker::PhantomData;
use std::net::SocketAddr;
use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use prost::Message;
use tonic::{Code, Status};

use super::metrics::{self, InvalidReason};
use super::node::{NodeError, NodeInfo};
use crate::envoy::ResourceType;
use frames::Frames;
pub(crate) use frames::MessageBytes;

/// Longest resource name accepted. Istio-style names (`outbound|port|subset|hostname`) stay under
/// 300 bytes; hostnames are at most 253. Anything longer is garbage (SEC-12).
pub const MAX_NAME_BYTES: usize = 2048;

/// Most resource names accepted in one request. A large mesh (20k clusters, TRANS-6) stays well
/// under this; more is garbage and would only cost memory.
pub const MAX_NAMES_PER_REQUEST: usize = 200_000;

/// How many unknown-type requests per stream are logged; the rest are only counted (SOTW-5).
const UNKNOWN_TYPE_LOG_LIMIT: u32 = 4;

/// A request message read from one gRPC message's bytes.
pub(crate) trait FromFrame: Sized {
    /// The message's name, for errors.
    const NAME: &'static str;

    /// Reads the message from its bytes; `Err` says what is malformed.
    fn from_frame(message: MessageBytes) -> Result<Self, String>;
}

impl FromFrame for DeltaDiscoveryRequest {
    const NAME: &'static str = "DeltaDiscoveryRequest";

    fn from_frame(message: MessageBytes) -> Result<Self, String> {
        // Small (an ACK lies within one frame); one that spans frames is put together.
        Self::decode(message.contiguous()).map_err(|e| e.to_string())
    }
}

/// A stream's requests, decoded from its body. Malformed ones are the client's fault
/// (TRANS-10), not `INTERNAL`; framing and size limits are [`Frames`]'s.
pub(crate) struct Requests<T> {
    frames: Frames,
    message: PhantomData<fn() -> T>,
}

impl<T: FromFrame> Requests<T> {
    /// Requests read from `body`, each at most `limit` bytes.
    pub(crate) fn new(body: tonic::body::Body, limit: usize) -> Self {
        Self {
            frames: Frames::new(body, limit),
            message: PhantomData,
        }
    }

    /// The next request; `None` when the client closed its side.
    pub(crate) async fn message(&mut self) -> Result<Option<T>, Status> {
        let Some(message) = self.frames.next().await? else {
            return Ok(None);
        };
        T::from_frame(message).map(Some).map_err(|e| {
            metrics::invalid(InvalidReason::Malformed);
            Status::invalid_argument(format!("malformed {}: {e}", T::NAME))
        })
    }
}

/// The type a request is about, checked against the service it came on: `Ok(None)` for a type
/// tributary does not serve on ADS, which is ignored and counted (SOTW-5); an error ends the
/// stream.
pub(crate) fn request_type(
    fixed: Option<ResourceType>,
    type_url: &str,
) -> Result<Option<ResourceType>, Status> {
    match (fixed, type_url) {
        (Some(t), "") => Ok(Some(t)),
        (Some(t), url) if url == t.type_url() => Ok(Some(t)),
        (Some(t), url) => Err(refuse(
            InvalidReason::TypeMismatch,
            format!(
                "this service serves {} only, got type_url {url:.256}",
                t.type_url()
            ),
        )),
        (None, "") => Err(refuse(
            InvalidReason::MissingTypeUrl,
            "type_url is required for ADS".to_owned(),
        )),
        (None, url) => match ResourceType::from_type_url(url) {
            Some(t) => Ok(Some(t)),
            None => {
                metrics::invalid(InvalidReason::UnknownType);
                Ok(None)
            }
        },
    }
}

/// Checks a request's resource names against [`MAX_NAMES_PER_REQUEST`] and [`MAX_NAME_BYTES`]
/// (SEC-12): `count` names in all, `names` to look at.
pub(crate) fn check_names<'a>(
    count: usize,
    mut names: impl Iterator<Item = &'a str>,
) -> Result<(), Status> {
    if count > MAX_NAMES_PER_REQUEST {
        return Err(refuse(
            InvalidReason::BadNames,
            format!(
                "{count} resource names in one request, over the limit of {MAX_NAMES_PER_REQUEST}"
            ),
        ));
    }
    if let Some(long) = names.find(|n| n.len() > MAX_NAME_BYTES) {
        return Err(refuse(
            InvalidReason::BadNames,
            format!(
                "resource name of {} bytes is over the {MAX_NAME_BYTES}-byte limit (starts {:.64?})",
                long.len(),
                long
            ),
        ));
    }
    Ok(())
}

/// Requests for types tributary does not serve on one stream: ignored and counted (SOTW-5), the
/// first few logged.
#[derive(Default)]
pub(crate) struct UnknownTypes(u32);

impl UnknownTypes {
    pub(crate) fn log(&mut self, conn: &str, url: &str) {
        self.0 = self.0.saturating_add(1);
        if self.0 <= UNKNOWN_TYPE_LOG_LIMIT {
            tracing::info!(conn, type_url = %format!("{url:.256}"), "ignoring request for unknown type");
        }
    }
}

/// Counts an invalid request and makes the status that ends its stream.
pub(crate) fn refuse(reason: InvalidReason, message: String) -> Status {
    metrics::invalid(reason);
    Status::invalid_argument(message)
}

/// Checks the first request's node and returns it, or the status that ends the stream.
pub(crate) fn first_node(
    node: Option<&envoy_types::pb::envoy::config::core::v3::Node>,
    peer: Option<SocketAddr>,
) -> Result<NodeInfo, Status> {
    NodeInfo::from_first(node).map_err(|e| {
        metrics::invalid(match e {
            NodeError::Missing | NodeError::EmptyId => InvalidReason::MissingNode,
            _ => InvalidReason::BadMetadata,
        });
        tracing::info!(error = %e, peer = %peer_text(peer), "refusing xDS stream");
        Status::invalid_argument(e.to_string())
    })
}

/// Refuses a request whose node differs from the stream's (SOTW-3: never re-scope a stream).
pub(crate) fn check_same_node(
    stream_node: &NodeInfo,
    node: Option<&envoy_types::pb::envoy::config::core::v3::Node>,
) -> Result<(), Status> {
    match node {
        Some(node) if !stream_node.same_as(node) => Err(refuse(
            InvalidReason::NodeChanged,
            format!(
                "node changed mid-stream (was {:?}, now {:.256?}); open a new stream",
                &*stream_node.id, node.id
            ),
        )),
        _ => Ok(()),
    }
}

/// A TLS stream's authenticated identity and the rule binding it to the claimed node (SEC-2).
pub(crate) struct Auth {
    pub identity: Arc<crate::tls::PeerIdentity>,
    pub mapping: crate::tls::IdentityMapping,
    pub trust_domain: Option<Arc<str>>,
}

/// Refuses a node its connection's certificate does not vouch for: `PERMISSION_DENIED` before
/// any config is generated (SEC-2). The identity is the connection's, fixed at the handshake, and
/// later requests cannot change the node (SOTW-3), so it holds for the stream's life (SEC-3).
pub(crate) fn authorize(
    auth: Option<&Auth>,
    node: Option<&envoy_types::pb::envoy::config::core::v3::Node>,
    peer: Option<SocketAddr>,
) -> Result<(), Status> {
    let (Some(auth), Some(node)) = (auth, node) else {
        return Ok(());
    };
    auth.identity
        .authorize(auth.mapping, auth.trust_domain.as_deref(), node)
        .map_err(|e| {
            tracing::warn!(error = %e, peer = %peer_text(peer), "refusing xDS stream: identity mismatch");
            Status::permission_denied(e.to_string())
        })
}

/// The tonic status for a request-stream error: limits are RESOURCE_EXHAUSTED and decoding faults
/// INVALID_ARGUMENT (TRANS-10); transport errors pass through.
pub(crate) fn client_fault(status: Status) -> Status {
    match status.code() {
        Code::OutOfRange => {
            metrics::invalid(InvalidReason::Malformed);
            Status::resource_exhausted(status.message().to_owned())
        }
        Code::Internal => Status::invalid_argument(status.message().to_owned()),
        _ => status,
    }
}

/// A peer address for log fields (`unknown` when the transport does not say).
pub(crate) fn peer_text(peer: Option<SocketAddr>) -> String {
    peer.map_or_else(|| "unknown".to_string(), |p| p.to_string())
}

/// How a request was classified, in either protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// First request for the type on this stream (SOTW-8), whatever nonce it carries.
    Initial,
    /// Nonce of the last response, no error (SOTW-11); a delta ACK may also change the
    /// subscription.
    Ack,
    /// Carries `error_detail` (SOTW-12, DELTA-14: the only NACK signal).
    Nack,
    /// Empty nonce after the first request: a spontaneous subscription change.
    Update,
    /// Nonce of an older response. SotW ignores it entirely (SOTW-9); delta still applies its
    /// subscription changes (DELTA-3, G-2), only the ACK is meaningless.
    Stale,
}
