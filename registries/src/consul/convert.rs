//! Consul's catalog → the model. Pure functions; the mapping is documented in the README.
//!
//! | Consul | model |
//! | --- | --- |
//! | service name | hostname from `hostname_template` (`{service}.service.consul`) |
//! | `Service.Address`, else `Node.Address` | endpoint address |
//! | `Service.Port` | endpoint port; the service port is the lowest instance port (sticky: kept while an instance still uses it) |
//! | `Service.Meta.protocol` | port protocol and name (`http`, `http2`, `grpc`, `tcp`); default TCP |
//! | `Service.Meta.external` (non-empty) | `MESH_EXTERNAL` |
//! | tags `key=value` / `key\|value` | endpoint labels; other tags: label `tags` (comma-joined) |
//! | `Weights.Passing` / `.Warning` | endpoint weight |
//! | `Node.Datacenter` / `Node.Meta.<zone_meta_key>` | locality region / zone |
//! | checks (node + service) | health: all passing → HEALTHY, worst `warning` → `warning` policy, `critical` (maintenance is critical) → UNHEALTHY |
//! | `Service.Kind` ≠ "" | skipped unless in `include_kinds` |

use std::collections::BTreeMap;

use super::config::{ConsulConfig, WarningPolicy};
use super::wire::{Check, HealthEntry};
use crate::model::{
    Endpoint, Health, Hostname, Locality, MeshLocation, Origin, Protocol, Resolution, Service,
    ServicePort, ServiceState,
};

/// The endpoint label holding tags that are not `key=value` / `key|value`.
pub const TAGS_LABEL: &str = "tags";

/// The `Service.Meta` key naming the port protocol (as Istio's Consul adapter read it).
const PROTOCOL_META: &str = "protocol";

/// The `Service.Meta` key marking a service outside the mesh (as Istio's Consul adapter read it).
const EXTERNAL_META: &str = "external";

/// The result of converting one Consul service.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversion {
    /// What to serve; `None` when the service has nothing to serve and never had (e.g. only
    /// sidecar-proxy instances).
    pub state: Option<ServiceState>,
    /// Things the user may want to fix (unknown protocol, instances without a port, ...).
    pub notes: Vec<String>,
}

/// How this registry maps Consul onto the model.
#[derive(Debug, Clone)]
pub struct Mapping {
    origin: Origin,
    datacenter: String,
    default_protocol: Protocol,
    warning: WarningPolicy,
    include_kinds: Vec<String>,
    zone_meta_key: String,
}

impl Mapping {
    /// The mapping `config` describes.
    pub fn new(config: &ConsulConfig) -> Self {
        Self {
            origin: config.origin(),
            datacenter: config.datacenter.clone().unwrap_or_default(),
            default_protocol: config.default_protocol,
            warning: config.warning,
            include_kinds: config.include_kinds.clone(),
            zone_meta_key: config.zone_meta_key.clone(),
        }
    }

    /// Converts the instances of one service. `previous` is what was served for it before: when no
    /// instance is left, its definition is kept with no endpoints (REG-7: nothing stale lingers,
    /// yet the listener does not flap while Consul removes the service).
    pub fn convert(
        &self,
        hostname: &Hostname,
        entries: &[HealthEntry],
        previous: Option<&ServiceState>,
    ) -> Conversion {
        let mut notes = Vec::new();
        let mut kept: Vec<(&HealthEntry, u16)> = Vec::new();
        for e in entries {
            if !e.service.kind.is_empty() && !self.include_kinds.contains(&e.service.kind) {
                continue;
            }
            match u16::try_from(e.service.port) {
                Ok(port) if port > 0 => kept.push((e, port)),
                _ => notes.push(format!(
                    "instance {:?} on node {:?} has port {}; it is left out",
                    e.service.id, e.node.name, e.service.port
                )),
            }
        }
        // The service port is sticky: the one served before while an instance still uses it,
        // else the lowest instance port. So a listener does not move when instances come and go.
        let sticky = previous
            .and_then(|p| p.service.ports.first())
            .map(|p| p.port)
            .filter(|p| kept.iter().any(|(_, q)| q == p));
        let service = match (sticky.or(kept.iter().map(|(_, p)| *p).min()), previous) {
            (Some(port), _) => self.service(hostname, &kept, port, &mut notes),
            (None, Some(prev)) => prev.service.clone(),
            (None, None) => return Conversion { state: None, notes },
        };
        let port_name = service.ports.first().map(|p| p.name.clone());
        let mut endpoints: Vec<Endpoint> = kept
            .iter()
            .map(|(e, port)| self.endpoint(e, *port, port_name.as_deref()))
            .collect();
        // Consul's order is not part of the state: the same instances always give the same state.
        endpoints.sort_by(|a, b| order_key(a).cmp(&order_key(b)));
        Conversion {
            state: Some(ServiceState { service, endpoints }),
            notes,
        }
    }

