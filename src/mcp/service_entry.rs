//! One merged service → its MCP resources: a `ServiceEntry`, plus a `WorkloadEntry` per endpoint
//! in `workload_entries` mode, each wrapped in an `istio.mcp.v1alpha1.Resource` and encoded once.
//!
//! Built from the generated types of Istio's own protos (`istio_api::proto`), never by hand.

use std::collections::BTreeMap;

use prost::Message;
use tributary_registries::istio_api::proto::istio::mcp::v1alpha1 as mcp;
use tributary_registries::istio_api::proto::istio::networking::v1alpha3 as net;
use tributary_registries::istio_api::{self, Collection};
use tributary_registries::{Endpoint, Health, Locality, MeshLocation, Protocol, Resolution};

use super::names::{object_name, resource_name};
use super::settings::{EndpointMode, McpSettings};
use super::{REGISTRY_ANNOTATION, SELECTOR_LABEL};
use crate::aggregate::MergedService;
use crate::envoy::{ContentHash, EncodedResource, ResourceType};

/// The MCP resources of `svc` under `settings`: none when the service is left out (a skipped
/// host suffix or registry).
pub fn resources_for(svc: &MergedService, settings: &McpSettings) -> Vec<EncodedResource> {
    let service = &svc.service;
    let host = service.hostname.as_str();
    let registry = service.origin.registry.as_str();
    let skipped = settings
        .skip_host_suffixes
        .iter()
        .any(|s| host.ends_with(s.as_str()))
        || settings.skip_registries.iter().any(|r| r == registry);
    if skipped {
        return Vec::new();
    }
    let namespace = match service.namespace.is_empty() {
        true => settings.default_namespace.as_str(),
        false => service.namespace.as_str(),
    };
    let name = object_name(&[registry, host]);
    let published: Vec<(usize, &Endpoint)> = svc
        .endpoints
        .iter()
        .enumerate()
        .filter(|(_, e)| settings.include_unhealthy || e.health == Health::Healthy)
        .collect();
    let annotations = BTreeMap::from([(REGISTRY_ANNOTATION.to_string(), registry.to_string())]);
    let mut entry = net::ServiceEntry {
        hosts: vec![host.to_string()],
        addresses: service
            .vips
            .values()
            .flatten()
            .map(ToString::to_string)
            .collect(),
        ports: service
            .ports
            .iter()
            .map(|p| net::ServicePort {
                number: u32::from(p.port),
                protocol: protocol(p.protocol).to_string(),
                name: p.name.clone(),
                target_port: p.target_port.map(u32::from).unwrap_or_default(),
            })
            .collect(),
        location: location(service.location) as i32,
        resolution: resolution(service.resolution) as i32,
        export_to: service.export_to.clone(),
        subject_alt_names: service.service_accounts.clone(),
        ..Default::default()
    };
    let mut out = Vec::new();
    match settings.endpoints {
        EndpointMode::Inline => {
            entry.endpoints = published
                .iter()
                .map(|&(i, e)| workload(svc, i, e))
                .collect();
        }
        EndpointMode::WorkloadEntries => {
            let selector = selector_value(&name);
            entry.workload_selector = Some(net::WorkloadSelector {
                labels: BTreeMap::from([(SELECTOR_LABEL.to_string(), selector.clone())]),
            });
            let mut used = BTreeMap::new();
            for &(i, e) in &published {
                let mut we = workload(svc, i, e);
                we.labels
                    .insert(SELECTOR_LABEL.to_string(), selector.clone());
                let mut we_name = object_name(&[registry, host, &e.address]);
                // Two endpoints at one address (two registries, two clusters) stay two objects.
                let seen: &mut u32 = used.entry(we_name.clone()).or_default();
                *seen += 1;
                if *seen > 1 {
                    we_name = object_name(&[&we_name, &seen.to_string()]);
                }
                let labels = we.labels.clone().into_iter().collect();
                out.push(encode(
                    ResourceType::WorkloadEntry,
                    &istio_api::WORKLOAD_ENTRY,
                    &resource_name(namespace, &we_name),
                    &we,
                    labels,
                    annotations.clone(),
                ));
            }
        }
    }
    let labels = service.labels.clone();
    out.push(encode(
        ResourceType::ServiceEntry,
        &istio_api::SERVICE_ENTRY,
        &resource_name(namespace, &name),
        &entry,
        labels,
        annotations,
    ));
    out
}

/// Endpoint `index` of `svc` as a `WorkloadEntry` (inline or standalone): its port for each
/// service port it serves (left out where it serves none, HYB-4), labels, locality, network,
/// service account and weight.
fn workload(svc: &MergedService, index: usize, e: &Endpoint) -> net::WorkloadEntry {
    net::WorkloadEntry {
        address: e.address.clone(),
        ports: svc
            .service
            .ports
            .iter()
            .filter(|p| !svc.is_unmapped(index, &p.name))
            .map(|p| (p.name.clone(), u32::from(e.port_for(p))))
            .collect(),
        labels: e.labels.clone().into_iter().collect(),
        network: e.network.clone(),
        locality: locality(&e.locality),
        weight: e.weight,
        service_account: e.service_account.clone(),
    }
}

/// Wraps `spec` in an MCP `Resource` named `name`, versioned by the body's content.
fn encode<M: Message>(
    ty: ResourceType,
    collection: &Collection,
    name: &str,
    spec: &M,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
) -> EncodedResource {
    let body = spec.encode_to_vec();
    let resource = mcp::Resource {
        metadata: Some(mcp::Metadata {
            name: name.to_string(),
            create_time: None,
            // Content-derived, so every replica gives istiod the same resourceVersion.
            version: ContentHash::of(&body).to_string(),
            labels: labels.into_iter().collect(),
            annotations: annotations.into_iter().collect(),
        }),
        body: Some(prost_types::Any {
            type_url: collection.body_type_url(),
            value: body,
        }),
    };
    EncodedResource::encode(ty, name, &resource)
}

/// The selector label's value for ServiceEntry `name`: a hash, as a label value is at most 63
/// characters and the name may be longer.
fn selector_value(name: &str) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(name.as_bytes()))
}

/// Istio's protocol names.
fn protocol(p: Protocol) -> &'static str {
    match p {
        Protocol::Http => "HTTP",
        Protocol::Http2 => "HTTP2",
        Protocol::Grpc => "GRPC",
        Protocol::Tcp => "TCP",
    }
}

fn location(l: MeshLocation) -> net::service_entry::Location {
    match l {
        MeshLocation::MeshInternal => net::service_entry::Location::MeshInternal,
        MeshLocation::MeshExternal => net::service_entry::Location::MeshExternal,
    }
}

fn resolution(r: Resolution) -> net::service_entry::Resolution {
    match r {
        Resolution::Static => net::service_entry::Resolution::Static,
        Resolution::Dns => net::service_entry::Resolution::Dns,
        Resolution::DnsRoundRobin => net::service_entry::Resolution::DnsRoundRobin,
        Resolution::Passthrough => net::service_entry::Resolution::None,
    }
}

/// `region/zone/subzone` without trailing empty parts, as Istio writes a locality.
fn locality(l: &Locality) -> String {
    let parts = [&l.region, &l.zone, &l.subzone];
    let last = parts.iter().rposition(|p| !p.is_empty());
    match last {
        Some(n) => parts[..=n]
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join("/"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests;
