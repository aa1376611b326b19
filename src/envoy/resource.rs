//! A resource encoded once and shared by every stream that sends it.
//!
//! The wire form of both `DiscoveryResponse.resources` (SotW, field 2, `repeated Any`) and of the
//! `Any` inside a delta `Resource` is built here exactly once per content version. A SotW response is
//! then a small per-stream header followed by these shared [`Bytes`] chunks, in the order the stream
//! chooses: no per-stream re-encode or copy (see `docs/floor.md`). A delta response
//! sends the very same `Any` bytes, behind a small per-resource head (DELTA-21).

use std::fmt;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};

use super::ResourceType;
use super::rules::LocalityInput;

/// A content-derived version: the same bytes give the same version on every replica and restart
/// (SOTW-7, DELTA-13, TRANS-12).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ContentHash(pub u128);

impl ContentHash {
    /// The hash of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(xxhash_rust::xxh3::xxh3_128(bytes))
    }
}

impl fmt::Display for ContentHash {
    /// 16 hex digits of the 128-bit hash: short enough for logs, long enough to never collide in
    /// practice for one resource name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", (self.0 >> 64) as u64 ^ self.0 as u64)
    }
}

impl fmt::Debug for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One Envoy resource, encoded once.
#[derive(Clone)]
pub struct EncodedResource {
    /// The resource name (cluster name, CLA cluster name, listener name, route config name).
    pub name: Arc<str>,
    /// Its type.
    pub ty: ResourceType,
    /// Hash of the encoded message; the per-resource version.
    pub hash: ContentHash,
    /// `hash` as text, as sent in delta `Resource.version`.
    pub version: Arc<str>,
    /// The complete SotW `resources` entry: field-2 key, length, then the encoded `Any`.
    sotw_entry: Bytes,
    /// Where the `Any` starts inside `sotw_entry`.
    any_offset: usize,
    /// The start of a delta `DeltaDiscoveryResponse.resources` entry, up to the `Any`: field-2 key
    /// and length of the `Resource`, its `version` (1) and `name` (3), then the key and length of
    /// its `resource` (2), whose value is [`Self::any_bytes`].
    delta_head: Bytes,
    /// For a load assignment that differs by proxy locality: what each locality's variant is made
    /// from (`crate::snapshot` builds them). `None` for every other resource.
    pub(crate) located: Option<Arc<LocalityInput>>,
}

impl EncodedResource {
    /// Encodes `message` as a resource of type `ty` named `name`.
    pub fn encode<M: Message>(ty: ResourceType, name: &str, message: &M) -> Self {
        let value_len = message.encoded_len();
        let type_url = ty.resource_type_url();
        // Any { type_url = 1; value = 2 }
        let any_len = 1
            + encoded_len_varint(type_url.len() as u64)
            + type_url.len()
            + 1
            + encoded_len_varint(value_len as u64)
            + value_len;
        let prefix_len = 1 + encoded_len_varint(any_len as u64);
        let mut buf = BytesMut::with_capacity(prefix_len + any_len);
        encode_key(2, WireType::LengthDelimited, &mut buf);
        encode_varint(any_len as u64, &mut buf);
        encode_key(1, WireType::LengthDelimited, &mut buf);
        encode_varint(type_url.len() as u64, &mut buf);
        buf.put_slice(type_url.as_bytes());
        encode_key(2, WireType::LengthDelimited, &mut buf);
        encode_varint(value_len as u64, &mut buf);
        message
            .encode(&mut buf)
            .expect("BytesMut grows, so encoding cannot run out of room");
        let sotw_entry = buf.freeze();
        let hash = ContentHash::of(&sotw_entry[prefix_len..]);
        let version = hash.to_string();
        Self {
            name: Arc::from(name),
            ty,
            hash,
            delta_head: delta_head(&version, name, any_len),
            version: Arc::from(version),
            sotw_entry,
            any_offset: prefix_len,
            located: None,
        }
    }

    /// Encodes the load assignment of `input` as proxies without a locality get it, keeping
    /// `input` for the per-locality variants. Its version also covers the parts of `input` the
    /// bytes do not show (the setting, the endpoints' priority labels), so that changing them is a
    /// change of the resource even when these bytes stay the same.
    pub(crate) fn encode_located(name: &str, input: LocalityInput) -> Self {
        let mut r = Self::encode(ResourceType::Endpoint, name, &input.cla);
        let salt = xxhash_rust::xxh3::xxh3_128(input.fingerprint().as_bytes());
        r.hash = ContentHash(r.hash.0 ^ salt);
        let version = r.hash.to_string();
        r.delta_head = delta_head(&version, name, r.encoded_len());
        r.version = Arc::from(version);
        r.located = Some(Arc::new(input));
        r
    }

    /// The two chunks of this resource's delta `resources` entry: the head, then the shared `Any`.
    pub fn delta_entry(&self) -> [Bytes; 2] {
        [self.delta_head.clone(), self.any_bytes()]
    }

    /// Encoded size of [`Self::delta_entry`].
    pub fn delta_entry_len(&self) -> usize {
        self.delta_head.len() + self.encoded_len()
    }

