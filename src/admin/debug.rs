//! The `/debug/*` views, in istiod's shapes where one exists (docs/ecosystem.md §1.2).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::AdminState;

/// The handlers, for `/debug` and `/debug/list`.
pub(super) const HANDLERS: &[(&str, &str)] = &[
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
        "Connected proxies and their subscriptions; ?push=true pushes to all (when admin.allow_push)",
    ),
    (
        "/debug/config_dump",
        "What tributary sends a proxy, as an envoy.admin.v3.ConfigDump: ?proxyID=<node id or pod.namespace>[&types=cds,eds,lds,rds][&include_eds]",
    ),
];

/// `/debug/registryz`: registry status plus the merged services.
pub(super) fn registryz(state: &AdminState) -> Value {
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
/// or config source currently rejects (a ServiceEntry or VirtualService with a bad field, a
/// half-written file), with the registry, where the object came from, the field and why
/// (REG-11); plus `rules`: every DestinationRule and VirtualService served, merged from every
/// config source, each with its source and whole spec (`exportTo` and `workloadSelector`
/// included: stored and shown here, not applied).
pub(super) fn configz(state: &AdminState) -> Value {
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
        map.insert("rules".to_string(), json!(*state.rules.current()));
    }
    out
}

/// `/debug/endpointz`: hostname → shard (`<registry>/<cluster>`) → endpoints, like istiod's
/// `endpointShardz`.
pub(super) fn endpointz(state: &AdminState) -> Value {
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
pub(super) fn push_status(state: &AdminState) -> Value {
    let issues = state
        .store
        .load()
        .map(|s| (*s.issues).clone())
        .unwrap_or_default();
    json!({ "issues": issues })
}

/// An HTML index of the handlers, as istiod's `/debug`.
pub(super) fn index_html() -> String {
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
