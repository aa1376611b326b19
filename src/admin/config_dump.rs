//! `/debug/config_dump?proxyID=`: what tributary sends one proxy, as an `envoy.admin.v3.ConfigDump`
//! in proto3 JSON, the shape Envoy's own `/config_dump` and istiod's debug endpoint print, so tools
//! that read those read this.
//!
//! Only what the proxy asked for is dumped: every resource of a wildcard subscription, else the
//! names it subscribed to, with the version and time of the last response of that type it was
//! sent. `types=` picks types (`cds,eds,lds,rds` or type URLs); without it the dump has clusters,
//! listeners and routes, plus endpoints with `include_eds` (as Envoy's admin).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::admin::v3::{
    ClustersConfigDump, ConfigDump, EndpointsConfigDump, ListenersConfigDump, RoutesConfigDump,
    clusters_config_dump, endpoints_config_dump, listeners_config_dump, routes_config_dump,
};
use envoy_types::pb::google::protobuf::{Any, Timestamp};
use prost::{Message, Name};

use crate::envoy::ResourceType;
use crate::envoy::json::{JsonError, to_json};
use crate::snapshot::{Snapshot, View};

/// Why a dump request cannot be answered as asked.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    /// `types=` names something that is not a served type.
    #[error(
        "unknown type {0:?} in types=; use a comma list of cds, eds, lds, rds or their type URLs"
    )]
    UnknownType(String),
    /// The JSON mapping failed (an internal error: every served type is in the descriptor set).
    #[error("cannot print the config dump as JSON: {0}")]
    Json(#[from] JsonError),
}

/// What was asked for: which types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpRequest {
    /// The types to include, in dump order.
    pub types: BTreeSet<ResourceType>,
}

impl DumpRequest {
    /// From the (decoded) query: `types=cds,lds,...` and `include_eds` (present, empty or `true`).
    pub fn from_query(q: &HashMap<String, String>) -> Result<Self, DumpError> {
        let types = match q.get("types").filter(|t| !t.trim().is_empty()) {
            Some(list) => list
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(parse_type)
                .collect::<Result<_, _>>()?,
            None => {
                let include_eds = q
                    .get("include_eds")
                    .is_some_and(|v| v.is_empty() || v == "true" || v == "1");
                ResourceType::PUSH_ORDER
                    .into_iter()
                    .filter(|t| include_eds || *t != ResourceType::Endpoint)
                    .collect()
            }
        };
        Ok(Self { types })
    }
}

fn parse_type(t: &str) -> Result<ResourceType, DumpError> {
    ResourceType::PUSH_ORDER
        .into_iter()
        .find(|ty| ty.short().eq_ignore_ascii_case(t) || ty.type_url() == t)
        .ok_or_else(|| DumpError::UnknownType(t.to_string()))
}

/// One connected proxy, as the config dump needs it.
#[derive(Debug, Clone)]
pub struct ProxyView {
    /// What the proxy sees of the snapshot (its listener bind address, or proxyless gRPC).
    pub view: View,
    /// Whether it speaks delta xDS (resource versions are then per resource).
    pub delta: bool,
    /// Per type: what it subscribed to and what it was last sent.
    pub types: Vec<(ResourceType, TypeView)>,
}

/// A proxy's subscription to one type.
#[derive(Debug, Clone, Default)]
pub struct TypeView {
    /// Whether the type was requested at all.
    pub requested: bool,
    /// Wildcard subscription.
    pub wildcard: bool,
    /// Names subscribed explicitly.
    pub names: BTreeSet<Arc<str>>,
    /// `version_info` of the last response of this type.
    pub sent_version: Option<String>,
    /// When it was sent.
    pub sent_at: Option<SystemTime>,
}

/// The dump as an `envoy.admin.v3.ConfigDump` message.
pub fn build(snapshot: &Snapshot, proxy: &ProxyView, request: &DumpRequest) -> ConfigDump {
    let mut configs = Vec::new();
    for ty in &request.types {
        let view = proxy
            .types
            .iter()
            .find(|(t, _)| t == ty)
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let type_version = view.sent_version.clone().unwrap_or_default();
        let last_updated = view.sent_at.map(timestamp);
        let resources = snapshot.resources_for(*ty, proxy.view);
        let mut items = Vec::new();
        if view.requested {
            for (name, entry) in &resources.entries {
                if !view.wildcard && !view.names.contains(name) {
                    continue;
                }
                let version = match proxy.delta {
                    true => entry.resource.version.to_string(),
                    false => type_version.clone(),
                };
                items.push((name.to_string(), version, entry.resource.to_any()));
            }
        }
        configs.push(section(*ty, type_version, last_updated, items));
    }
    ConfigDump { configs }
}

