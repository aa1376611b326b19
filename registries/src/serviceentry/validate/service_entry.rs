//! Istio's `ValidateServiceEntry` (and tributary's own limits on ServiceEntries): hosts,
//! addresses, ports, resolution and endpoints, selector, `exportTo`.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::workload::{self};
use super::{Meta, ValidServiceEntry, Workload, port_number};
use crate::model::{Hostname, MeshLocation, Resolution, ServicePort};
use crate::serviceentry::checks::{
    FieldPath, SeProtocol, Violation, is_dns1123_label, validate_fqdn, validate_ip_subnet,
};
use crate::serviceentry::types::ServiceEntrySpec;

/// Istio's `ValidateServiceEntry`, plus tributary's own limits; the checked entry or every
/// problem found.
pub(crate) fn validate_service_entry(
    meta: Meta,
    spec: &ServiceEntrySpec,
) -> Result<ValidServiceEntry, Vec<Violation>> {
    let mut out = Vec::new();
    let at = FieldPath::spec();
    let resolution = resolution(spec, &at, &mut out);
    let location = match spec.location.as_deref().unwrap_or("") {
        "" | "MESH_EXTERNAL" => MeshLocation::MeshExternal,
        "MESH_INTERNAL" => MeshLocation::MeshInternal,
        other => {
            out.push(Violation::new(
                at.key("location"),
                format!("unsupported location {other}; use MESH_EXTERNAL or MESH_INTERNAL"),
            ));
            MeshLocation::MeshExternal
        }
    };
    let selector = spec.workload_selector.as_ref().map(|s| s.labels.clone());
    if let Some(labels) = &selector {
        for (k, v) in labels {
            let field = at.key("workloadSelector").key("labels").key(k);
            if k.is_empty() {
                out.push(Violation::new(
                    field,
                    format!("empty key is not supported in selector: \"{k}={v}\""),
                ));
            } else if k.contains('*') || v.contains('*') {
                out.push(Violation::new(
                    field,
                    format!("wildcard is not supported in selector: \"{k}={v}\""),
                ));
            }
        }
        if !spec.endpoints.is_empty() {
            out.push(Violation::new(
                at.key("workloadSelector"),
                "only one of WorkloadSelector or Endpoints is allowed in Service Entry",
            ));
        }
    }
    let hosts = hosts(spec, resolution, &at, &mut out);
    let vips = addresses(spec, resolution, &at, &mut out);
    let (ports, port_names, protocols) = ports(spec, &at, &mut out);
    let endpoints = endpoints(spec, resolution, &port_names, &at, &mut out);
    if resolution != Some(Resolution::Passthrough)
        && spec.hosts.len() > 1
        && protocols.iter().any(|p| !p.is_http() && !p.is_tls())
    {
        out.push(Violation::new(
            at.key("hosts"),
            "multiple hosts provided with non-HTTP, non-TLS ports",
        ));
    }
    export_to(
        &meta.key.namespace,
        &spec.export_to,
        &at.key("exportTo"),
        &mut out,
    );
    let Some(resolution) = resolution.filter(|_| out.is_empty()) else {
        return Err(out);
    };
    let mut subject_alt_names = spec.subject_alt_names.clone();
    subject_alt_names.sort();
    subject_alt_names.dedup();
    Ok(ValidServiceEntry {
        meta,
        hosts,
        vips,
        ports,
        location,
        resolution,
        endpoints,
        selector,
        export_to: spec.export_to.clone(),
        subject_alt_names,
    })
}

fn resolution(
    spec: &ServiceEntrySpec,
    at: &FieldPath,
    out: &mut Vec<Violation>,
) -> Option<Resolution> {
    let field = at.key("resolution");
    match spec.resolution.as_deref().unwrap_or("") {
        "" | "NONE" => Some(Resolution::Passthrough),
        "STATIC" => Some(Resolution::Static),
        "DNS" => Some(Resolution::Dns),
        "DNS_ROUND_ROBIN" => Some(Resolution::DnsRoundRobin),
        "DYNAMIC_DNS" => {
            out.push(Violation::new(
                field,
                "resolution DYNAMIC_DNS (wildcard hosts through a dynamic forward proxy) is not \
                 supported by tributary",
            ));
            None
        }
        other => {
            out.push(Violation::new(
                field,
                format!("unsupported resolution type {other}"),
            ));
            None
        }
    }
}

