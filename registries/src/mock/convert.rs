//! The one place protobuf messages of the control API become specs and back.

use std::time::Duration;

use super::file_format::{EndpointSpec, FieldPath, InvalidField, PortSpec, Seg, ServiceSpec};
use super::handle::Fault;
use super::proto;
use crate::model::{Endpoint, Health, MeshLocation, Protocol, Resolution, ServiceState};

type Bad = (FieldPath, String);

fn path(segs: impl IntoIterator<Item = Seg>) -> FieldPath {
    FieldPath(segs.into_iter().collect())
}

fn key(k: &str) -> Seg {
    Seg::Key(k.to_string())
}

/// A service from a request; errors name the field relative to the service.
pub(crate) fn service_from_proto(p: proto::Service) -> Result<ServiceSpec, InvalidField> {
    let bad = |(field, message): Bad| InvalidField {
        hostname: p.hostname.clone(),
        field,
        message,
    };
    let mut ports = Vec::with_capacity(p.ports.len());
    for (i, port) in p.ports.iter().enumerate() {
        let at = |f: &str| path([key("ports"), Seg::Index(i), key(f)]);
        let protocol = match proto::Protocol::try_from(port.protocol) {
            Ok(proto::Protocol::Http) => Protocol::Http,
            Ok(proto::Protocol::Http2) => Protocol::Http2,
            Ok(proto::Protocol::Grpc) => Protocol::Grpc,
            Ok(proto::Protocol::Tcp) => Protocol::Tcp,
            Ok(proto::Protocol::Unspecified) | Err(_) => {
                return Err(bad((
                    at("protocol"),
                    format!(
                        "protocol {} is not one of HTTP, HTTP2, GRPC, TCP",
                        port.protocol
                    ),
                )));
            }
        };
        ports.push(PortSpec {
            name: port.name.clone(),
            port: port_number(port.port).map_err(|m| bad((at("port"), m)))?,
            protocol,
        });
    }
    let resolution = match proto::Resolution::try_from(p.resolution) {
        Ok(proto::Resolution::Unspecified | proto::Resolution::Static) => Resolution::Static,
        Ok(proto::Resolution::Dns) => Resolution::Dns,
        Ok(proto::Resolution::DnsRoundRobin) => Resolution::DnsRoundRobin,
        Ok(proto::Resolution::Passthrough) => Resolution::Passthrough,
        Err(_) => {
            return Err(bad((
                path([key("resolution")]),
                format!("unknown resolution {}", p.resolution),
            )));
        }
    };
    let location = match proto::MeshLocation::try_from(p.location) {
        Ok(proto::MeshLocation::Unspecified | proto::MeshLocation::MeshInternal) => {
            MeshLocation::MeshInternal
        }
        Ok(proto::MeshLocation::MeshExternal) => MeshLocation::MeshExternal,
        Err(_) => {
            return Err(bad((
                path([key("location")]),
                format!("unknown location {}", p.location),
            )));
        }
    };
    let mut vips = Vec::with_capacity(p.vips.len());
    for (i, vip) in p.vips.iter().enumerate() {
        vips.push(vip.parse().map_err(|_| {
            bad((
                path([key("vips"), Seg::Index(i)]),
                format!("{vip:?} is not an IP address"),
            ))
        })?);
    }
    let endpoints = endpoints_from_proto(&p.endpoints)
        .map_err(|(field, m)| bad((field.under(&[key("endpoints")]), m)))?;
    Ok(ServiceSpec {
        hostname: p.hostname.clone(),
        ports,
        resolution,
        location,
        vips,
        labels: p.labels.clone().into_iter().collect(),
        service_accounts: p.service_accounts.clone(),
        endpoints,
    })
}

/// Endpoints from a request; errors name the field relative to the list (`[1].health`).
pub(crate) fn endpoints_from_proto(eps: &[proto::Endpoint]) -> Result<Vec<EndpointSpec>, Bad> {
    let mut out = Vec::with_capacity(eps.len());
    for (i, e) in eps.iter().enumerate() {
        let mut ports = std::collections::BTreeMap::new();
        for (name, &port) in &e.ports {
            let port = port_number(port)
                .map_err(|m| (path([Seg::Index(i), key("ports"), key(name)]), m))?;
            ports.insert(name.clone(), port);
        }
        let health = match proto::Health::try_from(e.health) {
            Ok(proto::Health::Unspecified | proto::Health::Healthy) => Health::Healthy,
            Ok(proto::Health::Unhealthy) => Health::Unhealthy,
            Ok(proto::Health::Draining) => Health::Draining,
            Err(_) => {
                return Err((
                    path([Seg::Index(i), key("health")]),
                    format!("unknown health {}", e.health),
                ));
            }
        };
        out.push(EndpointSpec {
            address: e.address.clone(),
            ports,
            labels: e.labels.clone().into_iter().collect(),
            locality: e.locality.clone(),
            health,
            weight: e.weight.unwrap_or(1),
            network: e.network.clone(),
            service_account: e.service_account.clone(),
        });
    }
    Ok(out)
}

