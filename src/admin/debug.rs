//! The `/debug/*` views, in istiod's shapes where one exists (ecosystem.md §1.2).

use std::collections::BTreeMap;
use std::net::IpAddr;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use prost::Message;
use serde_json::{Value, json};

use super::AdminState;
use crate::envoy::{EncodedResource, ResourceType};

/// The handlers, for `/debug` and `/debug/list`.
pub const HANDLERS: &[(&str, &str)] = &[
    (
        "/debug/registryz",
        "Registries, their sync and health, and every merged service",
    ),
    (
        "/debug/endpointz",
        "Endpoints of every service, by registry/cluster shard",
    ),
    (
        "/debug/configz",
        "The effective configuration, and the config objects registries rejected",
    ),
    (
        "/debug/push_status",
        "Input that could not be turned into valid Envoy config",
    ),
    (
        "/debug/syncz",
        "Synchronization status of every connected proxy, per type",
    ),
    (
        "/debug/adsz",
        "Connected proxies and their subscriptions; ?push=true pushes to all",
    ),
    (
        "/debug/config_dump",
        "What tributary sends a proxy: ?proxyID=<node id>",
    ),
];

/// `/debug/registryz`: registry status plus the merged services.
pub fn registryz(state: &AdminState) -> Value {
    let view = state.registries.load();
    let services: Vec<Value> = state
        .store
        .load()
        .map(|s| {
            s.services
                .values()
                .map(|m| {
                    json!({
                        "hostname": m.service.hostname,
                        "ports": m.service.ports,
                        "clusterVIPs": m.service.vips,
                        "resolution": m.service.resolution,
                        "location": m.service.location,
                        "labels": m.service.labels,
                        "serviceAccounts": m.service.service_accounts,
                        "namespace": m.service.namespace,
                        "exportTo": m.service.export_to,
                        "origin": m.service.origin,
                        "registries": m.registries,
                        "endpoints": m.endpoints.len(),
                        "conflicts": m.conflicts,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    json!({ "serving": view.serving, "registries": view.registries, "services": services })
}

/// `/debug/configz`: the effective configuration, plus `rejected`: every config object a registry
/// currently rejects (a ServiceEntry with a bad field, a half-written file), with the registry,
/// where the object came from, the field and why (REG-11).
pub fn configz(state: &AdminState) -> Value {
    let view = state.registries.load();
    let rejected: Vec<Value> = view
        .registries
        .iter()
        .flat_map(|r| {
            r.rejected.iter().map(move |x| {
                json!({
                    "registry": r.id,
                    "object": x.object,
                    "source": x.source,
                    "field": x.field,
                    "message": x.message,
                    "servingPrevious": x.serving_previous,
                })
            })
        })
        .collect();
    let mut out = json!(*state.config);
    if let Value::Object(map) = &mut out {
        map.insert("rejected".to_string(), Value::Array(rejected));
    }
    out
}

/// `/debug/endpointz`: hostname → shard (`<registry>/<cluster>`) → endpoints, like istiod's
/// `endpointShardz`.
pub fn endpointz(state: &AdminState) -> Value {
    let mut out = BTreeMap::new();
    if let Some(s) = state.store.load() {
        for m in s.services.values() {
            let mut shards: BTreeMap<String, Vec<Value>> = BTreeMap::new();
            for e in &m.endpoints {
                let shard = format!("{}/{}", e.origin.registry, e.origin.cluster);
                shards.entry(shard).or_default().push(json!({
                    "address": e.address,
                    "ports": e.ports,
                    "labels": e.labels,
                    "locality": e.locality.to_string(),
                    "network": e.network,
                    "serviceAccount": e.service_account,
                    "health": e.health,
                    "weight": e.weight,
                }));
            }
            out.insert(m.service.hostname.to_string(), shards);
        }
    }
    json!(out)
}

/// `/debug/push_status`: current config issues, grouped the way istiod's push status is.
pub fn push_status(state: &AdminState) -> Value {
    let issues = state
        .store
        .load()
        .map(|s| (*s.issues).clone())
        .unwrap_or_default();
    json!({ "issues": issues })
}

/// `/debug/config_dump?proxyID=`: every resource of every type as that proxy sees it.
pub fn config_dump(state: &AdminState, bind: Option<IpAddr>) -> Value {
    let Some(snapshot) = state.store.load() else {
        return json!({ "error": "no snapshot yet: registries have not synced" });
    };
    let mut types = serde_json::Map::new();
    for ty in ResourceType::PUSH_ORDER {
        let set = snapshot.resources_for(ty, crate::snapshot::View::bound(bind));
        let resources: Vec<Value> = set
            .entries
            .values()
            .map(|e| {
                json!({
                    "name": e.resource.name,
                    "version": e.resource.version,
                    "size": e.resource.encoded_len(),
                    "config": describe(&e.resource),
                })
            })
            .collect();
        types.insert(
            ty.type_url().to_string(),
            json!({ "version_info": set.version.to_string(), "resources": resources }),
        );
    }
    Value::Object(types)
}

/// A readable rendering of a resource (protobuf debug form; envoy-types has no JSON mapping).
fn describe(r: &EncodedResource) -> String {
    let value = r.to_any().value;
    let text = match r.ty {
        ResourceType::Cluster => Cluster::decode(value.as_slice()).map(|m| format!("{m:?}")),
        ResourceType::Endpoint => {
            ClusterLoadAssignment::decode(value.as_slice()).map(|m| format!("{m:?}"))
        }
        ResourceType::Listener => Listener::decode(value.as_slice()).map(|m| format!("{m:?}")),
        ResourceType::Route => {
            RouteConfiguration::decode(value.as_slice()).map(|m| format!("{m:?}"))
        }
    };
    text.unwrap_or_else(|e| format!("<undecodable: {e}>"))
}

/// An HTML index of the handlers, as istiod's `/debug`.
pub fn index_html() -> String {
    let rows: String = HANDLERS
        .iter()
        .map(|(path, help)| {
            format!("<tr><td><a href=\"{path}\">{path}</a></td><td>{help}</td></tr>\n")
        })
        .collect();
    format!(
        "<!doctype html><html><head><title>tributary debug</title></head><body>\
         <h1>tributary debug console</h1><table>\n{rows}</table></body></html>\n"
    )
}
