//! The parts of Consul's JSON answers tributary reads (docs/ecosystem.md §2.1).
//!
//! Tolerant on purpose: unknown fields are ignored, and Go's `null` for an empty slice or map
//! (`"Tags": null`, `"Meta": null`) reads as empty, so any Consul version's answer parses.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

/// `GET /v1/catalog/services`: service name → the union of its instances' tags.
pub type ServiceList = BTreeMap<String, Vec<String>>;

/// Parses a `/v1/catalog/services` body (tags may be `null`).
pub fn parse_service_list(body: &[u8]) -> Result<ServiceList, serde_json::Error> {
    let raw: BTreeMap<String, Option<Vec<String>>> = serde_json::from_slice(body)?;
    Ok(raw
        .into_iter()
        .map(|(name, tags)| (name, tags.unwrap_or_default()))
        .collect())
}

/// One element of `GET /v1/health/service/:service`: an instance, its node, and every check on
/// either (node checks such as `serfHealth` included).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct HealthEntry {
    /// The node the instance is registered on.
    #[serde(deserialize_with = "null_default")]
    pub node: Node,
    /// The instance.
    #[serde(deserialize_with = "null_default")]
    pub service: AgentService,
    /// Node-level and service-level checks.
    #[serde(deserialize_with = "null_default")]
    pub checks: Vec<Check>,
}

/// A catalog node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Node {
    /// The node name.
    #[serde(rename = "Node", deserialize_with = "null_default")]
    pub name: String,
    /// The node address; the instance's address when `Service.Address` is empty.
    #[serde(deserialize_with = "null_default")]
    pub address: String,
    /// The node's datacenter.
    #[serde(deserialize_with = "null_default")]
    pub datacenter: String,
    /// Free-form node metadata.
    #[serde(deserialize_with = "null_default")]
    pub meta: BTreeMap<String, String>,
}

/// A service instance as the health endpoint returns it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AgentService {
    /// The instance id, unique on its node.
    #[serde(rename = "ID", deserialize_with = "null_default")]
    pub id: String,
    /// The service name.
    #[serde(deserialize_with = "null_default")]
    pub service: String,
    /// Tags.
    #[serde(deserialize_with = "null_default")]
    pub tags: Vec<String>,
    /// The instance address; empty means the node's.
    #[serde(deserialize_with = "null_default")]
    pub address: String,
    /// Free-form service metadata (`protocol`, `external`, ...).
    #[serde(deserialize_with = "null_default")]
    pub meta: BTreeMap<String, String>,
    /// The port; 0 when the instance registered none.
    pub port: u32,
    /// DNS SRV weights; absent means Consul's default `{Passing: 1, Warning: 1}`.
    #[serde(deserialize_with = "null_default")]
    pub weights: Option<Weights>,
    /// `""` for a typical service; `connect-proxy`, `mesh-gateway`, ... otherwise.
    #[serde(deserialize_with = "null_default")]
    pub kind: String,
}

/// An instance's weights by health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Weights {
    /// Weight while every check passes.
    #[serde(default = "one")]
    pub passing: u32,
    /// Weight while the worst check is `warning`.
    #[serde(default = "one")]
    pub warning: u32,
}

fn one() -> u32 {
    1
}

/// One health check.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Check {
    /// The check id: `serfHealth`, `service:<id>`, `_node_maintenance`, ...
    #[serde(rename = "CheckID", deserialize_with = "null_default")]
    pub check_id: String,
    /// `passing`, `warning` or `critical`.
    #[serde(deserialize_with = "null_default")]
    pub status: String,
    /// The instance it belongs to; empty for a node check.
    #[serde(rename = "ServiceID", deserialize_with = "null_default")]
    pub service_id: String,
}

/// Parses a `/v1/health/service/:service` body.
pub fn parse_health(body: &[u8]) -> Result<Vec<HealthEntry>, serde_json::Error> {
    let raw: Option<Vec<HealthEntry>> = serde_json::from_slice(body)?;
    Ok(raw.unwrap_or_default())
}

fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample answer of `/v1/health/service/:service` in Consul's API docs
    /// (`website/content/api-docs/health.mdx`), verbatim in shape.
    const DOCS_SAMPLE: &str = r#"[
      {
        "Node": {
          "ID": "40e4a748-2192-161a-0510-9bf59fe950b5",
          "Node": "foobar",
          "Address": "10.1.10.12",
          "Datacenter": "dc1",
          "TaggedAddresses": {"lan": "10.1.10.12", "wan": "10.1.10.12"},
          "Meta": {"instance_type": "t2.medium"}
        },
        "Service": {
          "ID": "redis",
          "Service": "redis",
          "Tags": ["primary"],
          "Address": "10.1.10.12",
          "TaggedAddresses": {
            "lan": {"address": "10.1.10.12", "port": 8000},
            "wan": {"address": "198.18.1.2", "port": 80}
          },
          "Meta": {"redis_version": "4.0"},
          "Port": 8000,
          "Weights": {"Passing": 10, "Warning": 1},
          "Namespace": "default"
        },
        "Checks": [
          {"Node": "foobar", "CheckID": "service:redis", "Name": "Service 'redis' check",
           "Status": "passing", "Notes": "", "Output": "", "ServiceID": "redis",
           "ServiceName": "redis", "ServiceTags": ["primary"], "Namespace": "default"},
          {"Node": "foobar", "CheckID": "serfHealth", "Name": "Serf Health Status",
           "Status": "passing", "Notes": "", "Output": "", "ServiceID": "",
           "ServiceName": "", "ServiceTags": [], "Namespace": "default"}
        ]
      }
    ]"#;

    #[test]
    fn parses_the_documented_health_answer() {
        let entries = parse_health(DOCS_SAMPLE.as_bytes()).unwrap();
        assert_eq!(entries.len(), 1);
        let e = &entries[0];
        assert_eq!(e.node.name, "foobar");
        assert_eq!(e.node.datacenter, "dc1");
        assert_eq!(e.node.meta["instance_type"], "t2.medium");
        assert_eq!(e.service.id, "redis");
        assert_eq!(e.service.tags, ["primary"]);
        assert_eq!(e.service.port, 8000);
        assert_eq!(
            e.service.weights,
            Some(Weights {
                passing: 10,
                warning: 1
            })
        );
        assert_eq!(e.checks.len(), 2);
        assert_eq!(e.checks[1].check_id, "serfHealth");
        assert_eq!(e.checks[1].service_id, "");
    }

    #[test]
    fn go_nulls_read_as_empty() {
        let body = r#"[{"Node": {"Node": "n", "Address": "10.0.0.1", "Meta": null},
            "Service": {"ID": "a", "Service": "a", "Tags": null, "Meta": null, "Port": 80,
                        "Weights": null, "Kind": null},
            "Checks": null}]"#;
        let e = &parse_health(body.as_bytes()).unwrap()[0];
        assert!(e.service.tags.is_empty() && e.service.meta.is_empty() && e.checks.is_empty());
        assert_eq!(e.service.weights, None);
        assert_eq!(parse_health(b"null").unwrap(), vec![]);
    }

    #[test]
    fn parses_the_service_list() {
        let list = parse_service_list(
            br#"{"consul": [], "redis": null, "postgresql": ["primary", "secondary"]}"#,
        )
        .unwrap();
        assert_eq!(list.len(), 3);
        assert!(list["redis"].is_empty());
        assert_eq!(list["postgresql"], ["primary", "secondary"]);
        assert!(
            parse_service_list(b"[1]").is_err(),
            "a wrong shape is an error"
        );
    }
}