fn hosts(
    spec: &ServiceEntrySpec,
    resolution: Option<Resolution>,
    at: &FieldPath,
    out: &mut Vec<Violation>,
) -> Vec<Hostname> {
    if spec.hosts.is_empty() {
        out.push(Violation::new(
            at.key("hosts"),
            "service entry must have at least one host",
        ));
    }
    let dns_without_endpoints = matches!(
        resolution,
        Some(Resolution::Dns | Resolution::DnsRoundRobin)
    ) && spec.endpoints.is_empty();
    let mut seen = BTreeSet::new();
    let mut valid = Vec::new();
    for (i, host) in spec.hosts.iter().enumerate() {
        let field = at.key("hosts").index(i);
        let problem = if host == "*" {
            Some(format!("invalid host {host}"))
        } else if host.contains('*') && dns_without_endpoints {
            Some(format!(
                "hosts must be FQDN or contain only prefix wildcards if no endpoints are provided \
                 for resolution mode {}",
                spec.resolution.as_deref().unwrap_or("NONE")
            ))
        } else if host.contains('*') {
            Some(format!(
                "wildcard host {host:?} is not supported by tributary (a host names a cluster and \
                 a route domain); list the hosts"
            ))
        } else {
            validate_fqdn(host).err()
        };
        if let Some(message) = problem {
            out.push(Violation::new(field, message));
            continue;
        }
        match Hostname::new(host) {
            Ok(h) if seen.insert(h.clone()) => valid.push(h),
            Ok(_) => out.push(Violation::new(
                field,
                format!("host {host} is listed twice"),
            )),
            Err(e) => out.push(Violation::new(field, e.to_string())),
        }
    }
    valid
}

fn addresses(
    spec: &ServiceEntrySpec,
    resolution: Option<Resolution>,
    at: &FieldPath,
    out: &mut Vec<Violation>,
) -> Vec<IpAddr> {
    let mut cidr_found = false;
    let mut vips = Vec::new();
    for (i, address) in spec.addresses.iter().enumerate() {
        match validate_ip_subnet(address) {
            Ok(true) => cidr_found = true,
            Ok(false) => {
                let ip: Option<IpAddr> = address.split('/').next().and_then(|ip| ip.parse().ok());
                vips.extend(ip);
            }
            Err(e) => out.push(Violation::new(at.key("addresses").index(i), e)),
        }
    }
    let none_or_static = matches!(
        resolution,
        Some(Resolution::Passthrough | Resolution::Static)
    );
    if cidr_found && !none_or_static {
        out.push(Violation::new(
            at.key("addresses"),
            "CIDR addresses are allowed only for NONE/STATIC resolution types",
        ));
    }
    vips.sort();
    vips.dedup();
    vips
}

/// The model's ports, every port name (UDP ones too, which endpoints may name), and every
/// protocol.
fn ports(
    spec: &ServiceEntrySpec,
    at: &FieldPath,
    out: &mut Vec<Violation>,
) -> (Vec<ServicePort>, BTreeSet<String>, Vec<SeProtocol>) {
    let mut model = Vec::new();
    let mut names = BTreeSet::new();
    let mut numbers = BTreeSet::new();
    let mut protocols = Vec::new();
    for (i, port) in spec.ports.iter().enumerate() {
        let field = at.key("ports").index(i);
        let Some(port) = port else {
            out.push(Violation::new(field, "service entry port may not be null"));
            continue;
        };
        let before = out.len();
        if !names.insert(port.name.clone()) {
            out.push(Violation::new(
                field.key("name"),
                format!("service entry port name {:?} already defined", port.name),
            ));
        }
        if !numbers.insert(port.number) {
            out.push(Violation::new(
                field.key("number"),
                format!("service entry port {} already defined", port.number),
            ));
        }
        if !is_dns1123_label(&port.name) {
            out.push(Violation::new(
                field.key("name"),
                format!("invalid port name: {}", port.name),
            ));
        }
        let number = port_number(port.number, &field.key("number"), out);
        let target = match port.target_port {
            0 => None,
            t => port_number(t, &field.key("targetPort"), out),
        };
        let protocol = SeProtocol::parse(&port.protocol);
        match protocol {
            Some(p) => protocols.push(p),
            None => out.push(Violation::new(
                field.key("protocol"),
                format!("unsupported protocol: {}", port.protocol),
            )),
        }
        if out.len() > before {
            continue;
        }
        if let (Some(number), Some(protocol)) = (number, protocol.and_then(SeProtocol::to_model)) {
            model.push(ServicePort {
                name: port.name.clone(),
                port: number,
                protocol,
                target_port: target,
            });
        }
    }
    (model, names, protocols)
}

