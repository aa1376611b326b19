//! A change as the floor replays it: the responses tributary sent one client for that change (type
//! and size, in order), the requests the client sent back after each (the bytes themselves), and
//! which response carried the change.
//!
//! `docs/floor.md` ("A floor for every change"): the first simulated proxy traces its stream while a
//! change is measured (`recorder.rs`); the floor server sends every client responses of exactly
//! those types and sizes, pre-framed and shared, and its clients answer each with the requests the
//! proxy sent, so both sides move the same bytes and the ratio counts only what tributary adds.

use bytes::Bytes;
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryResponse, DiscoveryResponse, Resource,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::recorder::TYPES;

/// The kind of the storm's replay.
pub(crate) const STORM: &str = "storm";
/// Version strings tried when sizing a response exactly: a one-byte step where the padding's
/// length prefix would jump a byte.
const VERSIONS: [&str; 3] = ["1", "10", "100"];
/// Rounds of correcting the padding toward the wanted size (two suffice; varints shift by one).
const SIZE_ROUNDS: usize = 6;

/// One thing the traced proxy saw or did, in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// A response of type `type_index` (CDS, EDS, LDS, RDS order), `bytes` long.
    Response { type_index: usize, bytes: usize },
    /// A request it sent.
    Request(Bytes),
    /// It acknowledged the response carrying the measured change (the last one before this).
    Hit,
}

/// The traced proxy's stream during one change.
pub(crate) type Trace = Vec<Event>;

/// Why a trace cannot be replayed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub(crate) enum ReplayError {
    /// The proxy never acknowledged the change while it was traced.
    #[error("the traced proxy never acknowledged the {0} change")]
    NoHit(String),
    /// The change was acknowledged before any response was traced.
    #[error("the {0} change was acknowledged before any response was traced")]
    HitFirst(String),
    /// The storm trace holds no response.
    #[error("the traced proxy received nothing during the storm")]
    EmptyStorm,
    /// The replay file could not be read.
    #[error("cannot read the floor's replay file {path}: {error}")]
    File { path: String, error: String },
}

/// One response the floor sends each client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Sent {
    /// CDS, EDS, LDS, RDS order.
    pub type_index: usize,
    /// Length of the message (without the 5-byte gRPC prefix), as tributary's was.
    pub bytes: usize,
}

/// One change as the floor replays it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Push {
    pub kind: String,
    pub responses: Vec<Sent>,
    /// Index in `responses` of the one that carried the change: the one timed.
    pub marker: usize,
    /// The requests the client sent after each response (same index). Only the clients need them;
    /// the floor server reads requests without decoding them, so they are not in its file.
    #[serde(skip)]
    pub replies: Vec<Vec<Bytes>>,
}

impl Push {
    /// The replay of `trace`, a change of `kind`. Requests sent before the first response (a
    /// straggler of the previous change) are left out.
    pub(crate) fn from_trace(kind: &str, trace: Trace) -> Result<Self, ReplayError> {
        let mut push = Push {
            kind: kind.to_owned(),
            ..Default::default()
        };
        let mut hit = None;
        for event in trace {
            match event {
                Event::Response { type_index, bytes } => {
                    push.responses.push(Sent { type_index, bytes });
                    push.replies.push(Vec::new());
                }
                Event::Request(req) => {
                    if let Some(r) = push.replies.last_mut() {
                        r.push(req);
                    }
                }
                Event::Hit if hit.is_none() => {
                    hit = Some(
                        push.responses
                            .len()
                            .checked_sub(1)
                            .ok_or_else(|| ReplayError::HitFirst(kind.to_owned()))?,
                    );
                }
                Event::Hit => {}
            }
        }
        push.marker = hit.ok_or_else(|| ReplayError::NoHit(kind.to_owned()))?;
        Ok(push)
    }

    /// The replay of the storm: every response the traced proxy received until every proxy was
    /// synced; the last one stands for "synced".
    pub(crate) fn storm(trace: Trace) -> Result<Self, ReplayError> {
        let mut push = Self::from_trace(STORM, trace.into_iter().chain([Event::Hit]).collect())
            .map_err(|_| ReplayError::EmptyStorm)?;
        push.marker = push
            .responses
            .len()
            .checked_sub(1)
            .ok_or(ReplayError::EmptyStorm)?;
        Ok(push)
    }

    /// Bytes of requests one client sends back.
    pub(crate) fn reply_bytes(&self) -> usize {
        self.replies.iter().flatten().map(Bytes::len).sum()
    }

    /// Bytes of responses one client receives.
    pub(crate) fn response_bytes(&self) -> usize {
        self.responses.iter().map(|s| s.bytes).sum()
    }

    /// The nonce of response `j` of push `k`.
    pub(crate) fn nonce(k: usize, j: usize) -> String {
        format!("p{k}.{j}")
    }

    /// (push, response) of a replay nonce.
    pub(crate) fn parse_nonce(nonce: &str) -> Option<(usize, usize)> {
        let (k, j) = nonce.strip_prefix('p')?.split_once('.')?;
        Some((k.parse().ok()?, j.parse().ok()?))
    }
}

/// Reads the floor server's replay file.
pub(crate) fn read(path: &std::path::Path) -> Result<Vec<Push>, ReplayError> {
    let err = |error: String| ReplayError::File {
        path: path.display().to_string(),
        error,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| err(e.to_string()))
}

/// Writes the floor server's replay file.
pub(crate) fn write(path: &std::path::Path, pushes: &[Push]) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_string(pushes)?)?;
    Ok(())
}

/// A gRPC-framed message: 5-byte prefix then the message.
pub(crate) fn framed(msg: &[u8]) -> Bytes {
    let mut buf = Vec::with_capacity(msg.len() + 5);
    buf.push(0);
    buf.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    buf.extend_from_slice(msg);
    Bytes::from(buf)
}

/// A response message of type `type_url` padded with `pad` bytes.
fn message(delta: bool, type_url: &str, version: &str, nonce: &str, pad: usize) -> Vec<u8> {
    let any = Any {
        type_url: String::new(),
        value: vec![0; pad],
    };
    if delta {
        DeltaDiscoveryResponse {
            system_version_info: version.into(),
            resources: vec![Resource {
                resource: Some(any),
                ..Default::default()
            }],
            type_url: type_url.into(),
            nonce: nonce.into(),
            ..Default::default()
        }
        .encode_to_vec()
    } else {
        DiscoveryResponse {
            version_info: version.into(),
            resources: vec![any],
            type_url: type_url.into(),
            nonce: nonce.into(),
            ..Default::default()
        }
        .encode_to_vec()
    }
}

/// A pre-framed response of type `sent.type_index` whose message is exactly `sent.bytes` long (or
/// the smallest such response, when `sent.bytes` is smaller than a response with no padding).
pub(crate) fn response(delta: bool, sent: Sent, nonce: &str) -> Bytes {
    let type_url = TYPES.get(sent.type_index).copied().unwrap_or(TYPES[1]);
    let mut smallest = None;
    for version in VERSIONS {
        let mut pad = sent.bytes;
        for _ in 0..SIZE_ROUNDS {
            let msg = message(delta, type_url, version, nonce, pad);
            if msg.len() == sent.bytes {
                return framed(&msg);
            }
            if pad == 0 && msg.len() > sent.bytes {
                smallest.get_or_insert(msg);
                break;
            }
            pad = (pad + sent.bytes).saturating_sub(msg.len());
        }
    }
    framed(&smallest.unwrap_or_else(|| message(delta, type_url, VERSIONS[0], nonce, 0)))
}

#[cfg(test)]
mod tests;
