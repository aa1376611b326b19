//! Maps the ports of a registry that joins a hybrid hostname onto the merged service's ports.
//!
//! The merged service keeps the first registry's port definitions (REG-10), but every other
//! registry names and numbers its ports its own way: Consul names its one port after the protocol
//! (`http`), a Kubernetes Service uses Istio's `http-<suffix>`, a ServiceEntry whatever its author
//! chose. An endpoint must keep the port it was registered on, so each merged port is matched to
//! one port of the joining registry's own service (docs/hybrid-ports.md, HYB-1..HYB-4):
//!
//! 1. the port with the same name, else
//! 2. the port with the same number, else
//! 3. the one port of the same protocol, when the merged service has exactly one unmatched port of
//!    that protocol and the registry has exactly one unmatched port of it.
//!
//! The endpoint's number for the merged port is then what its own registry says it serves that
//! port on ([`Endpoint::port_for`] against its own service). A merged port nothing matches is not
//! served by that endpoint at all (HYB-4): it is recorded as [`UnmappedPort`], left out of that
//! port's cluster and reported, never sent on the merged port's number where nothing may listen.

use std::collections::BTreeMap;

use serde::Serialize;
use tributary_registries::{Endpoint, RegistryId, Service, ServicePort};

/// A merged port one endpoint of a joining registry does not serve, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnmappedPort {
    /// Index of the endpoint in [`MergedService::endpoints`](super::MergedService::endpoints).
    pub endpoint: usize,
    /// The endpoint's address, for the report.
    pub address: String,
    /// The registry that reported the endpoint.
    pub registry: RegistryId,
    /// The merged service port's name.
    pub port: String,
    /// Why no port of the endpoint's registry could be matched to it.
    pub reason: String,
}

/// For each merged port (by name), the joining registry's own port it corresponds to, or why none.
pub(super) type PortMap<'a> = BTreeMap<&'a str, Result<&'a ServicePort, String>>;

/// Matches every port of `merged` to a port of `own` (the joining registry's service).
pub(super) fn map_ports<'a>(merged: &'a Service, own: &'a Service) -> PortMap<'a> {
    let mut out: PortMap<'a> = BTreeMap::new();
    let mut taken: Vec<&str> = Vec::new();
    // HYB-1 then HYB-2: exact name, then exact number, never reusing a port of `own`.
    for m in &merged.ports {
        let found = own
            .ports
            .iter()
            .find(|p| p.name == m.name)
            .or_else(|| own.ports.iter().find(|p| p.port == m.port));
        if let Some(p) = found.filter(|p| !taken.contains(&p.name.as_str())) {
            taken.push(&p.name);
            out.insert(&m.name, Ok(p));
        }
    }
    // HYB-3: the one unmatched port of a protocol on each side.
    let open_merged: Vec<&ServicePort> = merged
        .ports
        .iter()
        .filter(|m| !out.contains_key(m.name.as_str()))
        .collect();
    let open_own: Vec<&ServicePort> = own
        .ports
        .iter()
        .filter(|p| !taken.contains(&p.name.as_str()))
        .collect();
    for m in &open_merged {
        let same_merged = open_merged
            .iter()
            .filter(|o| o.protocol == m.protocol)
            .count();
        let candidates: Vec<&&ServicePort> = open_own
            .iter()
            .filter(|p| p.protocol == m.protocol)
            .collect();
        let result = match (same_merged, candidates.as_slice()) {
            (1, [p]) => Ok(**p),
            (_, []) => Err(format!(
                "registry {} defines no port named {:?}, numbered {} or of protocol {:?} \
                 (its ports: {})",
                own.origin.registry,
                m.name,
                m.port,
                m.protocol,
                describe(&own.ports)
            )),
            _ => Err(format!(
                "registry {} has no port named {:?} or numbered {}, and which of its {:?} ports \
                 ({}) matches is ambiguous",
                own.origin.registry,
                m.name,
                m.port,
                m.protocol,
                describe(&own.ports)
            )),
        };
        out.insert(&m.name, result);
    }
    out
}

