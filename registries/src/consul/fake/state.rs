//! The fake Consul's catalog: nodes, service instances and checks, with Raft-like indexes, and
//! their JSON in Consul's shapes (written out field by field, independently of the client's
//! parser, so a shape mistake on either side shows).
//!
//! Indexes behave like Consul's: one counter moves on every write; the services list has its own
//! index (instance registrations and removals, not check changes); each service has the index of
//! its last change (instances, their checks, or a check of a node it runs on), kept after the
//! service is gone.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

/// The node the agent API registers on (the fake's "local agent").
pub const AGENT_NODE: &str = "fake-agent";

/// The first index handed out; Consul's indexes are never 0 once it has any data.
const FIRST_INDEX: u64 = 10;

/// A catalog node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecord {
    pub address: String,
    pub datacenter: String,
    pub meta: BTreeMap<String, String>,
    /// Node checks (`serfHealth`, `_node_maintenance`): id → status.
    pub checks: BTreeMap<String, String>,
}

/// A registered service instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceRecord {
    pub id: String,
    pub service: String,
    pub node: String,
    pub address: String,
    pub port: u16,
    pub tags: Vec<String>,
    pub meta: BTreeMap<String, String>,
    pub weights: (u32, u32),
    pub kind: String,
    /// Service checks: id → status.
    pub checks: BTreeMap<String, String>,
}

/// The whole catalog.
#[derive(Debug, Clone)]
pub struct Catalog {
    pub datacenter: String,
    pub index: u64,
    pub list_index: u64,
    pub service_index: BTreeMap<String, u64>,
    pub nodes: BTreeMap<String, NodeRecord>,
    /// (node, instance id) → instance.
    pub instances: BTreeMap<(String, String), InstanceRecord>,
}

impl Catalog {
    /// A catalog with the agent node and Consul's own `consul` service on it.
    pub fn new(datacenter: &str) -> Self {
        let mut c = Self {
            datacenter: datacenter.to_string(),
            index: FIRST_INDEX,
            list_index: FIRST_INDEX,
            service_index: BTreeMap::new(),
            nodes: BTreeMap::new(),
            instances: BTreeMap::new(),
        };
        c.ensure_node(AGENT_NODE, "127.0.0.1");
        c.upsert(InstanceRecord {
            id: "consul".into(),
            service: "consul".into(),
            node: AGENT_NODE.into(),
            address: String::new(),
            port: 8300,
            tags: Vec::new(),
            meta: BTreeMap::new(),
            weights: (1, 1),
            kind: String::new(),
            checks: BTreeMap::new(),
        });
        c
    }

    fn bump(&mut self) -> u64 {
        self.index += 1;
        self.index
    }

    /// Adds the node if missing, with a passing `serfHealth`.
    pub fn ensure_node(&mut self, name: &str, address: &str) {
        if !self.nodes.contains_key(name) {
            let dc = self.datacenter.clone();
            self.nodes.insert(
                name.to_string(),
                NodeRecord {
                    address: address.to_string(),
                    datacenter: dc,
                    meta: BTreeMap::new(),
                    checks: BTreeMap::from([("serfHealth".into(), "passing".into())]),
                },
            );
        }
    }

    /// Adds or changes a node (its checks are kept); the services on it change.
    pub fn set_node(&mut self, name: &str, address: &str, meta: BTreeMap<String, String>) {
        self.ensure_node(name, address);
        if let Some(rec) = self.nodes.get_mut(name) {
            rec.address = address.to_string();
            rec.meta = meta;
        }
        let touched = self
            .instances
            .values()
            .filter(|i| i.node == name)
            .map(|i| i.service.clone())
            .collect();
        if !self.touch_services(touched) {
            self.bump();
        }
    }

    /// Registers or replaces an instance.
    pub fn upsert(&mut self, instance: InstanceRecord) {
        self.ensure_node(&instance.node, "127.0.0.1");
        let i = self.bump();
        self.list_index = i;
        self.service_index.insert(instance.service.clone(), i);
        let key = (instance.node.clone(), instance.id.clone());
        self.instances.insert(key, instance);
    }

    /// Removes the instance `id` (on any node); whether it existed.
    pub fn remove(&mut self, id: &str) -> bool {
        let keys: Vec<(String, String)> = self
            .instances
            .keys()
            .filter(|(_, i)| i == id)
            .cloned()
            .collect();
        if keys.is_empty() {
            return false;
        }
        let i = self.bump();
        self.list_index = i;
        for key in keys {
            if let Some(inst) = self.instances.remove(&key) {
                self.service_index.insert(inst.service, i);
            }
        }
        true
    }

