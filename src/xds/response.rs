//! Frames one SotW `DiscoveryResponse` from a small per-stream header and shared resource entries.
//!
//! A protobuf message may be written as a concatenation of its fields in any order, so the wire
//! form of a response is: the 5-byte gRPC prefix, then `version_info` (1), `type_url` (4) and
//! `nonce` (5) encoded here by hand, then each resource's shared `resources` (2) entry exactly as
//! [`EncodedResource::sotw_entry`] holds it. Only the header is allocated per stream.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};

use super::body::Framed;
use crate::envoy::{EncodedResource, ResourceType};

/// gRPC message prefix: one compression flag byte plus a big-endian u32 length.
const GRPC_PREFIX_LEN: usize = 5;

fn field_len(tag: u32, value: &str) -> usize {
    // tags 1..=15 take one key byte
    debug_assert!(tag < 16);
    1 + encoded_len_varint(value.len() as u64) + value.len()
}

fn put_field(buf: &mut BytesMut, tag: u32, value: &str) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(value.len() as u64, buf);
    buf.put_slice(value.as_bytes());
}

/// Why a response could not be framed.
#[derive(Debug, thiserror::Error)]
#[error("{ty} response of {len} bytes is over the 4 GiB gRPC message limit")]
pub(crate) struct TooLarge {
    ty: ResourceType,
    len: usize,
}

/// Frames a response of `ty` carrying `entries` (shared `sotw_entry` bytes). Returns the framed
/// response and the message size (without the gRPC prefix).
pub(crate) fn frame(
    ty: ResourceType,
    version: &str,
    nonce: &str,
    entries: Vec<Bytes>,
    names: Vec<Arc<str>>,
) -> Result<(Framed, usize), TooLarge> {
    let type_url = ty.type_url();
    let header_fields = field_len(1, version) + field_len(4, type_url) + field_len(5, nonce);
    let len = header_fields + entries.iter().map(Bytes::len).sum::<usize>();
    let wire_len = u32::try_from(len).map_err(|_| TooLarge { ty, len })?;
    let mut header = BytesMut::with_capacity(GRPC_PREFIX_LEN + header_fields);
    header.put_u8(0);
    header.put_u32(wire_len);
    put_field(&mut header, 1, version);
    put_field(&mut header, 4, type_url);
    put_field(&mut header, 5, nonce);
    let mut chunks = Vec::with_capacity(entries.len() + 1);
    chunks.push(header.freeze());
    chunks.extend(entries);
    Ok((Framed { ty, chunks, names }, len))
}

/// An empty `ClusterLoadAssignment` for an EDS name that does not exist (yet), so Envoy finishes
/// warming the cluster instead of waiting for its timeout (SOTW-27, BUG-3, G-6). Tiny, so it is
/// encoded on demand rather than cached.
pub(crate) fn empty_cla(name: &str) -> EncodedResource {
    let cla = ClusterLoadAssignment {
        cluster_name: name.to_owned(),
        ..Default::default()
    };
    EncodedResource::encode(ResourceType::Endpoint, name, &cla)
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
    use prost::Message;

    #[test]
    fn framed_bytes_decode_as_the_response() {
        let c = Cluster {
            name: "c1".into(),
            ..Default::default()
        };
        let r = EncodedResource::encode(ResourceType::Cluster, "c1", &c);
        let (framed, len) = frame(
            ResourceType::Cluster,
            "v1",
            "n1",
            vec![r.sotw_entry().clone(), empty_cla("x").sotw_entry().clone()],
            vec![],
        )
        .unwrap();
        let mut all = BytesMut::new();
        for c in &framed.chunks {
            all.put_slice(c);
        }
        assert_eq!(all[0], 0);
        assert_eq!(
            u32::from_be_bytes([all[1], all[2], all[3], all[4]]) as usize,
            len
        );
        assert_eq!(all.len(), len + GRPC_PREFIX_LEN);
        let resp = DiscoveryResponse::decode(&all[GRPC_PREFIX_LEN..]).unwrap();
        assert_eq!(resp.version_info, "v1");
        assert_eq!(resp.nonce, "n1");
        assert_eq!(resp.type_url, ResourceType::Cluster.type_url());
        assert_eq!(resp.resources.len(), 2);
    }
}
