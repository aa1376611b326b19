//! The fake Consul's catalog: nodes, service instances and checks, with Raft-like indexes (the
//! JSON of its answers is in `json`).
//!
//! Indexes behave like Consul's: one counter moves on every write; the services list has its own
//! index (instance registrations and removals, not check changes); each service has the index of
//! its last change (instances, their checks, or a check of a node it runs on), kept after the
//! service is gone.

use std::collections::{BTreeMap, BTreeSet};

/// The node the agent API registers on (the fake's "local agent").
pub(super) const AGENT_NODE: &str = "fake-agent";

/// The first index handed out; Consul's indexes are never 0 once it has any data.
const FIRST_INDEX: u64 = 10;

/// A catalog node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NodeRecord {
    pub address: String,
    pub datacenter: String,
    pub meta: BTreeMap<String, String>,
    /// Node checks (`serfHealth`, `_node_maintenance`): id → status.
    pub checks: BTreeMap<String, String>,
}

/// A registered service instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct InstanceRecord {
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
pub(super) struct Catalog {
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
    pub(super) fn new(datacenter: &str) -> Self {
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
    pub(super) fn ensure_node(&mut self, name: &str, address: &str) {
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
    pub(super) fn set_node(&mut self, name: &str, address: &str, meta: BTreeMap<String, String>) {
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
    pub(super) fn upsert(&mut self, instance: InstanceRecord) {
        self.ensure_node(&instance.node, "127.0.0.1");
        let i = self.bump();
        self.list_index = i;
        self.service_index.insert(instance.service.clone(), i);
        let key = (instance.node.clone(), instance.id.clone());
        self.instances.insert(key, instance);
    }

    /// Removes the instance `id` (on any node); whether it existed.
    pub(super) fn remove(&mut self, id: &str) -> bool {
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
    pub(super) fn set_check(&mut self, check_id: &str, status: &str) -> bool {
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
    pub(super) fn set_node_check(
        &mut self,
        node: &str,
        check_id: &str,
        status: Option<&str>,
    ) -> bool {
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
    pub(super) fn set_instance_check(
        &mut self,
        id: &str,
        check_id: &str,
        status: Option<&str>,
    ) -> bool {
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
    pub(super) fn touch(&mut self, service: &str) {
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
    pub(super) fn rewind(&mut self, to: u64) {
        self.index = to;
        self.list_index = self.list_index.min(to);
        for i in self.service_index.values_mut() {
            *i = (*i).min(to);
        }
    }

    /// The index of `/v1/health/service/<name>`.
    pub(super) fn health_index(&self, service: &str) -> u64 {
        self.service_index
            .get(service)
            .copied()
            .unwrap_or(self.list_index)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::consul::fake) fn web(id: &str, port: u16) -> InstanceRecord {
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
}
