//! The authenticated identity of a TLS peer and the check that binds a proxy's claimed node to it
//! (SEC-2, SEC-13).
//!
//! The identity is the SPIFFE URI SAN of the verified client certificate
//! (`spiffe://<trust domain>/ns/<namespace>/sa/<service account>` for Istio workloads). It is taken
//! once per connection, at the handshake, so it cannot change for the life of a stream (SEC-3).

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::google::protobuf::value::Kind;
use serde::{Deserialize, Serialize};

/// Node metadata key Istio proxies put their namespace under.
const NAMESPACE_KEY: &str = "NAMESPACE";
/// Node metadata key Istio proxies put their service account under.
const SERVICE_ACCOUNT_KEY: &str = "SERVICE_ACCOUNT";
/// Longest claimed value quoted back in an error (SEC-8).
const MAX_QUOTED: usize = 128;

/// How the claimed node identity is bound to the certificate's SPIFFE ID.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentityMapping {
    /// Istio's rule: the certificate is `spiffe://<td>/ns/<ns>/sa/<sa>`; the node's namespace
    /// (metadata `NAMESPACE`, else the `<pod>.<ns>` part of a `sidecar~ip~pod.ns~domain` id) must
    /// be `<ns>`, and metadata `SERVICE_ACCOUNT`, if given, must be `<sa>`.
    #[default]
    Istio,
    /// The node id must equal one of the certificate's SPIFFE IDs.
    NodeId,
    /// Any verified certificate may claim any node (authentication without authorization).
    None,
}

/// The SPIFFE IDs of a verified client certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerIdentity {
    /// `spiffe://` URI SANs, in certificate order.
    pub spiffe: Vec<String>,
}

/// Why a node may not use this connection.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    /// The certificate carries no SPIFFE URI SAN (of the configured trust domain).
    #[error("client certificate has no SPIFFE ID{0}")]
    NoSpiffe(String),
    /// The claimed node does not match the certificate.
    #[error("node {claimed:?} does not match certificate identity {identity}")]
    Mismatch {
        /// What the node claimed (truncated).
        claimed: String,
        /// The certificate's SPIFFE IDs.
        identity: String,
    },
}

/// The `spiffe://` URI SANs of a DER certificate; empty if it has none or does not parse.
pub fn spiffe_ids(der: &[u8]) -> Vec<String> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return Vec::new();
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::URI(u) if u.starts_with("spiffe://") => Some((*u).to_string()),
            _ => None,
        })
        .collect()
}

impl PeerIdentity {
    /// Checks that `node` may be served to this peer under `mapping` (SEC-2).
    pub fn authorize(
        &self,
        mapping: IdentityMapping,
        trust_domain: Option<&str>,
        node: &Node,
    ) -> Result<(), IdentityError> {
        let ids: Vec<&str> = self
            .spiffe
            .iter()
            .map(String::as_str)
            .filter(|id| trust_domain.is_none_or(|td| spiffe_parts(id).0 == td))
            .collect();
        if mapping == IdentityMapping::None {
            return Ok(());
        }
        if ids.is_empty() {
            return Err(IdentityError::NoSpiffe(match trust_domain {
                Some(td) => format!(" in trust domain {td:?}"),
                None => String::new(),
            }));
        }
        let ok = match mapping {
            IdentityMapping::None => true,
            IdentityMapping::NodeId => ids.contains(&node.id.as_str()),
            IdentityMapping::Istio => ids.iter().any(|id| istio_matches(id, node)),
        };
        match ok {
            true => Ok(()),
            false => Err(IdentityError::Mismatch {
                claimed: node.id.chars().take(MAX_QUOTED).collect(),
                identity: ids.join(","),
            }),
        }
    }
}

/// `(trust domain, path)` of a `spiffe://` URI.
fn spiffe_parts(id: &str) -> (&str, &str) {
    let rest = id.strip_prefix("spiffe://").unwrap_or(id);
    rest.split_once('/').unwrap_or((rest, ""))
}

