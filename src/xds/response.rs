//! Frames one SotW `DiscoveryResponse` from a small per-stream header and shared resource entries.
//!
//! A protobuf message may be written as a concatenation of its fields in any order, so the wire
//! form of a response is: the 5-byte gRPC prefix, then `version_info` (1), `type_url` (4) and
//! `nonce` (5) encoded here by hand, then each resource's shared `resources` (2) entry exactly as
//! [`EncodedResource::sotw_entry`] holds it. Only the header is allocated per stream. Delta
//! responses are framed the same way around [`EncodedResource::delta_entry`] chunks.
//!
//! Each chunk goes to h2 as a DATA frame of its own (a queue entry, a frame header, a slot in the
//! write), so a small response (an endpoint change: one load assignment, ~1 KB) is copied into
//! its header instead: one chunk, as a pre-framed response would be. Larger ones stay shared.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;

use super::body::Framed;
use crate::envoy::{EncodedResource, ResourceType, put_string_field, string_field_len};

/// gRPC message prefix: one compression flag byte plus a big-endian u32 length.
const GRPC_PREFIX_LEN: usize = 5;

/// Responses up to this size (prefix included) go out as one chunk: h2's default maximum DATA
/// frame size, so such a response is one frame; the copy per stream is at most this much.
const ONE_CHUNK_MAX: usize = 16 * 1024;

/// Why a response could not be framed.
#[derive(Debug, thiserror::Error)]
#[error("{ty} response of {len} bytes is over the 4 GiB gRPC message limit")]
pub(crate) struct TooLarge {
    ty: ResourceType,
    len: usize,
}

/// Frames a SotW response of `ty` carrying `entries` (shared `sotw_entry` bytes), with `type_url`
/// (the URL the client asked with: an MCP collection has several, `crate::mcp::type_urls`).
/// Returns the framed response and the message size (without the gRPC prefix).
pub(crate) fn frame(
    ty: ResourceType,
    type_url: &str,
    version: &str,
    nonce: &str,
    entries: Vec<Bytes>,
) -> Result<(Framed, usize), TooLarge> {
    let fields = [(1, version), (4, type_url), (5, nonce)];
    frame_fields(ty, &fields, entries)
}

/// Frames a `DeltaDiscoveryResponse` of `ty`: `system_version_info` (1, debug only), `type_url`
/// (4, the URL the client asked with), `nonce` (5) and `removed_resources` (6), then `entries` (shared [`EncodedResource::delta_entry`]
/// chunks). `resource_errors`, `control_plane` and `removed_resource_names` are never set (DELTA-18).
pub(crate) fn frame_delta(
    ty: ResourceType,
    type_url: &str,
    system_version: &str,
    nonce: &str,
    removed: &[Arc<str>],
    entries: Vec<Bytes>,
) -> Result<(Framed, usize), TooLarge> {
    let mut fields = Vec::with_capacity(3 + removed.len());
    fields.extend([(1, system_version), (4, type_url), (5, nonce)]);
    fields.extend(removed.iter().map(|n| (6, &**n)));
    frame_fields(ty, &fields, entries)
}

/// The gRPC prefix and the string `fields` in one per-stream header chunk, then `entries`.
fn frame_fields(
    ty: ResourceType,
    fields: &[(u32, &str)],
    entries: Vec<Bytes>,
) -> Result<(Framed, usize), TooLarge> {
    let header_len: usize = fields.iter().map(|(_, v)| string_field_len(v)).sum();
    let len = header_len + entries.iter().map(Bytes::len).sum::<usize>();
    let wire_len = u32::try_from(len).map_err(|_| TooLarge { ty, len })?;
    let one_chunk = GRPC_PREFIX_LEN + len <= ONE_CHUNK_MAX;
    let capacity = GRPC_PREFIX_LEN + if one_chunk { len } else { header_len };
    let mut header = BytesMut::with_capacity(capacity);
    header.put_u8(0);
    header.put_u32(wire_len);
    for (tag, value) in fields {
        put_string_field(&mut header, *tag, value);
    }
    let chunks = if one_chunk {
        for e in &entries {
            header.put_slice(e);
        }
        vec![header.freeze()]
    } else {
        let mut chunks = Vec::with_capacity(entries.len() + 1);
        chunks.push(header.freeze());
        chunks.extend(entries);
        chunks
    };
    Ok((Framed { chunks }, len))
}

/// An empty response for a collection tributary does not serve (`crate::mcp::type_urls`):
/// `version_info` (SotW) or `system_version_info` (delta), both field 1, then `type_url` and
/// `nonce`; no resources. The same bytes are a valid `DiscoveryResponse` and `DeltaDiscoveryResponse`.
pub(crate) fn frame_empty(type_url: &str, version: &str, nonce: &str) -> Framed {
    let fields = [(1, version), (4, type_url), (5, nonce)];
    let header_len: usize = fields.iter().map(|(_, v)| string_field_len(v)).sum();
    let mut header = BytesMut::with_capacity(GRPC_PREFIX_LEN + header_len);
    header.put_u8(0);
    // Three strings of at most a few KiB each (type URLs are capped by `MAX_NAME_BYTES`-like
    // request limits), far below the u32 prefix's range.
    header.put_u32(u32::try_from(header_len).unwrap_or(u32::MAX));
    for (tag, value) in fields {
        put_string_field(&mut header, tag, value);
    }
    Framed {
        chunks: vec![header.freeze()],
    }
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
            ResourceType::Cluster.type_url(),
            "v1",
            "n1",
            vec![r.sotw_entry().clone(), empty_cla("x").sotw_entry().clone()],
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
        assert_eq!(framed.chunks.len(), 1, "a small response is one chunk");
    }

    #[test]
    fn a_large_response_keeps_its_entries_shared() {
        let big = |name: &str| {
            let c = Cluster {
                name: name.into(),
                alt_stat_name: "x".repeat(ONE_CHUNK_MAX / 2),
                ..Default::default()
            };
            EncodedResource::encode(ResourceType::Cluster, name, &c)
        };
        let (a, b) = (big("a"), big("b"));
        let entries = vec![a.sotw_entry().clone(), b.sotw_entry().clone()];
        let (framed, len) = frame(
            ResourceType::Cluster,
            ResourceType::Cluster.type_url(),
            "v1",
            "n1",
            entries,
        )
        .unwrap();
        assert!(len > ONE_CHUNK_MAX);
        assert_eq!(framed.chunks.len(), 3);
        // The entries are the resources' own bytes, not copies.
        assert_eq!(framed.chunks[1].as_ptr(), a.sotw_entry().as_ptr());
        assert_eq!(framed.chunks[2].as_ptr(), b.sotw_entry().as_ptr());
        let mut all = BytesMut::new();
        for c in &framed.chunks {
            all.put_slice(c);
        }
        let resp = DiscoveryResponse::decode(&all[GRPC_PREFIX_LEN..]).unwrap();
        assert_eq!(resp.resources.len(), 2);
    }
}
