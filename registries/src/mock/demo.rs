//! The embedded demo mesh: a few services on loopback backends, for `tributary --demo` and
//! examples.
//!
//! Service ports are in 18080–18099; every endpoint is `127.0.0.1` on a port in
//! [`DEMO_ENDPOINT_PORTS`], in two localities (`us-east/zone-a`, `us-west/zone-b`).
//! [`demo_endpoints`] lists what backends demo mode must start.

use std::net::IpAddr;
use std::ops::RangeInclusive;

use super::config::MockConfig;
use super::file_format::MockFile;
use crate::model::{Hostname, Protocol};

/// The demo mesh as YAML, in the mock file format.
pub const DEMO_YAML: &str = include_str!("demo.yaml");

/// Every demo endpoint listens on a port in this range.
pub const DEMO_ENDPOINT_PORTS: RangeInclusive<u16> = 19100..=19199;

/// One backend the demo mesh expects to be running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoEndpoint {
    /// Where it listens.
    pub address: IpAddr,
    /// The port it listens on (in [`DEMO_ENDPOINT_PORTS`]).
    pub port: u16,
    /// The service it belongs to.
    pub service: Hostname,
    /// The service port it serves.
    pub port_name: String,
    /// What it must speak.
    pub protocol: Protocol,
    /// Its `version` label (`v1`, `v2`).
    pub version: String,
}

/// A mock registry config serving the demo mesh.
pub fn demo_config() -> MockConfig {
    let file: MockFile = serde_yaml::from_str(DEMO_YAML)
        .expect("the embedded demo.yaml parses; a unit test checks it");
    MockConfig {
        services: file.services,
        ..MockConfig::default()
    }
}

/// Every backend of the demo mesh, in file order.
pub fn demo_endpoints() -> Vec<DemoEndpoint> {
    let config = demo_config();
    let origin = config.origin();
    let mut out = Vec::new();
    for spec in &config.services {
        let state = spec
            .to_state(&origin)
            .expect("the embedded demo.yaml is valid; a unit test checks it");
        for ep in &state.endpoints {
            for port in &state.service.ports {
                out.push(DemoEndpoint {
                    address: ep.address.parse().expect("demo endpoints are IP addresses"),
                    port: ep.port_for(port),
                    service: state.service.hostname.clone(),
                    port_name: port.name.clone(),
                    protocol: port.protocol,
                    version: ep.labels.get("version").cloned().unwrap_or_default(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn demo_mesh_is_valid_and_in_its_port_range() {
        let config = demo_config();
        config.validate().expect("demo config validates");
        let eps = demo_endpoints();
        assert!(eps.len() >= 8, "several endpoints: {eps:?}");
        let ports: BTreeSet<u16> = eps.iter().map(|e| e.port).collect();
        assert_eq!(
            ports.len(),
            eps.len(),
            "every demo backend has its own port"
        );
        assert!(eps.iter().all(|e| DEMO_ENDPOINT_PORTS.contains(&e.port)));
        assert!(eps.iter().all(|e| e.address.is_loopback()));
        let protocols: BTreeSet<Protocol> = eps.iter().map(|e| e.protocol).collect();
        assert!(protocols.contains(&Protocol::Http));
        assert!(protocols.contains(&Protocol::Grpc));
        assert!(protocols.contains(&Protocol::Tcp));
        let versions: BTreeSet<&str> = eps.iter().map(|e| e.version.as_str()).collect();
        assert_eq!(versions, BTreeSet::from(["v1", "v2"]));
    }

    #[test]
    fn demo_mesh_spans_two_localities() {
        let config = demo_config();
        let localities: BTreeSet<String> = config
            .services
            .iter()
            .flat_map(|s| s.endpoints.iter().map(|e| e.locality.clone()))
            .collect();
        assert_eq!(
            localities,
            BTreeSet::from(["us-east/zone-a".to_string(), "us-west/zone-b".to_string()])
        );
    }
}