fn istio_matches(id: &str, node: &Node) -> bool {
    let (_, path) = spiffe_parts(id);
    let Some(("ns", ns, "sa", sa)) = path
        .split_once('/')
        .and_then(|(a, r)| r.split_once('/').map(|(b, r)| (a, b, r)))
        .and_then(|(a, b, r)| r.split_once('/').map(|(c, d)| (a, b, c, d)))
    else {
        return false;
    };
    let claimed_ns = metadata_str(node, NAMESPACE_KEY).or_else(|| namespace_from_id(&node.id));
    if claimed_ns != Some(ns) {
        return false;
    }
    metadata_str(node, SERVICE_ACCOUNT_KEY).is_none_or(|claimed_sa| claimed_sa == sa)
}

fn metadata_str<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    match node.metadata.as_ref()?.fields.get(key)?.kind.as_ref()? {
        Kind::StringValue(s) => Some(s.as_str()),
        _ => None,
    }
}

/// The namespace in an Istio node id `type~ip~pod.namespace~domain`.
fn namespace_from_id(id: &str) -> Option<&str> {
    let parts: Vec<&str> = id.split('~').collect();
    match parts.as_slice() {
        [_, _, workload, _] => workload.rsplit_once('.').map(|(_, ns)| ns),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::google::protobuf::{Struct, Value};

    fn node(id: &str, meta: &[(&str, &str)]) -> Node {
        let fields = meta
            .iter()
            .map(|(k, v)| {
                let value = Value {
                    kind: Some(Kind::StringValue((*v).into())),
                };
                ((*k).to_string(), value)
            })
            .collect();
        Node {
            id: id.into(),
            metadata: (!meta.is_empty()).then_some(Struct { fields }),
            ..Default::default()
        }
    }

    fn peer(ids: &[&str]) -> PeerIdentity {
        PeerIdentity {
            spiffe: ids.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn istio_mapping_binds_namespace_and_service_account() {
        // SEC-2
        let p = peer(&["spiffe://cluster.local/ns/shop/sa/cart"]);
        let m = IdentityMapping::Istio;
        let ok = node("sidecar~10.0.0.1~cart-7d.shop~shop.svc.cluster.local", &[]);
        assert_eq!(p.authorize(m, None, &ok), Ok(()));
        let with_sa = node("x", &[("NAMESPACE", "shop"), ("SERVICE_ACCOUNT", "cart")]);
        assert_eq!(p.authorize(m, Some("cluster.local"), &with_sa), Ok(()));
        for bad in [
            node("sidecar~10.0.0.1~cart-7d.bank~bank.svc.cluster.local", &[]),
            node("x", &[("NAMESPACE", "shop"), ("SERVICE_ACCOUNT", "admin")]),
            node("plain-id", &[]),
        ] {
            assert!(matches!(
                p.authorize(m, None, &bad),
                Err(IdentityError::Mismatch { .. })
            ));
        }
        assert!(matches!(
            p.authorize(m, Some("other.td"), &ok),
            Err(IdentityError::NoSpiffe(_))
        ));
    }

    #[test]
    fn node_id_mapping_and_none() {
        // SEC-2
        let p = peer(&["spiffe://td/proxy-1"]);
        let n = node("spiffe://td/proxy-1", &[]);
        assert_eq!(p.authorize(IdentityMapping::NodeId, None, &n), Ok(()));
        let other = node("proxy-2", &[]);
        assert!(p.authorize(IdentityMapping::NodeId, None, &other).is_err());
        assert_eq!(p.authorize(IdentityMapping::None, None, &other), Ok(()));
        assert!(
            PeerIdentity::default()
                .authorize(IdentityMapping::NodeId, None, &n)
                .is_err()
        );
    }

    #[test]
    fn garbage_der_has_no_ids() {
        // SEC-12
        assert!(spiffe_ids(b"not a certificate").is_empty());
    }
}
