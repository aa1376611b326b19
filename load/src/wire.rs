//! Cheap xDS messages for thousands of simulated proxies: requests encoded by hand around shared
//! pre-encoded name lists, and responses parsed without decoding each resource.
//!
//! The client side of a load test must not be what is measured. A SotW proxy repeats every EDS name
//! in every EDS ACK, so the names are encoded once per list and shared; a response's resources are
//! kept as byte slices and only their names are read, and only when needed.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::encoding::{WireType, decode_key, decode_varint, encode_key, encode_varint};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

#[cfg(test)]
pub(crate) mod fixtures;
mod routes;

pub(crate) use routes::is_host_resource;

pub(crate) const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
pub(crate) const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
pub(crate) const LDS: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
pub(crate) const RDS: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";

fn put_str(buf: &mut BytesMut, tag: u32, s: &str) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(s.len() as u64, buf);
    buf.put_slice(s.as_bytes());
}

/// Names encoded once as repeated string field `tag`, to splice into many requests.
pub(crate) fn encode_names(tag: u32, names: &[String]) -> Bytes {
    let mut buf = BytesMut::new();
    for n in names {
        put_str(&mut buf, tag, n);
    }
    buf.freeze()
}

/// An encoded `envoy.config.core.v3.Node { id = 1; cluster = 2 }`.
pub(crate) fn node(id: &str) -> Bytes {
    let mut buf = BytesMut::new();
    put_str(&mut buf, 1, id);
    put_str(&mut buf, 2, "load");
    buf.freeze()
}

fn put_message(buf: &mut BytesMut, tag: u32, msg: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(msg.len() as u64, buf);
    buf.put_slice(msg);
}

/// A SotW `DiscoveryRequest`: version_info 1, node 2, resource_names 3, type_url 4, nonce 5.
pub(crate) fn sotw_request(
    type_url: &str,
    version: &str,
    nonce: &str,
    names: &Bytes,
    node: Option<&Bytes>,
) -> Bytes {
    let mut buf = BytesMut::with_capacity(names.len() + 200);
    put_str(&mut buf, 1, version);
    if let Some(n) = node {
        put_message(&mut buf, 2, n);
    }
    buf.put_slice(names);
    put_str(&mut buf, 4, type_url);
    put_str(&mut buf, 5, nonce);
    buf.freeze()
}

/// A `DeltaDiscoveryRequest`: node 1, type_url 2, subscribe 3, unsubscribe 4, nonce 6.
pub(crate) fn delta_request(
    type_url: &str,
    nonce: &str,
    subscribe: &Bytes,
    unsubscribe: &Bytes,
    node: Option<&Bytes>,
) -> Bytes {
    let mut buf = BytesMut::with_capacity(subscribe.len() + unsubscribe.len() + 200);
    if let Some(n) = node {
        put_message(&mut buf, 1, n);
    }
    put_str(&mut buf, 2, type_url);
    buf.put_slice(subscribe);
    buf.put_slice(unsubscribe);
    put_str(&mut buf, 6, nonce);
    buf.freeze()
}

/// A response, SotW or delta, with its resources left as bytes.
#[derive(Debug, Default)]
pub(crate) struct Response {
    pub type_url: String,
    pub version: String,
    pub nonce: String,
    /// SotW: each `Any`; delta: each `Resource`.
    pub resources: Vec<Bytes>,
    /// Delta only.
    pub removed: Vec<String>,
    /// Size of the message on the wire.
    pub len: usize,
}

/// Why a message could not be read.
#[derive(Debug)]
pub(crate) struct WireError(String);

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<prost::DecodeError> for WireError {
    fn from(e: prost::DecodeError) -> Self {
        Self(e.to_string())
    }
}

fn read_len_delimited(buf: &mut Bytes) -> Result<Bytes, WireError> {
    let len = decode_varint(buf)? as usize;
    if len > buf.remaining() {
        return Err(WireError("length past the end".into()));
    }
    Ok(buf.split_to(len))
}

fn skip(wire: WireType, buf: &mut Bytes) -> Result<(), WireError> {
    match wire {
        WireType::Varint => {
            decode_varint(buf)?;
        }
        WireType::SixtyFourBit => buf.advance(8.min(buf.remaining())),
        WireType::ThirtyTwoBit => buf.advance(4.min(buf.remaining())),
        WireType::LengthDelimited => {
            read_len_delimited(buf)?;
        }
        _ => return Err(WireError("group wire type".into())),
    }
    Ok(())
}

fn string(b: Bytes) -> String {
    String::from_utf8_lossy(&b).into_owned()
}

impl Response {
    /// Parses a SotW (`delta == false`) or delta response.
    pub(crate) fn parse(mut buf: Bytes, delta: bool) -> Result<Self, WireError> {
        let mut r = Response {
            len: buf.len(),
            ..Default::default()
        };
        // SotW: version_info 1, resources 2, type_url 4, nonce 5.
        // Delta: system_version_info 1, resources 2, type_url 4, nonce 5, removed_resources 6.
        while buf.has_remaining() {
            let (tag, wire) = decode_key(&mut buf)?;
            match (tag, wire) {
                (1, WireType::LengthDelimited) => r.version = string(read_len_delimited(&mut buf)?),
                (2, WireType::LengthDelimited) => r.resources.push(read_len_delimited(&mut buf)?),
                (4, WireType::LengthDelimited) => {
                    r.type_url = string(read_len_delimited(&mut buf)?)
                }
                (5, WireType::LengthDelimited) => r.nonce = string(read_len_delimited(&mut buf)?),
                (6, WireType::LengthDelimited) if delta => {
                    r.removed.push(string(read_len_delimited(&mut buf)?))
                }
                (_, wire) => skip(wire, &mut buf)?,
            }
        }
        Ok(r)
    }