fn describe(ports: &[ServicePort]) -> String {
    if ports.is_empty() {
        return "none".to_string();
    }
    ports
        .iter()
        .map(|p| format!("{} {} {:?}", p.name, p.port, p.protocol))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `ep` (from the registry whose service is `own`) with its ports renamed onto the merged
/// service's: every matched merged port gets the number the endpoint serves it on. Merged ports
/// with no match are returned with their reason.
pub(super) fn remap(ep: &Endpoint, map: &PortMap<'_>) -> (Endpoint, Vec<(String, String)>) {
    let mut out = ep.clone();
    out.ports.clear();
    let mut missing = Vec::new();
    for (name, source) in map {
        match source {
            Ok(p) => {
                out.ports.insert((*name).to_string(), ep.port_for(p));
            }
            Err(why) => missing.push(((*name).to_string(), why.clone())),
        }
    }
    (out, missing)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tributary_registries::{ClusterId, Hostname, Origin, Protocol};

    use super::*;

    fn port(name: &str, number: u16, protocol: Protocol) -> ServicePort {
        ServicePort {
            name: name.into(),
            port: number,
            protocol,
            target_port: None,
        }
    }

    fn service(registry: &str, ports: Vec<ServicePort>) -> Service {
        Service {
            ports,
            ..Service::new(
                Hostname::new("web.shop.svc.cluster.local").expect("valid"),
                Origin {
                    registry: RegistryId::new(registry),
                    cluster: ClusterId::new(registry),
                },
            )
        }
    }

    fn endpoint(ports: &[(&str, u16)]) -> Endpoint {
        Endpoint {
            ports: ports.iter().map(|(n, p)| (n.to_string(), *p)).collect(),
            ..Endpoint::new(
                "10.0.0.9",
                Origin {
                    registry: RegistryId::new("other"),
                    cluster: ClusterId::new("other"),
                },
            )
        }
    }

    #[test]
    fn name_then_number_then_unique_protocol() {
        // HYB-1, HYB-2, HYB-3.
        let merged = service(
            "kube",
            vec![
                port("http-web", 80, Protocol::Http),
                port("grpc", 9000, Protocol::Grpc),
                port("tcp-db", 5432, Protocol::Tcp),
            ],
        );
        let own = service(
            "consul",
            vec![
                port("grpc", 19000, Protocol::Grpc),
                port("port-5432", 5432, Protocol::Tcp),
                port("http", 9090, Protocol::Http),
            ],
        );
        let map = map_ports(&merged, &own);
        assert_eq!(map["grpc"].as_ref().map(|p| p.port), Ok(19000));
        assert_eq!(map["tcp-db"].as_ref().map(|p| p.port), Ok(5432));
        assert_eq!(map["http-web"].as_ref().map(|p| p.port), Ok(9090));
        let ep = endpoint(&[("http", 9091), ("grpc", 19001)]);
        let (out, missing) = remap(&ep, &map);
        assert!(missing.is_empty());
        // The endpoint keeps the ports it registered, under the merged names; a port it did not
        // name is served where its own registry says (here the port's own number).
        assert_eq!(
            out.ports,
            BTreeMap::from([
                ("http-web".to_string(), 9091),
                ("grpc".to_string(), 19001),
                ("tcp-db".to_string(), 5432),
            ])
        );
    }

    #[test]
    fn ambiguous_or_absent_protocol_is_unmapped_never_the_service_port() {
        // HYB-3, HYB-4: two HTTP ports on the merged side, one on the joining side: ambiguous.
        let merged = service(
            "kube",
            vec![
                port("http-web", 80, Protocol::Http),
                port("http-admin", 8081, Protocol::Http),
            ],
        );
        let own = service("consul", vec![port("http", 9090, Protocol::Http)]);
        let map = map_ports(&merged, &own);
        assert!(
            map["http-web"]
                .as_ref()
                .is_err_and(|e| e.contains("ambiguous"))
        );
        let (out, missing) = remap(&endpoint(&[("http", 9090)]), &map);
        assert!(out.ports.is_empty(), "{:?}", out.ports);
        assert_eq!(missing.len(), 2);
        // No port of that protocol at all.
        let tcp = service("mock", vec![port("tcp", 7000, Protocol::Tcp)]);
        let map = map_ports(&merged, &tcp);
        let err = map["http-web"].as_ref().expect_err("nothing matches");
        assert!(err.contains("tcp 7000 Tcp"), "{err}");
    }

    #[test]
    fn a_port_of_the_joining_registry_is_used_once() {
        // HYB-2 does not hand one registry port to two merged ports: `http` 80 matches by name,
        // so `web` (number 80) must find another.
        let merged = service(
            "kube",
            vec![
                port("http", 80, Protocol::Http),
                port("web", 8080, Protocol::Http),
            ],
        );
        let own = service("se", vec![port("http", 80, Protocol::Http)]);
        let map = map_ports(&merged, &own);
        assert_eq!(map["http"].as_ref().map(|p| p.port), Ok(80));
        assert!(map["web"].is_err());
    }
}