/// [`build`], printed as proto3 JSON.
pub fn render(
    snapshot: &Snapshot,
    proxy: &ProxyView,
    request: &DumpRequest,
) -> Result<String, DumpError> {
    let dump = build(snapshot, proxy, request);
    Ok(to_json(&dump)?.to_string())
}

/// One type's section: `(name, version, resource)` items.
fn section(
    ty: ResourceType,
    type_version: String,
    last_updated: Option<Timestamp>,
    items: Vec<(String, String, Any)>,
) -> Any {
    match ty {
        ResourceType::Cluster => pack(&ClustersConfigDump {
            version_info: type_version,
            dynamic_active_clusters: items
                .into_iter()
                .map(|(_, version, any)| clusters_config_dump::DynamicCluster {
                    version_info: version,
                    cluster: Some(any),
                    last_updated,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        ResourceType::Endpoint => pack(&EndpointsConfigDump {
            dynamic_endpoint_configs: items
                .into_iter()
                .map(
                    |(_, version, any)| endpoints_config_dump::DynamicEndpointConfig {
                        version_info: version,
                        endpoint_config: Some(any),
                        last_updated,
                        ..Default::default()
                    },
                )
                .collect(),
            ..Default::default()
        }),
        ResourceType::Listener => pack(&ListenersConfigDump {
            version_info: type_version,
            dynamic_listeners: items
                .into_iter()
                .map(
                    |(name, version, any)| listeners_config_dump::DynamicListener {
                        name,
                        active_state: Some(listeners_config_dump::DynamicListenerState {
                            version_info: version,
                            listener: Some(any),
                            last_updated,
                        }),
                        ..Default::default()
                    },
                )
                .collect(),
            ..Default::default()
        }),
        ResourceType::Route => pack(&RoutesConfigDump {
            dynamic_route_configs: items
                .into_iter()
                .map(|(_, version, any)| routes_config_dump::DynamicRouteConfig {
                    version_info: version,
                    route_config: Some(any),
                    last_updated,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }),
        // MCP collections are Istio config, not Envoy's, and VHDS virtual hosts show inside
        // Envoy's own route dump: `parse_type` never selects them, and this dump has no section
        // for them.
        ResourceType::VirtualHost
        | ResourceType::ServiceEntry
        | ResourceType::WorkloadEntry
        | ResourceType::DestinationRule
        | ResourceType::VirtualService => Any {
            type_url: ty.type_url().to_string(),
            value: Vec::new(),
        },
    }
}

fn pack<M: Message + Name>(m: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: m.encode_to_vec(),
    }
}

fn timestamp(t: SystemTime) -> Timestamp {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn default_types_leave_out_endpoints_unless_include_eds() {
        use ResourceType::*;
        let plain = DumpRequest::from_query(&query(&[])).unwrap();
        assert_eq!(plain.types, [Cluster, Listener, Route].into());
        let eds = DumpRequest::from_query(&query(&[("include_eds", "")])).unwrap();
        assert_eq!(eds.types, [Cluster, Endpoint, Listener, Route].into());
        let off = DumpRequest::from_query(&query(&[("include_eds", "false")])).unwrap();
        assert_eq!(off.types, plain.types);
    }

    #[test]
    fn types_take_short_names_and_type_urls_and_reject_others() {
        use ResourceType::*;
        let r = DumpRequest::from_query(&query(&[(
            "types",
            "eds, type.googleapis.com/envoy.config.cluster.v3.Cluster",
        )]))
        .unwrap();
        assert_eq!(r.types, [Cluster, Endpoint].into());
        let err = DumpRequest::from_query(&query(&[("types", "cds,sds")])).unwrap_err();
        assert!(err.to_string().contains("\"sds\""), "{err}");
    }
}
