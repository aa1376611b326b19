//! Route configurations encoded to the same bytes every time.
//!
//! Versions are content hashes, so a resource must encode identically whenever its content is the
//! same. prost writes a protobuf map in the iteration order of its `HashMap`, which differs from
//! one map to the next as soon as it holds two keys. A route with both a fault and a CORS policy
//! has two per-filter configs, so route configurations holding such a route are written here by
//! hand: every field as prost writes it, except the routes' `typed_per_filter_config`, written in
//! key order. Protobuf parsers accept fields in any order, so the bytes still decode to the same
//! message; only repeated fields keep their relative order, as they do here.

use std::collections::BTreeMap;

use bytes::BufMut;
use envoy_types::pb::envoy::config::route::v3::{Route, RouteConfiguration, VirtualHost};
use envoy_types::pb::google::protobuf::Any;
use prost::encoding::{WireType, encode_key, encode_varint, message, string};
use prost::{DecodeError, Message};

/// `RouteConfiguration.virtual_hosts`.
const VIRTUAL_HOSTS_TAG: u32 = 2;
/// `VirtualHost.routes`.
const ROUTES_TAG: u32 = 3;
/// `Route.typed_per_filter_config`.
const PER_FILTER_CONFIG_TAG: u32 = 13;
/// A map entry's key and value.
const ENTRY_KEY_TAG: u32 = 1;
const ENTRY_VALUE_TAG: u32 = 2;

/// The encoded form of `config`, with per-filter config maps in key order.
pub(super) fn encode(mut config: RouteConfiguration) -> Encoded {
    if !config.virtual_hosts.iter().any(needs_sorting) {
        return Encoded(config.encode_to_vec());
    }
    let virtual_hosts = std::mem::take(&mut config.virtual_hosts);
    let mut buf = config.encode_to_vec();
    for vh in virtual_hosts {
        let bytes = if needs_sorting(&vh) {
            virtual_host(vh)
        } else {
            vh.encode_to_vec()
        };
        put_field(&mut buf, VIRTUAL_HOSTS_TAG, &bytes);
    }
    Encoded(buf)
}

fn needs_sorting(vh: &VirtualHost) -> bool {
    vh.routes
        .iter()
        .any(|r| r.typed_per_filter_config.len() > 1)
}

fn virtual_host(mut vh: VirtualHost) -> Vec<u8> {
    let routes = std::mem::take(&mut vh.routes);
    let mut buf = vh.encode_to_vec();
    for r in routes {
        put_field(&mut buf, ROUTES_TAG, &route(r));
    }
    buf
}

fn route(mut r: Route) -> Vec<u8> {
    let configs: BTreeMap<String, Any> = std::mem::take(&mut r.typed_per_filter_config)
        .into_iter()
        .collect();
    let mut buf = r.encode_to_vec();
    for (name, config) in &configs {
        let len = string::encoded_len(ENTRY_KEY_TAG, name)
            + message::encoded_len(ENTRY_VALUE_TAG, config);
        encode_key(PER_FILTER_CONFIG_TAG, WireType::LengthDelimited, &mut buf);
        encode_varint(len as u64, &mut buf);
        string::encode(ENTRY_KEY_TAG, name, &mut buf);
        message::encode(ENTRY_VALUE_TAG, config, &mut buf);
    }
    buf
}

fn put_field(buf: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(bytes.len() as u64, buf);
    buf.put_slice(bytes);
}

/// An already encoded message, handed to [`super::EncodedResource::encode`] as is.
#[derive(Debug, Default)]
pub(super) struct Encoded(Vec<u8>);

impl Encoded {
    /// Bytes already in canonical form (`vhds.rs` copies them out of an encoded one).
    pub(super) fn from_bytes(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }
}

impl Message for Encoded {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.0);
    }

    /// Only ever written: decoding into it skips every field.
    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl bytes::Buf,
        ctx: prost::encoding::DecodeContext,
    ) -> Result<(), DecodeError> {
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn any(type_url: &str, value: &[u8]) -> Any {
        Any {
            type_url: type_url.to_string(),
            value: value.to_vec(),
        }
    }

    fn config_with(map: HashMap<String, Any>) -> RouteConfiguration {
        RouteConfiguration {
            name: "80".into(),
            virtual_hosts: vec![
                VirtualHost {
                    name: "a".into(),
                    domains: vec!["a".into()],
                    routes: vec![
                        Route {
                            name: "plain".into(),
                            ..Default::default()
                        },
                        Route {
                            name: "both".into(),
                            typed_per_filter_config: map,
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                },
                VirtualHost {
                    name: "b".into(),
                    domains: vec!["b".into()],
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn two_per_filter_configs_encode_the_same_whatever_the_map_order() {
        let entries: Vec<(String, Any)> = (0..8)
            .map(|i| (format!("filter.{i}"), any(&format!("t/{i}"), &[i])))
            .collect();
        let forward: HashMap<String, Any> = entries.iter().cloned().collect();
        let backward: HashMap<String, Any> = entries.iter().rev().cloned().collect();
        let a = encode(config_with(forward.clone())).0;
        for _ in 0..16 {
            // Each new HashMap has its own random seed, so its iteration order varies.
            let fresh: HashMap<String, Any> = backward.clone().into_iter().collect();
            assert_eq!(encode(config_with(fresh)).0, a);
        }
        let decoded = RouteConfiguration::decode(a.as_slice()).unwrap();
        assert_eq!(
            decoded,
            config_with(forward),
            "same message, fields reordered"
        );
    }

    #[test]
    fn without_two_configs_it_is_prost_encoding() {
        let one: HashMap<String, Any> = [("f".to_string(), any("t", b"x"))].into();
        let config = config_with(one);
        assert_eq!(encode(config.clone()).0, config.encode_to_vec());
    }
}