fn port_number(port: u32) -> Result<u16, String> {
    match u16::try_from(port) {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(format!("port {port} is not in 1..=65535")),
    }
}

/// A service as written in a mock file, for a control-API request (`tributary mock upsert`):
/// checked as the registry checks it.
pub fn spec_to_proto(
    spec: &ServiceSpec,
    origin: &crate::model::Origin,
) -> Result<proto::Service, InvalidField> {
    Ok(service_to_proto(&spec.to_state(origin)?))
}

/// A control-API service in the mock file's form (`tributary mock list|get`).
pub fn spec_from_proto(p: proto::Service) -> Result<ServiceSpec, InvalidField> {
    service_from_proto(p)
}

/// A served service for a response.
pub(crate) fn service_to_proto(s: &ServiceState) -> proto::Service {
    let svc = &s.service;
    proto::Service {
        hostname: svc.hostname.to_string(),
        ports: svc
            .ports
            .iter()
            .map(|p| proto::Port {
                name: p.name.clone(),
                port: u32::from(p.port),
                protocol: match p.protocol {
                    Protocol::Http => proto::Protocol::Http,
                    Protocol::Http2 => proto::Protocol::Http2,
                    Protocol::Grpc => proto::Protocol::Grpc,
                    Protocol::Tcp => proto::Protocol::Tcp,
                } as i32,
            })
            .collect(),
        resolution: match svc.resolution {
            Resolution::Static => proto::Resolution::Static,
            Resolution::Dns => proto::Resolution::Dns,
            Resolution::DnsRoundRobin => proto::Resolution::DnsRoundRobin,
            Resolution::Passthrough => proto::Resolution::Passthrough,
        } as i32,
        location: match svc.location {
            MeshLocation::MeshInternal => proto::MeshLocation::MeshInternal,
            MeshLocation::MeshExternal => proto::MeshLocation::MeshExternal,
        } as i32,
        vips: svc
            .vips
            .values()
            .flatten()
            .map(ToString::to_string)
            .collect(),
        labels: svc.labels.clone().into_iter().collect(),
        service_accounts: svc.service_accounts.clone(),
        endpoints: s.endpoints.iter().map(endpoint_to_proto).collect(),
    }
}

fn endpoint_to_proto(e: &Endpoint) -> proto::Endpoint {
    proto::Endpoint {
        address: e.address.clone(),
        ports: e
            .ports
            .iter()
            .map(|(k, v)| (k.clone(), u32::from(*v)))
            .collect(),
        labels: e.labels.clone().into_iter().collect(),
        locality: if e.locality.is_empty() {
            String::new()
        } else {
            e.locality.to_string()
        },
        health: match e.health {
            Health::Healthy => proto::Health::Healthy,
            Health::Unhealthy => proto::Health::Unhealthy,
            Health::Draining => proto::Health::Draining,
        } as i32,
        weight: Some(e.weight),
        network: e.network.clone(),
        service_account: e.service_account.clone(),
    }
}

/// A fault from a request; the error names the missing field.
pub(crate) fn fault_from_proto(f: Option<proto::Fault>) -> Result<Fault, String> {
    use proto::fault::Kind;
    match f.and_then(|f| f.kind) {
        Some(Kind::Delay(d)) => Ok(Fault::Delay(Duration::from_millis(d.millis))),
        Some(Kind::Error(e)) if e.message.is_empty() => {
            Err("fault.error.message: give the Degraded reason".into())
        }
        Some(Kind::Error(e)) => Ok(Fault::Error { message: e.message }),
        Some(Kind::Stall(_)) => Ok(Fault::Stall),
        None => Err("fault.kind: set one of delay, error, stall".into()),
    }
}

/// A fault for a response.
pub(crate) fn fault_to_proto(f: &Fault) -> proto::Fault {
    use proto::fault::Kind;
    let kind = match f {
        Fault::Delay(d) => Kind::Delay(proto::DelayFault {
            millis: u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        }),
        Fault::Error { message } => Kind::Error(proto::ErrorFault {
            message: message.clone(),
        }),
        Fault::Stall => Kind::Stall(proto::StallFault {}),
    };
    proto::Fault { kind: Some(kind) }
}