    /// Sets a check's status, wherever it is (a service check or a node check); whether found.
    pub fn set_check(&mut self, check_id: &str, status: &str) -> bool {
        let mut found = false;
        let mut touched = BTreeSet::new();
        for inst in self.instances.values_mut() {
            if let Some(s) = inst.checks.get_mut(check_id) {
                *s = status.to_string();
                found = true;
                touched.insert(inst.service.clone());
            }
        }
        for (node, rec) in &mut self.nodes {
            if let Some(s) = rec.checks.get_mut(check_id) {
                *s = status.to_string();
                found = true;
                touched.extend(
                    self.instances
                        .values()
                        .filter(|i| &i.node == node)
                        .map(|i| i.service.clone()),
                );
            }
        }
        self.touch_services(touched);
        found
    }

    /// Sets the status of node `node`'s `check_id` check, adding or (with `None`) removing it;
    /// whether the node exists.
    pub fn set_node_check(&mut self, node: &str, check_id: &str, status: Option<&str>) -> bool {
        let Some(rec) = self.nodes.get_mut(node) else {
            return false;
        };
        match status {
            Some(s) => rec.checks.insert(check_id.to_string(), s.to_string()),
            None => rec.checks.remove(check_id),
        };
        let touched = self
            .instances
            .values()
            .filter(|i| i.node == node)
            .map(|i| i.service.clone())
            .collect();
        self.touch_services(touched);
        true
    }

    /// Adds or removes a check on instance `id`; whether the instance exists.
    pub fn set_instance_check(&mut self, id: &str, check_id: &str, status: Option<&str>) -> bool {
        let mut touched = BTreeSet::new();
        for inst in self.instances.values_mut().filter(|i| i.id == id) {
            match status {
                Some(s) => inst.checks.insert(check_id.to_string(), s.to_string()),
                None => inst.checks.remove(check_id),
            };
            touched.insert(inst.service.clone());
        }
        self.touch_services(touched)
    }

    /// An idempotent write: the service's index moves, nothing else changes.
    pub fn touch(&mut self, service: &str) {
        self.touch_services(BTreeSet::from([service.to_string()]));
    }

    fn touch_services(&mut self, services: BTreeSet<String>) -> bool {
        if services.is_empty() {
            return false;
        }
        let i = self.bump();
        for s in services {
            self.service_index.insert(s, i);
        }
        true
    }

    /// A snapshot restore: every index goes back to at most `to`.
    pub fn rewind(&mut self, to: u64) {
        self.index = to;
        self.list_index = self.list_index.min(to);
        for i in self.service_index.values_mut() {
            *i = (*i).min(to);
        }
    }

    /// The index of `/v1/health/service/<name>`.
    pub fn health_index(&self, service: &str) -> u64 {
        self.service_index
            .get(service)
            .copied()
            .unwrap_or(self.list_index)
    }

    /// `/v1/catalog/services`.
    pub fn services_json(&self) -> Value {
        let mut out: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for inst in self.instances.values() {
            out.entry(&inst.service)
                .or_default()
                .extend(inst.tags.iter().map(String::as_str));
        }
        json!(out)
    }

    /// `/v1/health/service/<name>`.
    pub fn health_json(&self, service: &str) -> Value {
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
    use crate::consul::wire;

    fn web(id: &str, port: u16) -> InstanceRecord {
        InstanceRecord {
            id: id.into(),
            service: "web".into(),
            node: "n1".into(),
            address: "10.0.0.1".into(),
            port,
            tags: vec!["v1".into()],
            meta: BTreeMap::new(),
            weights: (1, 1),
            kind: String::new(),
            checks: BTreeMap::from([(format!("service:{id}"), "passing".into())]),
        }
    }

    #[test]
    fn indexes_move_like_consuls() {
        let mut c = Catalog::new("dc1");
        let start = c.index;
        c.upsert(web("w1", 80));
        let after_register = c.health_index("web");
        assert!(after_register > start);
        assert_eq!(
            c.list_index, after_register,
            "a registration moves the list"
        );
        assert!(c.set_check("service:w1", "critical"));
        assert!(
            c.health_index("web") > after_register,
            "a check moves the service"
        );
        assert_eq!(c.list_index, after_register, "but not the list");
        assert!(c.set_check("serfHealth", "critical"), "a node check");
        let before = c.health_index("web");
        c.touch("web");
        assert!(c.health_index("web") > before);
        c.rewind(5);
        assert_eq!(c.health_index("web"), 5);
        assert!(c.remove("w1"));
        assert!(!c.remove("w1"));
    }

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
