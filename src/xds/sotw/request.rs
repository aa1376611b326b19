//! A SotW `DiscoveryRequest` read from its frame without decoding `resource_names`.
//!
//! Envoy repeats every EDS name in every EDS ACK: 2,000 clusters make a ~90 KB request per proxy
//! per change, which a full decode turns into 2,000 `String`s only to find the list unchanged. Here
//! the small fields (version, node, type, nonce, error) are decoded as usual and the names stay in
//! the frame's bytes: one pass checks them (UTF-8) and computes the list's count and hash, the
//! subscription compares that with the previous list's, and only a changed list is walked again to
//! build the new set (`subscription.rs`). An unchanged ACK allocates nothing for its names.

use std::str;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::rpc::Status as RpcStatus;
use prost::Message;

use super::super::request::FromFrame;
use super::super::subscription::{ListHasher, SotwNames};

/// `resource_names` in `DiscoveryRequest`.
const NAMES_FIELD: u64 = 3;
/// Protobuf wire types.
const VARINT: u64 = 0;
const FIXED64: u64 = 1;
const LEN: u64 = 2;
const FIXED32: u64 = 5;

/// The fields of a `DiscoveryRequest` other than `resource_names` (3) and `resource_locators` (7,
/// not supported, skipped as unknown).
#[derive(Clone, PartialEq, Message)]
struct Fields {
    #[prost(string, tag = "1")]
    version_info: String,
    #[prost(message, optional, tag = "2")]
    node: Option<Node>,
    #[prost(string, tag = "4")]
    type_url: String,
    #[prost(string, tag = "5")]
    response_nonce: String,
    #[prost(message, optional, tag = "6")]
    error_detail: Option<RpcStatus>,
}

/// A SotW request, its names left in the frame.
#[derive(Debug)]
pub(crate) struct SotwRequest {
    pub version_info: String,
    pub node: Option<Node>,
    pub type_url: String,
    pub response_nonce: String,
    pub error_detail: Option<RpcStatus>,
    pub names: NameList,
}

impl FromFrame for SotwRequest {
    const NAME: &'static str = "DiscoveryRequest";

    fn from_frame(frame: Bytes) -> Result<Self, String> {
        let fields = Fields::decode(frame.clone()).map_err(|e| e.to_string())?;
        let names = NameList::parse(frame)?;
        Ok(Self {
            version_info: fields.version_info,
            node: fields.node,
            type_url: fields.type_url,
            response_nonce: fields.response_nonce,
            error_detail: fields.error_detail,
            names,
        })
    }
}

/// The `resource_names` of a request, as a view over its bytes.
#[derive(Debug)]
pub(crate) struct NameList {
    message: Bytes,
    count: usize,
    hash: u128,
}

impl NameList {
    /// Checks every name (valid UTF-8) and the message's framing, counting and hashing the list
    /// in the same pass.
    fn parse(message: Bytes) -> Result<Self, String> {
        let mut hasher = ListHasher::default();
        let mut count = 0;
        let mut pos = 0;
        while let Some(name) = next_name(&message, &mut pos)? {
            let name = str::from_utf8(name).map_err(|e| format!("resource_names: {e}"))?;
            hasher.add(name);
            count += 1;
        }
        Ok(Self {
            hash: hasher.finish(),
            message,
            count,
        })
    }
}

impl SotwNames for NameList {
    fn count(&self) -> usize {
        self.count
    }

    fn list_key(&self) -> (usize, u128) {
        (self.count, self.hash)
    }

    fn each(&self) -> impl Iterator<Item = &str> {
        let mut pos = 0;
        // `parse` checked the framing and every name, so neither can fail here.
        std::iter::from_fn(move || next_name(&self.message, &mut pos).ok().flatten())
            .filter_map(|n| str::from_utf8(n).ok())
    }
}

/// The next `resource_names` entry at or after `pos`, skipping every other field.
fn next_name<'a>(msg: &'a [u8], pos: &mut usize) -> Result<Option<&'a [u8]>, String> {
    while *pos < msg.len() {
        let key = varint(msg, pos)?;
        let (field, wire) = (key >> 3, key & 7);
        if field == 0 {
            return Err("field number 0".to_owned());
        }
        let skip = match wire {
            VARINT => {
                varint(msg, pos)?;
                0
            }
            FIXED64 => 8,
            FIXED32 => 4,
            LEN => usize::try_from(varint(msg, pos)?).map_err(|_| "length overflow".to_owned())?,
            w => return Err(format!("unsupported wire type {w}")),
        };
        let end = pos
            .checked_add(skip)
            .filter(|end| *end <= msg.len())
            .ok_or_else(|| "field runs past the message".to_owned())?;
        let start = std::mem::replace(pos, end);
        if field == NAMES_FIELD && wire == LEN {
            return Ok(Some(&msg[start..end]));
        }
    }
    Ok(None)
}

/// A base-128 varint at `pos` (at most 10 bytes).
fn varint(msg: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let byte = *msg.get(*pos).ok_or_else(|| "truncated varint".to_owned())?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err("varint over 10 bytes".to_owned())
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;

    use super::*;
    use crate::xds::subscription::list_hash;

    fn encode(req: &DiscoveryRequest) -> Bytes {
        Bytes::from(req.encode_to_vec())
    }

    #[test]
    fn the_view_reads_what_a_full_decode_reads() {
        let names: Vec<String> = (0..300).map(|i| format!("outbound|80||s{i}.ns")).collect();
        let req = DiscoveryRequest {
            version_info: "v1".into(),
            node: Some(Node {
                id: "sidecar~1".into(),
                ..Default::default()
            }),
            resource_names: names.clone(),
            type_url: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment".into(),
            response_nonce: "n-1".into(),
            error_detail: Some(RpcStatus {
                code: 3,
                message: "bad".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let view = SotwRequest::from_frame(encode(&req)).unwrap();
        assert_eq!(view.version_info, "v1");
        assert_eq!(view.node.as_ref().unwrap().id, "sidecar~1");
        assert_eq!(view.type_url, req.type_url);
        assert_eq!(view.response_nonce, "n-1");
        assert_eq!(view.error_detail.as_ref().unwrap().message, "bad");
        assert_eq!(view.names.each().collect::<Vec<_>>(), names);
        // The same key as the decoded list's, so either form recognises the other (SOTW-26 ACKs).
        assert_eq!(view.names.list_key(), names[..].list_key());
        assert_eq!(view.names.hash, list_hash(names.iter().map(String::as_str)));
    }

    #[test]
    fn no_names_and_bad_input() {
        let empty = SotwRequest::from_frame(encode(&DiscoveryRequest::default())).unwrap();
        assert_eq!(empty.names.count(), 0);
        // A name that is not UTF-8 is malformed (TRANS-10), as a full decode says.
        let mut bad = vec![(3 << 3) | 2, 2, 0xff, 0xfe];
        assert!(SotwRequest::from_frame(Bytes::from(bad.clone())).is_err());
        // A length past the end is malformed.
        bad[1] = 9;
        assert!(SotwRequest::from_frame(Bytes::from(bad)).is_err());
    }
}
