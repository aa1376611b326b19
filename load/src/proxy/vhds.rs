//! A simulated delta proxy that takes its virtual hosts over VHDS, as Envoy does with tributary's
//! `TRIBUTARY_VHDS` node metadata (`docs/architecture.md`, "Route configurations for delta
//! clients"): after its first route configuration it subscribes to `VirtualHost` once, with a
//! wildcard, and acknowledges every virtual host response. It holds its full config once it has
//! had one.

use bytes::{BufMut, Bytes, BytesMut};
use prost::encoding::{WireType, encode_key, encode_varint};

use super::State;
use crate::wire::{self, Response};

/// The VHDS type.
pub(crate) const VHDS: &str = "type.googleapis.com/envoy.config.route.v3.VirtualHost";
/// tributary's opt-in node metadata key.
const VHDS_KEY: &str = "TRIBUTARY_VHDS";

/// What a VHDS proxy tracks beyond the four types.
#[derive(Debug, Default)]
pub(super) struct Vhds {
    /// The wildcard subscription went out.
    asked: bool,
    /// A virtual host response arrived.
    got: bool,
    /// Bytes of virtual host responses received (they only add up: each carries a few).
    bytes: usize,
}

fn put_len(buf: &mut BytesMut, tag: u32, len: usize) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(len as u64, buf);
}

/// [`wire::node`] with metadata `{TRIBUTARY_VHDS: true}`: `Node.metadata` (3) is a `Struct` whose
/// `fields` (1) map entry has key (1) and a `Value` (2) with `bool_value` (4).
pub(super) fn node(id: &str) -> Bytes {
    let value = [0x20, 0x01]; // bool_value = true
    let mut entry = BytesMut::new();
    put_len(&mut entry, 1, VHDS_KEY.len());
    entry.put_slice(VHDS_KEY.as_bytes());
    put_len(&mut entry, 2, value.len());
    entry.put_slice(&value);
    let mut metadata = BytesMut::new();
    put_len(&mut metadata, 1, entry.len());
    metadata.put_slice(&entry);
    let mut buf = BytesMut::from(&wire::node(id)[..]);
    put_len(&mut buf, 3, metadata.len());
    buf.put_slice(&metadata);
    buf.freeze()
}

impl State {
    /// After a route configuration response: the first one starts the VHDS subscription.
    pub(super) async fn after_routes(&mut self) -> Result<(), String> {
        let Some(v) = self.vhds.as_mut().filter(|v| !v.asked) else {
            return Ok(());
        };
        v.asked = true;
        let empty = Bytes::new();
        self.send(wire::delta_request(VHDS, "", &empty, &empty, None))
            .await
    }

    /// A virtual host response: acknowledged, counted in the config held.
    pub(super) async fn on_virtual_hosts(&mut self, r: &Response) -> Result<(), String> {
        if let Some(v) = self.vhds.as_mut() {
            v.got = true;
            v.bytes += r.len;
        }
        let empty = Bytes::new();
        self.send(wire::delta_request(VHDS, &r.nonce, &empty, &empty, None))
            .await
    }

    /// Whether the virtual hosts are in too (always, for a proxy without VHDS), and their bytes.
    pub(super) fn virtual_hosts_held(&self) -> (bool, usize) {
        self.vhds.as_ref().map_or((true, 0), |v| (v.got, v.bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_metadata_asks_for_vhds() {
        use envoy_types::pb::envoy::config::core::v3::Node;
        use envoy_types::pb::google::protobuf::value::Kind;
        use prost::Message;
        let n = Node::decode(node("p-1")).unwrap();
        assert_eq!(n.id, "p-1");
        assert_eq!(n.cluster, "load");
        let fields = n.metadata.unwrap().fields;
        assert_eq!(
            fields.get(VHDS_KEY).and_then(|v| v.kind.clone()),
            Some(Kind::BoolValue(true))
        );
    }
}
