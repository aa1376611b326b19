//! What the server keeps about the node at the other end of a stream, and the checks on it.
//!
//! Node metadata is untrusted input (SEC-12): it is bounded in size and depth before anything is
//! kept, and the one key that selects config here, `LISTENER_ADDRESS`, must parse as an IP address.

use std::net::IpAddr;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use prost::Message;

use tributary_registries::Locality;

use crate::snapshot::{LocalityId, MAX_PROXY_LOCALITIES, View};

/// Metadata key through which a node chooses the address its listeners bind to (an IP string).
pub const LISTENER_ADDRESS_KEY: &str = "LISTENER_ADDRESS";

/// Metadata key through which an Envoy on delta xDS asks for its virtual hosts over VHDS (`true`
/// or `"true"`): Envoy accepts VHDS on the delta ADS stream only since 2026 (before, it NACKs such
/// route configurations), so it is opt-in (`docs/architecture.md`).
pub const VHDS_KEY: &str = "TRIBUTARY_VHDS";

/// Metadata key Istio's agent sets to `"grpc"` in the bootstrap of proxyless gRPC clients.
pub(super) const GENERATOR_KEY: &str = "GENERATOR";

/// How every gRPC implementation's xDS client starts its `user_agent_name` ("gRPC C-core",
/// "gRPC Go", "gRPC Java", "gRPC Node Pure JS", ...), compared without case.
const GRPC_USER_AGENT_PREFIX: &str = "grpc";

/// Largest encoded node metadata accepted. Istio sidecars send a few KB; 64 KiB leaves room for
/// generous labels and annotations while keeping per-stream memory small (SEC-12).
pub(super) const MAX_METADATA_BYTES: usize = 64 * 1024;

/// Deepest nesting of metadata values accepted. Real metadata is 2–4 levels; anything deeper is
/// garbage or an attempt to make debug rendering recurse (SEC-12).
pub(super) const MAX_METADATA_DEPTH: usize = 16;

/// Longest node id / cluster accepted. Istio ids are `sidecar~ip~pod.ns~ns.svc.cluster.local`,
/// well under this.
pub(super) const MAX_NODE_ID_BYTES: usize = 1024;

/// Why a node was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NodeError {
    /// The first request carried no node.
    #[error("missing node information: the first request on a stream must carry a node")]
    Missing,
    /// The node id is empty.
    #[error("missing node id: the first request on a stream must carry a node with a non-empty id")]
    EmptyId,
    /// The id or cluster is longer than `MAX_NODE_ID_BYTES`.
    #[error("node {field} is {len} bytes, over the {MAX_NODE_ID_BYTES}-byte limit")]
    TooLong {
        /// `id` or `cluster`.
        field: &'static str,
        /// Its length.
        len: usize,
    },
    /// The metadata is larger than `MAX_METADATA_BYTES`.
    #[error("node metadata is {0} bytes encoded, over the {MAX_METADATA_BYTES}-byte limit")]
    MetadataTooLarge(usize),
    /// The metadata nests deeper than `MAX_METADATA_DEPTH`.
    #[error("node metadata nests deeper than {MAX_METADATA_DEPTH} levels")]
    MetadataTooDeep,
    /// `LISTENER_ADDRESS` is not an IP address string.
    #[error("node metadata {LISTENER_ADDRESS_KEY} must be an IP address string, got {0}")]
    BadListenerAddress(String),
    /// `TRIBUTARY_VHDS` is neither a boolean nor `"true"`/`"false"`.
    #[error("node metadata {VHDS_KEY} must be true or false, got {0}")]
    BadVhds(String),
}

