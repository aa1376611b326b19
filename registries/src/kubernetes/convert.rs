//! Kubernetes objects → the abstract model, the way istiod converts them.
//!
//! - Hostname `<name>.<namespace>.svc.<domain>`.
//! - Ports: UDP and SCTP ports are left out (Envoy's TCP/HTTP listeners cannot serve them); the
//!   protocol comes from `appProtocol` if set (`kubernetes.io/h2c` → HTTP2, `kubernetes.io/ws` →
//!   HTTP, `kubernetes.io/wss` → TCP), else from the port name's prefix before the first `-`
//!   (`http`, `http2`, `grpc`, `grpc-web` → HTTP, `tcp`, `tls`, `https`, `mongo`, `redis`, ...).
//!   Anything else is TCP: istiod would sniff the protocol, tributary serves it opaque. An
//!   unnamed port (allowed only when it is the only one) is named `port-<number>`.
//! - `ClusterIP`s are the service's VIPs in this cluster; `clusterIP: None` (headless) →
//!   passthrough resolution; `ExternalName` → DNS resolution, mesh-external, with one endpoint at
//!   the external name.
//! - Endpoints: see [`endpoints`].

mod endpoints;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, Service as KubeService};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::model::{
    Endpoint, Hostname, HostnameError, MeshLocation, Origin, Protocol, Resolution, Service,
    ServicePort, ServiceState,
};

pub(crate) use endpoints::PodKey;

/// The label that ties an EndpointSlice to its Service.
pub(crate) const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// How this cluster's objects are converted.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    /// Registry and cluster every service and endpoint carries.
    pub(crate) origin: Origin,
    /// The DNS domain, e.g. `cluster.local`.
    pub(crate) domain: String,
    /// The identity trust domain, e.g. `cluster.local`.
    pub(crate) trust_domain: String,
}

/// Pods and nodes, looked up while converting endpoints.
pub(crate) trait Lookup {
    /// The pod `namespace/name`, if known.
    fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>>;
    /// The node `name`, if known.
    fn node(&self, name: &str) -> Option<Arc<Node>>;
}

/// One service converted, with what it depended on (for re-conversion when those change).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Converted {
    /// The service and its endpoints in this cluster.
    pub(crate) state: ServiceState,
    /// Endpoints held back because their pod is not known yet.
    pub(crate) pending_pods: usize,
    /// Pods its endpoints refer to (known or not).
    pub(crate) pods: BTreeSet<PodKey>,
    /// Nodes its endpoints run on.
    pub(crate) nodes: BTreeSet<String>,
}

/// `<name>.<namespace>.svc.<domain>`.
pub(crate) fn hostname(
    name: &str,
    namespace: &str,
    domain: &str,
) -> Result<Hostname, HostnameError> {
    Hostname::new(&format!("{name}.{namespace}.svc.{domain}"))
}

/// A port's protocol, as istiod's `ConvertProtocol` decides it (minus sniffing: unknown is TCP).
pub(crate) fn protocol(name: &str, app_protocol: Option<&str>) -> Protocol {
    let name = match app_protocol {
        Some("kubernetes.io/h2c") => return Protocol::Http2,
        Some("kubernetes.io/ws") => return Protocol::Http,
        Some("kubernetes.io/wss") => return Protocol::Tcp,
        Some(app) => app,
        None => name,
    };
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("grpc-web") {
        return Protocol::Http;
    }
    match lower.split('-').next().unwrap_or("") {
        "http" | "http_proxy" => Protocol::Http,
        "http2" => Protocol::Http2,
        "grpc" => Protocol::Grpc,
        _ => Protocol::Tcp,
    }
}

/// The service's ports, and Kubernetes port name → model port name (they differ only for an
/// unnamed port).
fn ports(svc: &KubeService) -> (Vec<ServicePort>, BTreeMap<String, String>) {
    let mut out = Vec::new();
    let mut names = BTreeMap::new();
    let spec_ports = svc.spec.as_ref().and_then(|s| s.ports.as_ref());
    for p in spec_ports.into_iter().flatten() {
        if matches!(p.protocol.as_deref(), Some("UDP" | "SCTP")) {
            continue;
        }
        let Ok(number) = u16::try_from(p.port) else {
            continue;
        };
        let kube_name = p.name.clone().unwrap_or_default();
        let name = match kube_name.is_empty() {
            true => format!("port-{number}"),
            false => kube_name.clone(),
        };
        out.push(ServicePort {
            name: name.clone(),
            port: number,
            protocol: protocol(&kube_name, p.app_protocol.as_deref()),
            target_port: None,
        });
        names.insert(kube_name, name);
    }
    (out, names)
}

/// Converts one Service with the EndpointSlices labelled for it. `None` if its name does not
/// make a valid hostname (logged by the caller).
pub(crate) fn convert(
    svc: &KubeService,
    slices: &[Arc<EndpointSlice>],
    lookup: &dyn Lookup,
    ctx: &Context,
) -> Result<Converted, HostnameError> {
    let meta = &svc.metadata;
    let namespace = meta.namespace.as_deref().unwrap_or("default");
    let name = meta.name.as_deref().unwrap_or("");
    let hostname = hostname(name, namespace, &ctx.domain)?;
    let spec = svc.spec.clone().unwrap_or_default();
    let (ports, port_names) = ports(svc);
    let labels: BTreeMap<String, String> = meta.labels.clone().unwrap_or_default();
    let mut vips = BTreeMap::new();
    let mut resolution = Resolution::Static;
    let mut location = MeshLocation::MeshInternal;
    let mut converted = endpoints::Endpoints::default();

    if spec.type_.as_deref() == Some("ExternalName") {
        resolution = Resolution::Dns;
        location = MeshLocation::MeshExternal;
        if let Some(external) = spec.external_name.as_deref().filter(|n| !n.is_empty()) {
            converted.list.push(Endpoint {
                ports: ports.iter().map(|p| (p.name.clone(), p.port)).collect(),
                ..Endpoint::new(external.trim_end_matches('.'), ctx.origin.clone())
            });
        }
    } else {
        let ips: Vec<IpAddr> = match (&spec.cluster_ips, &spec.cluster_ip) {
            (Some(ips), _) if !ips.is_empty() => {
                ips.iter().filter_map(|i| i.parse().ok()).collect()
            }
            (_, Some(ip)) => ip.parse().ok().into_iter().collect(),
            _ => Vec::new(),
        };
        let headless = spec.cluster_ip.as_deref() == Some("None");
        if headless {
            resolution = Resolution::Passthrough;
        } else if !ips.is_empty() {
            vips.insert(ctx.origin.cluster.clone(), ips);
        }
        let persistent = labels.contains_key(endpoints::PERSISTENT_SESSION_LABEL);
        converted = endpoints::convert(namespace, &port_names, slices, lookup, ctx, persistent);
    }
    let service_accounts: BTreeSet<String> = converted
        .list
        .iter()
        .map(|e| e.service_account.clone())
        .filter(|sa| !sa.is_empty())
        .collect();
    Ok(Converted {
        state: ServiceState {
            service: Service {
                hostname,
                ports,
                vips,
                resolution,
                location,
                labels,
                service_accounts: service_accounts.into_iter().collect(),
                namespace: namespace.to_string(),
                export_to: Vec::new(),
                origin: ctx.origin.clone(),
            },
            endpoints: converted.list,
        },
        pending_pods: converted.pending,
        pods: converted.pods,
        nodes: converted.nodes,
    })
}