    /// The bytes to append to a SotW `DiscoveryResponse` for this resource (field 2 included).
    pub fn sotw_entry(&self) -> &Bytes {
        &self.sotw_entry
    }

    /// The encoded `google.protobuf.Any`, sharing `sotw_entry`'s allocation.
    pub fn any_bytes(&self) -> Bytes {
        self.sotw_entry.slice(self.any_offset..)
    }

    /// Decodes the `Any` again, for debug views and tests; never on the push path.
    pub fn to_any(&self) -> envoy_types::pb::google::protobuf::Any {
        envoy_types::pb::google::protobuf::Any::decode(self.any_bytes())
            .expect("bytes were produced by encode() from a valid message")
    }

    /// Encoded size of the `Any`.
    pub fn encoded_len(&self) -> usize {
        self.sotw_entry.len() - self.any_offset
    }
}

/// Encoded size of a length-delimited field with a one-byte key (tags 1..=15).
pub(crate) fn string_field_len(value: &str) -> usize {
    1 + encoded_len_varint(value.len() as u64) + value.len()
}

/// Writes a length-delimited string field.
pub(crate) fn put_string_field(buf: &mut BytesMut, tag: u32, value: &str) {
    debug_assert!(tag < 16, "tags 1..=15 take one key byte");
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(value.len() as u64, buf);
    buf.put_slice(value.as_bytes());
}

/// `resources` (2) key and length of a delta `Resource { version = 1; resource = 2; name = 3 }`,
/// its version and name, and the key and length of the `Any` that follows.
fn delta_head(version: &str, name: &str, any_len: usize) -> Bytes {
    let resource_len = string_field_len(version)
        + string_field_len(name)
        + 1
        + encoded_len_varint(any_len as u64)
        + any_len;
    let head_len = 1 + encoded_len_varint(resource_len as u64) + resource_len - any_len;
    let mut buf = BytesMut::with_capacity(head_len);
    encode_key(2, WireType::LengthDelimited, &mut buf);
    encode_varint(resource_len as u64, &mut buf);
    put_string_field(&mut buf, 1, version);
    put_string_field(&mut buf, 3, name);
    encode_key(2, WireType::LengthDelimited, &mut buf);
    encode_varint(any_len as u64, &mut buf);
    buf.freeze()
}

impl fmt::Debug for EncodedResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EncodedResource")
            .field("name", &self.name)
            .field("type", &self.ty)
            .field("version", &self.version)
            .field("len", &self.encoded_len())
            .finish()
    }
}

impl PartialEq for EncodedResource {
    fn eq(&self, other: &Self) -> bool {
        self.ty == other.ty
            && self.name == other.name
            && self.hash == other.hash
            && self.sotw_entry == other.sotw_entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;

    #[test]
    fn sotw_entry_decodes_as_a_discovery_response_resource() {
        let cluster = Cluster {
            name: "outbound|80||a.b".into(),
            ..Default::default()
        };
        let r = EncodedResource::encode(ResourceType::Cluster, &cluster.name, &cluster);
        let mut body = BytesMut::new();
        body.put_slice(r.sotw_entry());
        body.put_slice(r.sotw_entry());
        let resp = DiscoveryResponse::decode(body.freeze()).unwrap();
        assert_eq!(resp.resources.len(), 2);
        assert_eq!(resp.resources[0].type_url, ResourceType::Cluster.type_url());
        let back = Cluster::decode(resp.resources[0].value.as_slice()).unwrap();
        assert_eq!(back, cluster);
        assert_eq!(r.to_any(), resp.resources[1]);
    }

    #[test]
    fn delta_entry_decodes_as_a_delta_resource_with_the_same_any() {
        use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryResponse;
        let cluster = Cluster {
            name: "outbound|80||a.b".into(),
            alt_stat_name: "x".repeat(300),
            ..Default::default()
        };
        let r = EncodedResource::encode(ResourceType::Cluster, &cluster.name, &cluster);
        let mut body = BytesMut::new();
        for _ in 0..2 {
            for chunk in r.delta_entry() {
                body.put_slice(&chunk);
            }
        }
        assert_eq!(body.len(), 2 * r.delta_entry_len());
        let resp = DeltaDiscoveryResponse::decode(body.freeze()).unwrap();
        assert_eq!(resp.resources.len(), 2);
        let res = &resp.resources[0];
        assert_eq!(res.name, cluster.name);
        assert_eq!(res.version, &*r.version);
        assert_eq!(res.resource.as_ref(), Some(&r.to_any()));
        assert_eq!(
            res.resource.as_ref().unwrap().encode_to_vec(),
            r.any_bytes()
        );
    }

    #[test]
    fn version_is_derived_from_content_only() {
        let a = Cluster {
            name: "c".into(),
            ..Default::default()
        };
        let mut b = a.clone();
        let ra = EncodedResource::encode(ResourceType::Cluster, "c", &a);
        assert_eq!(
            ra.version,
            EncodedResource::encode(ResourceType::Cluster, "c", &b).version
        );
        b.alt_stat_name = "x".into();
        assert_ne!(
            ra.version,
            EncodedResource::encode(ResourceType::Cluster, "c", &b).version
        );
    }
}
