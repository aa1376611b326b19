//! The fake Consul's answers in Consul's JSON shapes, written out field by field, independently of
//! the client's parser, so a shape mistake on either side shows. Go's `null` for empty slices and
//! maps included.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::state::{Catalog, InstanceRecord, NodeRecord};

impl Catalog {
    /// `/v1/catalog/services`.
    pub(super) fn services_json(&self) -> Value {
        let mut out: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for inst in self.instances.values() {
            out.entry(&inst.service)
                .or_default()
                .extend(inst.tags.iter().map(String::as_str));
        }
        json!(out)
    }

    /// `/v1/health/service/<name>`.
    pub(super) fn health_json(&self, service: &str) -> Value {
        let entries: Vec<Value> = self
            .instances
            .values()
            .filter(|i| i.service == service)
            .filter_map(|i| Some(self.entry_json(i, self.nodes.get(&i.node)?)))
            .collect();
        Value::Array(entries)
    }

    fn entry_json(&self, i: &InstanceRecord, node: &NodeRecord) -> Value {
        let index = self.health_index(&i.service);
        let svc_addr = if i.address.is_empty() {
            &node.address
        } else {
            &i.address
        };
        let mut service = json!({
            "ID": i.id,
            "Service": i.service,
            "Tags": null_if_empty(json!(i.tags), i.tags.is_empty()),
            "Address": i.address,
            "TaggedAddresses": {
                "lan_ipv4": {"Address": svc_addr, "Port": i.port},
                "wan_ipv4": {"Address": svc_addr, "Port": i.port},
            },
            "Meta": null_if_empty(json!(i.meta), i.meta.is_empty()),
            "Port": i.port,
            "Weights": {"Passing": i.weights.0, "Warning": i.weights.1},
            "EnableTagOverride": false,
            "Proxy": {"Mode": "", "MeshGateway": {}, "Expose": {}},
            "Connect": {},
            "PeerName": "",
            "CreateIndex": index,
            "ModifyIndex": index,
        });
        if !i.kind.is_empty() {
            service["Kind"] = json!(i.kind);
        }
        let mut checks: Vec<Value> = node
            .checks
            .iter()
            .map(|(id, status)| check_json(&i.node, id, status, None, index))
            .collect();
        checks.extend(
            i.checks
                .iter()
                .map(|(id, status)| check_json(&i.node, id, status, Some(i), index)),
        );
        json!({
            "Node": {
                "ID": format!("00000000-0000-4000-8000-{:012x}", fxhash(&i.node)),
                "Node": i.node,
                "Address": node.address,
                "Datacenter": node.datacenter,
                "TaggedAddresses": {
                    "lan": node.address, "lan_ipv4": node.address,
                    "wan": node.address, "wan_ipv4": node.address,
                },
                "Meta": node.meta,
                "CreateIndex": index,
                "ModifyIndex": index,
            },
            "Service": service,
            "Checks": checks,
        })
    }
}

fn check_json(
    node: &str,
    id: &str,
    status: &str,
    svc: Option<&InstanceRecord>,
    index: u64,
) -> Value {
    let name = match (id, svc) {
        ("serfHealth", _) => "Serf Health Status".to_string(),
        (_, Some(s)) => format!("Service '{}' check", s.service),
        _ => id.to_string(),
    };
    json!({
        "Node": node,
        "CheckID": id,
        "Name": name,
        "Status": status,
        "Notes": "",
        "Output": "",
        "ServiceID": svc.map(|s| s.id.as_str()).unwrap_or(""),
        "ServiceName": svc.map(|s| s.service.as_str()).unwrap_or(""),
        "ServiceTags": svc.map(|s| s.tags.clone()).unwrap_or_default(),
        "Type": if svc.is_some() { "ttl" } else { "" },
        "Interval": "",
        "Timeout": "",
        "ExposedPort": 0,
        "Definition": {},
        "CreateIndex": index,
        "ModifyIndex": index,
    })
}

/// Go encodes a nil slice or map as `null`; Consul answers that way for instances registered
/// without tags or meta.
fn null_if_empty(v: Value, empty: bool) -> Value {
    if empty { Value::Null } else { v }
}

/// A stable number from a name, for node ids.
fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    }) & 0xffff_ffff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::fake::state::tests::web;
    use crate::consul::wire;

    #[test]
    fn json_parses_with_the_client_and_has_consuls_shape() {
        let mut c = Catalog::new("dc1");
        c.upsert(web("w1", 80));
        let body = serde_json::to_vec(&c.health_json("web")).unwrap();
        let entries = wire::parse_health(&body).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].service.port, 80);
        assert_eq!(entries[0].checks.len(), 2, "node check + service check");
        let raw = c.health_json("web");
        assert!(raw[0]["Service"]["Meta"].is_null(), "Go nil map");
        assert!(raw[0]["Service"].get("Kind").is_none(), "omitempty");
        let list =
            wire::parse_service_list(&serde_json::to_vec(&c.services_json()).unwrap()).unwrap();
        assert_eq!(list.keys().collect::<Vec<_>>(), ["consul", "web"]);
        assert_eq!(list["web"], ["v1"]);
    }
}