/// The node of one stream, as given on its first request.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// `node.id`.
    pub id: Arc<str>,
    /// `node.cluster`.
    pub cluster: Arc<str>,
    /// `node.metadata`, bounded, for debug views and config dumps.
    pub metadata: Option<Arc<Struct>>,
    /// Where this node's listeners bind; `None` = the default `0.0.0.0`.
    pub listener_address: Option<IpAddr>,
    /// Whether the node is a proxyless gRPC client (its `user_agent_name` starts with `gRPC`, or
    /// metadata `GENERATOR` is `grpc`): its LDS is API listeners (PG-4).
    pub proxyless: bool,
    /// `node.locality`, interned; `None` when unset or empty. Selects the node's EDS variant
    /// when a DestinationRule has a `localityLbSetting`.
    pub locality: Option<LocalityId>,
}

impl NodeInfo {
    /// Validates the node of a stream's first request.
    pub fn from_first(node: Option<&Node>) -> Result<Self, NodeError> {
        let node = node.ok_or(NodeError::Missing)?;
        if node.id.is_empty() {
            return Err(NodeError::EmptyId);
        }
        for (field, value) in [("id", &node.id), ("cluster", &node.cluster)] {
            if value.len() > MAX_NODE_ID_BYTES {
                return Err(NodeError::TooLong {
                    field,
                    len: value.len(),
                });
            }
        }
        let listener_address = match &node.metadata {
            Some(md) => {
                let len = md.encoded_len();
                if len > MAX_METADATA_BYTES {
                    return Err(NodeError::MetadataTooLarge(len));
                }
                if struct_depth(md, 1) > MAX_METADATA_DEPTH {
                    return Err(NodeError::MetadataTooDeep);
                }
                wants_vhds(md)?;
                listener_address(md)?
            }
            None => None,
        };
        Ok(Self {
            id: Arc::from(node.id.as_str()),
            cluster: Arc::from(node.cluster.as_str()),
            metadata: node.metadata.clone().map(Arc::new),
            listener_address,
            proxyless: is_proxyless(node),
            locality: node_locality(node),
        })
    }

    /// The snapshot view this node sees.
    pub fn view(&self) -> View {
        match (self.locality, self.proxyless) {
            (Some(locality), proxyless) => View::Located {
                bind: self.listener_address,
                proxyless,
                locality,
            },
            (None, true) => View::Proxyless,
            (None, false) => View::bound(self.listener_address),
        }
    }

    /// The snapshot view of this node on a stream of the given protocol: an Envoy that asked for
    /// VHDS ([`VHDS_KEY`]) gets it on delta streams only (VHDS is delta-only).
    pub fn view_for(&self, delta: bool) -> View {
        let vhds = delta
            && !self.proxyless
            && self
                .metadata
                .as_deref()
                .is_some_and(|md| wants_vhds(md).unwrap_or(false));
        if !vhds {
            return self.view();
        }
        View::Vhds {
            bind: self.listener_address,
            locality: self.locality,
        }
    }

    /// Whether a node sent on a later request is the same node (SOTW-3): same id, cluster and
    /// metadata. Metadata is compared only when present, so a node resent in full by an Envoy
    /// without `set_node_on_first_message_only` is the same node.
    pub fn same_as(&self, node: &Node) -> bool {
        *self.id == *node.id
            && *self.cluster == *node.cluster
            && match (&self.metadata, &node.metadata) {
                (Some(a), Some(b)) => **a == *b,
                (None, None) => true,
                _ => false,
            }
    }
}