    fn service(
        &self,
        hostname: &Hostname,
        kept: &[(&HealthEntry, u16)],
        port: u16,
        notes: &mut Vec<String>,
    ) -> Service {
        let mut declared: Vec<(&str, Protocol)> = Vec::new();
        for (e, _) in kept {
            let Some(value) = e.service.meta.get(PROTOCOL_META) else {
                continue;
            };
            match parse_protocol(value) {
                Some(p) => {
                    if !declared.iter().any(|(_, q)| *q == p) {
                        declared.push((&e.service.id, p));
                    }
                }
                None => notes.push(format!(
                    "instance {:?}: unsupported protocol {value:?} in Service.Meta (use http, http2, grpc or tcp); using {:?}",
                    e.service.id, self.default_protocol
                )),
            }
        }
        declared.sort_by_key(|(id, _)| *id);
        let protocol = declared
            .first()
            .map(|(_, p)| *p)
            .unwrap_or(self.default_protocol);
        if declared.len() > 1 {
            notes.push(format!(
                "instances disagree on Service.Meta protocol ({declared:?}); serving {protocol:?}"
            ));
        }
        let external = kept.iter().any(|(e, _)| {
            e.service
                .meta
                .get(EXTERNAL_META)
                .is_some_and(|v| !v.is_empty())
        });
        Service {
            hostname: hostname.clone(),
            ports: vec![ServicePort {
                name: port_name(protocol).to_string(),
                port,
                protocol,
            }],
            vips: BTreeMap::new(),
            resolution: Resolution::Static,
            location: if external {
                MeshLocation::MeshExternal
            } else {
                MeshLocation::MeshInternal
            },
            labels: BTreeMap::new(),
            service_accounts: Vec::new(),
            origin: self.origin.clone(),
        }
    }

    fn endpoint(&self, e: &HealthEntry, port: u16, port_name: Option<&str>) -> Endpoint {
        let address = match e.service.address.trim() {
            "" => e.node.address.trim(),
            a => a,
        };
        let (health, warning) = self.health(&e.checks);
        let weights = e.service.weights.unwrap_or(super::wire::Weights {
            passing: 1,
            warning: 1,
        });
        let weight = if warning {
            weights.warning
        } else {
            weights.passing
        };
        let region = match e.node.datacenter.as_str() {
            "" => self.datacenter.clone(),
            dc => dc.to_string(),
        };
        Endpoint {
            address: address.to_string(),
            ports: port_name
                .map(|n| BTreeMap::from([(n.to_string(), port)]))
                .unwrap_or_default(),
            labels: labels(&e.service.tags),
            locality: Locality {
                region,
                zone: e
                    .node
                    .meta
                    .get(&self.zone_meta_key)
                    .cloned()
                    .unwrap_or_default(),
                subzone: String::new(),
            },
            network: String::new(),
            service_account: String::new(),
            health,
            weight: weight.max(1),
            origin: self.origin.clone(),
        }
    }

    /// The instance's health from all its checks, and whether its worst check is `warning`.
    fn health(&self, checks: &[Check]) -> (Health, bool) {
        let mut warning = false;
        for c in checks {
            match c.status.as_str() {
                "passing" => {}
                "warning" => warning = true,
                // `critical`, maintenance (a critical check) and anything unknown: not serving.
                _ => return (Health::Unhealthy, false),
            }
        }
        match (warning, self.warning) {
            (true, WarningPolicy::Unhealthy) => (Health::Unhealthy, false),
            (w, _) => (Health::Healthy, w),
        }
    }
}

type OrderKey<'a> = (
    &'a str,
    &'a BTreeMap<String, u16>,
    &'a BTreeMap<String, String>,
    &'a Locality,
    u32,
    bool,
);

fn order_key(e: &Endpoint) -> OrderKey<'_> {
    (
        &e.address,
        &e.ports,
        &e.labels,
        &e.locality,
        e.weight,
        e.health == Health::Healthy,
    )
}

/// The port protocol a `Service.Meta` `protocol` value names (Consul's proxy protocols).
fn parse_protocol(value: &str) -> Option<Protocol> {
    match value.trim().to_ascii_lowercase().as_str() {
        "http" | "http1" => Some(Protocol::Http),
        "http2" => Some(Protocol::Http2),
        "grpc" => Some(Protocol::Grpc),
        "tcp" => Some(Protocol::Tcp),
        _ => None,
    }
}

/// The service port's name: the protocol, as Istio's Consul adapter named it.
fn port_name(p: Protocol) -> &'static str {
    match p {
        Protocol::Http => "http",
        Protocol::Http2 => "http2",
        Protocol::Grpc => "grpc",
        Protocol::Tcp => "tcp",
    }
}

/// `key=value` and `key|value` tags become labels; the rest are kept, sorted and comma-joined, in
/// the [`TAGS_LABEL`] label (an explicit `tags=...` tag wins).
fn labels(tags: &[String]) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut plain: Vec<&str> = Vec::new();
    for tag in tags {
        match tag.find(['=', '|']) {
            Some(i) if i > 0 => {
                labels.insert(tag[..i].to_string(), tag[i + 1..].to_string());
            }
            _ => plain.push(tag),
        }
    }
    plain.sort_unstable();
    plain.dedup();
    if !plain.is_empty() {
        labels
            .entry(TAGS_LABEL.to_string())
            .or_insert_with(|| plain.join(","));
    }
    labels
}

#[cfg(test)]
mod tests;
