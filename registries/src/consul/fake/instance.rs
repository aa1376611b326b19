//! Service instances to register in the fake Consul, built fluently.

use std::collections::BTreeMap;

use super::state::{AGENT_NODE, InstanceRecord};

/// A check status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckStatus {
    /// `passing`.
    Passing,
    /// `warning`.
    Warning,
    /// `critical`.
    Critical,
}

impl CheckStatus {
    /// Consul's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Passing => "passing",
            CheckStatus::Warning => "warning",
            CheckStatus::Critical => "critical",
        }
    }
}

/// A service instance to register. By default it runs on the agent node (`fake-agent`,
/// 127.0.0.1) with one passing check `service:<id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// Instance id, unique per node.
    pub id: String,
    /// Service name.
    pub service: String,
    /// Node name; created (at 127.0.0.1) if unknown.
    pub node: String,
    /// `Service.Address`; empty means the node's.
    pub address: String,
    /// `Service.Port`.
    pub port: u16,
    /// Tags.
    pub tags: Vec<String>,
    /// `Service.Meta`.
    pub meta: BTreeMap<String, String>,
    /// `Weights` (passing, warning).
    pub weights: (u32, u32),
    /// `Kind`.
    pub kind: String,
    /// The status of its `service:<id>` check; `None`: no check at all.
    pub check: Option<CheckStatus>,
}

impl Instance {
    /// Instance `id` of `service` at `address:port`.
    pub fn new(service: &str, id: &str, address: &str, port: u16) -> Self {
        Self {
            id: id.to_string(),
            service: service.to_string(),
            node: AGENT_NODE.to_string(),
            address: address.to_string(),
            port,
            tags: Vec::new(),
            meta: BTreeMap::new(),
            weights: (1, 1),
            kind: String::new(),
            check: Some(CheckStatus::Passing),
        }
    }

    /// On node `node`.
    pub fn on_node(mut self, node: &str) -> Self {
        self.node = node.to_string();
        self
    }

    /// With a tag.
    pub fn tag(mut self, tag: &str) -> Self {
        self.tags.push(tag.to_string());
        self
    }

    /// With a `Service.Meta` entry.
    pub fn meta(mut self, key: &str, value: &str) -> Self {
        self.meta.insert(key.to_string(), value.to_string());
        self
    }

    /// With weights.
    pub fn weights(mut self, passing: u32, warning: u32) -> Self {
        self.weights = (passing, warning);
        self
    }

    /// Of a kind (`connect-proxy`, ...).
    pub fn kind(mut self, kind: &str) -> Self {
        self.kind = kind.to_string();
        self
    }

    /// With its check in this state (`None`: no check).
    pub fn check(mut self, status: Option<CheckStatus>) -> Self {
        self.check = status;
        self
    }

    pub(super) fn record(self) -> InstanceRecord {
        let checks = self
            .check
            .map(|s| (format!("service:{}", self.id), s.as_str().to_string()))
            .into_iter()
            .collect();
        InstanceRecord {
            id: self.id,
            service: self.service,
            node: self.node,
            address: self.address,
            port: self.port,
            tags: self.tags,
            meta: self.meta,
            weights: self.weights,
            kind: self.kind,
            checks,
        }
    }
}
