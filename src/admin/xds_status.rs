//! The admin's view of the xDS server's connections, in istiod's `/debug/syncz` and `/debug/adsz`
//! shapes (docs/ecosystem.md §1.2).

use serde_json::{Value, json};

use super::{ProxyView, TypeView, XdsStatus, proxy_id_matches};
use crate::envoy::ResourceType;
use crate::xds::{ConnectionInfo, Connections};

impl XdsStatus for Connections {
    fn syncz(&self) -> Value {
        let rows: Vec<Value> = self.list().iter().map(sync_row).collect();
        json!(rows)
    }

    fn adsz(&self, proxy_id: Option<&str>) -> Value {
        let conns: Vec<ConnectionInfo> = match proxy_id {
            Some(id) => self
                .list()
                .into_iter()
                .filter(|c| proxy_id_matches(&c.node_id, id))
                .collect(),
            None => self.list(),
        };
        let clients: Vec<Value> = conns
            .iter()
            .map(|c| {
                let watches: serde_json::Map<String, Value> = c
                    .types
                    .iter()
                    .filter(|(_, t)| t.requested)
                    .map(|(ty, t)| {
                        let mut names: Vec<String> =
                            t.names.iter().map(|n| n.to_string()).collect();
                        if t.wildcard {
                            names.insert(0, "*".to_string());
                        }
                        (ty.type_url().to_string(), json!(names))
                    })
                    .collect();
                json!({
                    "connectionId": c.id,
                    "node": c.node_id,
                    "cluster": c.cluster,
                    "connectedAt": timestamp(Some(c.connected_at)),
                    "address": c.peer.map(|p| p.to_string()),
                    "listenerAddress": c.listener_address.map(|a| a.to_string()),
                    "delta": c.delta,
                    "watches": watches,
                })
            })
            .collect();
        json!({ "totalClients": conns.len(), "clients": clients })
    }

    fn push_all(&self) -> usize {
        Connections::push_all(self)
    }

    fn proxy(&self, proxy_id: &str) -> Option<ProxyView> {
        let newest = self
            .list()
            .into_iter()
            .filter(|c| proxy_id_matches(&c.node_id, proxy_id))
            .max_by_key(|c| c.connected_at)?;
        Some(ProxyView {
            view: newest.view,
            delta: newest.delta,
            types: newest
                .types
                .iter()
                .map(|(ty, t)| {
                    let view = TypeView {
                        requested: t.requested,
                        wildcard: t.wildcard,
                        names: t.names.iter().cloned().collect(),
                        sent_version: t.sent_version.as_deref().map(str::to_owned),
                        sent_at: t.sent_at,
                    };
                    (*ty, view)
                })
                .collect(),
        })
    }
}

/// One `/debug/syncz` row: istiod's `SyncStatus` fields plus per-type detail.
fn sync_row(c: &ConnectionInfo) -> Value {
    let mut row = serde_json::Map::new();
    row.insert("cluster_id".into(), json!(c.cluster));
    row.insert("proxy".into(), json!(c.node_id));
    row.insert("connection_id".into(), json!(c.id));
    row.insert(
        "protocol".into(),
        json!(if c.delta { "delta" } else { "sotw" }),
    );
    let mut resources = serde_json::Map::new();
    for (ty, t) in &c.types {
        if (ty.is_mcp() || *ty == ResourceType::VirtualHost) && !t.requested {
            // Only istiod asks for MCP collections, and only VHDS Envoys for virtual hosts: other
            // rows stay as they were.
            continue;
        }
        let prefix = match ty.short() {
            "cds" => "cluster",
            "eds" => "endpoint",
            "lds" => "listener",
            "rds" => "route",
            other => other,
        };
        row.insert(format!("{prefix}_sent"), json!(t.sent_nonce));
        row.insert(format!("{prefix}_acked"), json!(t.acked_nonce));
        resources.insert(
            ty.type_url().to_string(),
            json!({
                "status": t.status().to_string(),
                "sent": t.sent_nonce,
                "acked": t.acked_nonce,
                "sentVersion": t.sent_version,
                "sentTime": timestamp(t.sent_at),
                "lastError": t.last_error,
            }),
        );
    }
    row.insert("resources".into(), Value::Object(resources));
    Value::Object(row)
}

fn timestamp(t: Option<std::time::SystemTime>) -> Value {
    t.map(|t| json!(humantime::format_rfc3339_millis(t).to_string()))
        .unwrap_or(Value::Null)
}