/// Depth of the deepest value in `s`, iterating with an explicit stack (no recursion on input).
fn struct_depth(s: &Struct, base: usize) -> usize {
    let mut max = base;
    let mut stack: Vec<(&Value, usize)> = s.fields.values().map(|v| (v, base + 1)).collect();
    while let Some((v, depth)) = stack.pop() {
        max = max.max(depth);
        if max > MAX_METADATA_DEPTH {
            return max;
        }
        match &v.kind {
            Some(Kind::StructValue(inner)) => {
                stack.extend(inner.fields.values().map(|v| (v, depth + 1)));
            }
            Some(Kind::ListValue(list)) => stack.extend(list.values.iter().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    max
}

/// The node's locality, as istiod reads a proxy's locality from its node.
fn node_locality(node: &Node) -> Option<LocalityId> {
    let l = node.locality.as_ref()?;
    let locality = Locality {
        region: l.region.clone(),
        zone: l.zone.clone(),
        subzone: l.sub_zone.clone(),
    };
    if locality.is_empty() {
        return None;
    }
    let id = LocalityId::intern(locality);
    if id.is_none() {
        tracing::warn!(
            node = %node.id,
            limit = MAX_PROXY_LOCALITIES,
            "too many distinct proxy localities; this node gets the EDS of a node without one"
        );
    }
    id
}

/// Whether `node` is a proxyless gRPC client rather than an Envoy (PG-4).
fn is_proxyless(node: &Node) -> bool {
    let agent = node.user_agent_name.as_bytes();
    let by_agent = agent.len() >= GRPC_USER_AGENT_PREFIX.len()
        && agent[..GRPC_USER_AGENT_PREFIX.len()]
            .eq_ignore_ascii_case(GRPC_USER_AGENT_PREFIX.as_bytes());
    let by_metadata = node
        .metadata
        .as_ref()
        .and_then(|md| md.fields.get(GENERATOR_KEY))
        .is_some_and(
            |v| matches!(&v.kind, Some(Kind::StringValue(s)) if s.eq_ignore_ascii_case("grpc")),
        );
    by_agent || by_metadata
}

/// Metadata [`VHDS_KEY`]: absent is `false`.
fn wants_vhds(md: &Struct) -> Result<bool, NodeError> {
    match md.fields.get(VHDS_KEY).map(|v| &v.kind) {
        None => Ok(false),
        Some(Some(Kind::BoolValue(b))) => Ok(*b),
        Some(Some(Kind::StringValue(s))) if s == "true" => Ok(true),
        Some(Some(Kind::StringValue(s))) if s == "false" => Ok(false),
        Some(other) => Err(NodeError::BadVhds(format!("{other:.64?}"))),
    }
}

fn listener_address(md: &Struct) -> Result<Option<IpAddr>, NodeError> {
    let Some(value) = md.fields.get(LISTENER_ADDRESS_KEY) else {
        return Ok(None);
    };
    match &value.kind {
        Some(Kind::StringValue(s)) => match s.parse::<IpAddr>() {
            Ok(ip) if ip.is_unspecified() && ip.is_ipv4() => Ok(None),
            Ok(ip) => Ok(Some(ip)),
            Err(_) => Err(NodeError::BadListenerAddress(format!("{s:.64?}"))),
        },
        other => Err(NodeError::BadListenerAddress(format!("{other:.64?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(md: Option<Struct>) -> Node {
        Node {
            id: "n".into(),
            metadata: md,
            ..Default::default()
        }
    }

    fn string(s: &str) -> Value {
        Value {
            kind: Some(Kind::StringValue(s.into())),
        }
    }

    #[test]
    fn vhds_is_opt_in_delta_only_and_checked() {
        let mut md = Struct::default();
        let plain = NodeInfo::from_first(Some(&node(Some(md.clone())))).unwrap();
        assert_eq!(plain.view_for(true), View::Envoy);
        md.fields.insert(VHDS_KEY.into(), string("true"));
        md.fields
            .insert(LISTENER_ADDRESS_KEY.into(), string("127.0.0.2"));
        let info = NodeInfo::from_first(Some(&node(Some(md.clone())))).unwrap();
        let bind = Some("127.0.0.2".parse().unwrap());
        assert_eq!(
            info.view_for(true),
            View::Vhds {
                bind,
                locality: None
            }
        );
        assert_eq!(
            info.view_for(false),
            View::Bound("127.0.0.2".parse().unwrap())
        );
        md.fields.insert(
            VHDS_KEY.into(),
            Value {
                kind: Some(Kind::BoolValue(false)),
            },
        );
        let off = NodeInfo::from_first(Some(&node(Some(md.clone())))).unwrap();
        assert!(!off.view_for(true).vhds());
        md.fields.insert(VHDS_KEY.into(), string("yes"));
        assert!(matches!(
            NodeInfo::from_first(Some(&node(Some(md)))).unwrap_err(),
            NodeError::BadVhds(_)
        ));
    }

    #[test]
    fn missing_and_empty_id_are_refused() {
        assert_eq!(NodeInfo::from_first(None).unwrap_err(), NodeError::Missing);
        let n = Node::default();
        assert_eq!(
            NodeInfo::from_first(Some(&n)).unwrap_err(),
            NodeError::EmptyId
        );
    }

    #[test]
    fn listener_address_is_parsed_or_refused() {
        let mut md = Struct::default();
        md.fields
            .insert(LISTENER_ADDRESS_KEY.into(), string("127.0.0.2"));
        let info = NodeInfo::from_first(Some(&node(Some(md.clone())))).unwrap();
        assert_eq!(info.listener_address, Some("127.0.0.2".parse().unwrap()));
        md.fields
            .insert(LISTENER_ADDRESS_KEY.into(), string("0.0.0.0"));
        let info = NodeInfo::from_first(Some(&node(Some(md.clone())))).unwrap();
        assert_eq!(info.listener_address, None);
        md.fields
            .insert(LISTENER_ADDRESS_KEY.into(), string("not-an-ip"));
        let err = NodeInfo::from_first(Some(&node(Some(md)))).unwrap_err();
        assert!(err.to_string().contains(LISTENER_ADDRESS_KEY));
    }

    #[test]
    fn grpc_clients_are_told_from_envoy() {
        // PG-4: gRPC's user agent or Istio's GENERATOR metadata selects the proxyless view.
        let mut n = node(None);
        n.user_agent_name = "envoy".into();
        assert_eq!(NodeInfo::from_first(Some(&n)).unwrap().view(), View::Envoy);
        for agent in ["gRPC C-core", "gRPC Node Pure JS", "grpc-go"] {
            n.user_agent_name = agent.into();
            assert_eq!(
                NodeInfo::from_first(Some(&n)).unwrap().view(),
                View::Proxyless
            );
        }
        let mut md = Struct::default();
        md.fields.insert(GENERATOR_KEY.into(), string("grpc"));
        let n = node(Some(md));
        assert_eq!(
            NodeInfo::from_first(Some(&n)).unwrap().view(),
            View::Proxyless
        );
    }

    #[test]
    fn the_node_locality_selects_a_located_view() {
        let mut n = node(None);
        let located = |n: &Node| NodeInfo::from_first(Some(n)).unwrap().view();
        n.locality = Some(envoy_types::pb::envoy::config::core::v3::Locality::default());
        assert_eq!(located(&n), View::Envoy, "an empty locality is none");
        n.locality = Some(envoy_types::pb::envoy::config::core::v3::Locality {
            region: "us-east".into(),
            zone: "zone-a".into(),
            sub_zone: String::new(),
        });
        let View::Located {
            bind: None,
            proxyless: false,
            locality,
        } = located(&n)
        else {
            panic!("{:?}", located(&n));
        };
        assert_eq!(*locality.locality(), Locality::parse("us-east/zone-a"));
        assert_eq!(located(&n), located(&n), "one id per locality");
        assert_eq!(located(&n).without_locality(), View::Envoy);
    }

    #[test]
    fn deep_metadata_is_refused() {
        let mut v = string("x");
        for _ in 0..40 {
            let mut s = Struct::default();
            s.fields.insert("k".into(), v);
            v = Value {
                kind: Some(Kind::StructValue(s)),
            };
        }
        let mut md = Struct::default();
        md.fields.insert("deep".into(), v);
        assert_eq!(
            NodeInfo::from_first(Some(&node(Some(md)))).unwrap_err(),
            NodeError::MetadataTooDeep
        );
    }
}