fn endpoints(
    spec: &ServiceEntrySpec,
    resolution: Option<Resolution>,
    port_names: &BTreeSet<String>,
    at: &FieldPath,
    out: &mut Vec<Violation>,
) -> Vec<Workload> {
    let field = at.key("endpoints");
    match resolution {
        Some(Resolution::Passthrough) if !spec.endpoints.is_empty() => {
            out.push(Violation::new(
                field,
                "no endpoints should be provided for resolution type none",
            ));
            return Vec::new();
        }
        Some(Resolution::DnsRoundRobin) if spec.endpoints.len() > 1 => out.push(Violation::new(
            field.clone(),
            "there must only be 0 or 1 endpoint for resolution mode DNS_ROUND_ROBIN",
        )),
        None | Some(Resolution::Passthrough) => return Vec::new(),
        _ => {}
    }
    let allow_fqdn = resolution != Some(Resolution::Static);
    let mut valid = Vec::new();
    for (i, ep) in spec.endpoints.iter().enumerate() {
        let at = field.index(i);
        let Some(ep) = ep else {
            out.push(Violation::new(at, "endpoint cannot be nil"));
            continue;
        };
        let unix = ep.address.starts_with(workload::UNIX_PREFIX);
        if unix && allow_fqdn {
            // A socket path cannot be resolved: Istio's DNS check rejects it as not an FQDN.
            out.push(Violation::new(
                at.key("address"),
                format!(
                    "endpoint address {:?} is not a valid FQDN or an IP address",
                    ep.address
                ),
            ));
            continue;
        }
        if unix && spec.ports.len() != 1 {
            out.push(Violation::new(
                at.key("address"),
                "exactly 1 service port required for unix endpoints",
            ));
        }
        let labels = ep.labels.clone();
        if let Some(w) =
            workload::validate_workload(ep, labels, Some(port_names), allow_fqdn, &at, out)
        {
            valid.push(w);
        }
    }
    valid
}

/// Istio's `validateExportTo` for a ServiceEntry (`~` allowed alone).
fn export_to(namespace: &str, export_to: &[String], at: &FieldPath, out: &mut Vec<Violation>) {
    let mut seen = BTreeSet::new();
    for (i, e) in export_to.iter().enumerate() {
        let key = if e == "." { namespace } else { e.as_str() };
        if seen.contains(key) {
            let message = match key != e {
                true => {
                    format!("duplicate entries in exportTo: . and current namespace {namespace}")
                }
                false => format!("duplicate entries in exportTo for entry {e}"),
            };
            out.push(Violation::new(at.index(i), message));
        } else if e == "~" || key == "*" || key == "." || is_dns1123_label(key) {
            seen.insert(key);
        } else {
            out.push(Violation::new(
                at.index(i),
                format!("{e:?}: only ., *, ~ or a namespace name is allowed as an exportTo entry"),
            ));
        }
    }
    if seen.contains("*") && export_to.len() > 1 {
        out.push(Violation::new(
            at.clone(),
            "cannot have both public (*) and non-public exportTo values for a resource",
        ));
    }
    if seen.contains("~") && export_to.len() > 1 {
        out.push(Violation::new(
            at.clone(),
            "cannot export service entry to no one (~) and someone",
        ));
    }
}