    /// The name of resource `i`: delta `Resource.name` (3), or for SotW field 1 of the message in
    /// the `Any` (every Envoy resource type keeps its name there).
    pub(crate) fn name(&self, i: usize, delta: bool) -> Option<String> {
        let mut buf = self.resources.get(i)?.clone();
        if delta {
            return field_string(&mut buf, 3);
        }
        let mut value = field_bytes(&mut buf, 2)?;
        field_string(&mut value, 1)
    }

    /// Resource `i` as (name, encoded resource message): the `Any`'s value, for SotW the `Any`
    /// itself and for delta the `Resource.resource` (2) field's.
    pub(crate) fn resource(&self, i: usize, delta: bool) -> Option<(String, Bytes)> {
        let name = self.name(i, delta)?;
        let mut buf = self.resources.get(i)?.clone();
        let mut any = if delta {
            field_bytes(&mut buf, 2)?
        } else {
            buf
        };
        Some((name, field_bytes(&mut any, 2)?))
    }

    /// Every resource name, in order.
    pub(crate) fn names(&self, delta: bool) -> Vec<String> {
        (0..self.resources.len())
            .filter_map(|i| self.name(i, delta))
            .collect()
    }
}

fn field_bytes(buf: &mut Bytes, want: u32) -> Option<Bytes> {
    while buf.has_remaining() {
        let (tag, wire) = decode_key(buf).ok()?;
        if tag == want && wire == WireType::LengthDelimited {
            return read_len_delimited(buf).ok();
        }
        skip(wire, buf).ok()?;
    }
    None
}

fn field_string(buf: &mut Bytes, want: u32) -> Option<String> {
    field_bytes(buf, want).map(string)
}

/// Requests are pre-encoded `Bytes`; responses are [`Response`]s.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawCodec {
    pub delta: bool,
}

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Response;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder { delta: self.delta }
    }
}

#[derive(Debug)]
pub(crate) struct RawEncoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

#[derive(Debug)]
pub(crate) struct RawDecoder {
    delta: bool,
}

impl Decoder for RawDecoder {
    type Item = Response;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Response>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        Response::parse(bytes, self.delta)
            .map(Some)
            .map_err(|e| Status::internal(format!("bad response: {e}")))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::service::discovery::v3::{
        DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
        Resource as DeltaResource,
    };
    use envoy_types::pb::google::protobuf::Any;
    use prost::Message;

    use super::*;

    fn any_cluster(name: &str) -> Any {
        Any {
            type_url: CDS.into(),
            value: Cluster {
                name: name.into(),
                alt_stat_name: "x".into(),
                ..Default::default()
            }
            .encode_to_vec(),
        }
    }

    #[test]
    fn hand_encoded_requests_decode_as_the_real_messages() {
        let names = encode_names(3, &["a".into(), "b".into()]);
        let node = node("load-1");
        let r =
            DiscoveryRequest::decode(sotw_request(EDS, "v1", "n1", &names, Some(&node))).unwrap();
        assert_eq!(r.resource_names, ["a", "b"]);
        assert_eq!(
            (r.version_info.as_str(), r.response_nonce.as_str()),
            ("v1", "n1")
        );
        assert_eq!(r.type_url, EDS);
        assert_eq!(r.node.unwrap().id, "load-1");
        let unsub = encode_names(4, &["c".into()]);
        let d =
            DeltaDiscoveryRequest::decode(delta_request(CDS, "n2", &names, &unsub, None)).unwrap();
        assert_eq!(d.resource_names_subscribe, ["a", "b"]);
        assert_eq!(d.resource_names_unsubscribe, ["c"]);
        assert_eq!(d.response_nonce, "n2");
        assert!(d.node.is_none());
    }

    #[test]
    fn responses_parse_with_names_read_lazily() {
        let sotw = DiscoveryResponse {
            version_info: "v".into(),
            resources: vec![any_cluster("c1"), any_cluster("c2")],
            type_url: CDS.into(),
            nonce: "n".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let r = Response::parse(Bytes::from(sotw.clone()), false).unwrap();
        assert_eq!(
            (r.version.as_str(), r.nonce.as_str(), r.type_url.as_str()),
            ("v", "n", CDS)
        );
        assert_eq!(r.names(false), ["c1", "c2"]);
        let (name, value) = r.resource(1, false).unwrap();
        assert_eq!(name, "c2");
        assert_eq!(Cluster::decode(value).unwrap().name, "c2");
        assert_eq!(r.len, sotw.len());
        let delta = DeltaDiscoveryResponse {
            system_version_info: "sv".into(),
            resources: vec![DeltaResource {
                name: "c3".into(),
                version: "1".into(),
                resource: Some(any_cluster("c3")),
                ..Default::default()
            }],
            removed_resources: vec!["gone".into()],
            type_url: CDS.into(),
            nonce: "dn".into(),
            ..Default::default()
        }
        .encode_to_vec();
        let r = Response::parse(Bytes::from(delta), true).unwrap();
        assert_eq!(r.names(true), ["c3"]);
        let (name, value) = r.resource(0, true).unwrap();
        assert_eq!(name, "c3");
        assert_eq!(Cluster::decode(value).unwrap().alt_stat_name, "x");
        assert_eq!(r.removed, ["gone"]);
        assert!(Response::parse(Bytes::from_static(&[0x12, 0x50, 1]), false).is_err());
    }
}
