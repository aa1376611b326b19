//! A checked ServiceEntry and the workloads it selects → one `ServiceState` per host, the way
//! istiod converts them (`pilot/pkg/serviceregistry/serviceentry/conversion.go`).
//!
//! - One service per host, all with the entry's ports, addresses (as VIPs of the registry's
//!   cluster), resolution, location, labels (the entry's metadata labels), `subjectAltNames` (as
//!   service accounts), namespace and `exportTo`.
//! - Ports keep `targetPort`: endpoints without their own port for a service port use it, and
//!   NONE resolution turns it into ORIGINAL_DST's `upstream_port_override`.
//! - Endpoints: the inline `endpoints`, or the workloads its `workloadSelector` picked; with
//!   neither, a DNS / DNS_ROUND_ROBIN entry resolves each host itself (one endpoint per host at
//!   the host's name), and a STATIC or NONE entry has no endpoints.
//! - Each endpoint: its address (`unix://` paths kept; they have no ports), its ports for the
//!   entry's port names, labels, locality, network, weight (0 → 1), health, and its service
//!   account as istiod writes it, `spiffe://<trust domain>/ns/<namespace>/sa/<account>`.
//!
//! Endpoints are sorted, so the same set in another order is no change (REG-14).

use std::collections::BTreeMap;

use super::validate::{UNIX_PREFIX, ValidServiceEntry, Workload};
use crate::model::{Endpoint, Hostname, Origin, Resolution, Service, ServiceState};

/// What every conversion needs besides the objects.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    /// Registry and cluster every service and endpoint carries.
    pub(crate) origin: Origin,
    /// Trust domain of SPIFFE identities.
    pub(crate) trust_domain: String,
}

/// Whether `se`'s `workloadSelector` picks `w`, a workload in the entry's namespace: every
/// selector label matches, and a workload addressed by name (or socket) only joins DNS entries,
/// as istiod's `DNSServiceEntryOnly`.
pub(crate) fn selects(se: &ValidServiceEntry, w: &Workload) -> bool {
    let Some(selector) = &se.selector else {
        return false;
    };
    let dns = matches!(se.resolution, Resolution::Dns | Resolution::DnsRoundRobin);
    selector.iter().all(|(k, v)| w.labels.get(k) == Some(v)) && (dns || !w.dns_only())
}

/// The services `se` defines, one per host. `selected` are the workloads its selector picked
/// (ignored when it has none).
pub(crate) fn services_of(
    se: &ValidServiceEntry,
    selected: &[&Workload],
    ctx: &Context,
) -> Vec<ServiceState> {
    let namespace = &se.meta.key.namespace;
    let workloads: Vec<&Workload> = match se.selector {
        Some(_) => selected.to_vec(),
        None => se.endpoints.iter().collect(),
    };
    let mut endpoints: Vec<Endpoint> = workloads
        .iter()
        .map(|w| endpoint(w, se, namespace, ctx))
        .collect();
    sort(&mut endpoints);
    let resolves_hosts = se.selector.is_none()
        && se.endpoints.is_empty()
        && matches!(se.resolution, Resolution::Dns | Resolution::DnsRoundRobin);
    let mut vips = BTreeMap::new();
    if !se.vips.is_empty() {
        vips.insert(ctx.origin.cluster.clone(), se.vips.clone());
    }
    se.hosts
        .iter()
        .map(|host| ServiceState {
            service: Service {
                hostname: host.clone(),
                ports: se.ports.clone(),
                vips: vips.clone(),
                resolution: se.resolution,
                location: se.location,
                labels: se.meta.labels.clone(),
                service_accounts: se.subject_alt_names.clone(),
                namespace: namespace.clone(),
                export_to: se.export_to.clone(),
                origin: ctx.origin.clone(),
            },
            endpoints: match resolves_hosts {
                true => vec![host_endpoint(host, ctx)],
                false => endpoints.clone(),
            },
        })
        .collect()
}

/// Sorts endpoints by address then ports, and drops exact repeats.
pub(crate) fn sort(endpoints: &mut Vec<Endpoint>) {
    endpoints
        .sort_by(|a, b| (&a.address, &a.ports, &a.labels).cmp(&(&b.address, &b.ports, &b.labels)));
    endpoints.dedup();
}

fn endpoint(w: &Workload, se: &ValidServiceEntry, namespace: &str, ctx: &Context) -> Endpoint {
    let ports = match w.address.starts_with(UNIX_PREFIX) {
        true => BTreeMap::new(),
        false => w
            .ports
            .iter()
            .filter(|(name, _)| se.ports.iter().any(|p| &p.name == *name))
            .map(|(name, port)| (name.clone(), *port))
            .collect(),
    };
    let service_account = match w.service_account.is_empty() {
        true => String::new(),
        false => format!(
            "spiffe://{}/ns/{namespace}/sa/{}",
            ctx.trust_domain, w.service_account
        ),
    };
    Endpoint {
        address: w.address.clone(),
        ports,
        labels: w.labels.clone(),
        locality: w.locality.clone(),
        network: w.network.clone(),
        service_account,
        health: w.health,
        weight: w.weight.max(1),
        origin: ctx.origin.clone(),
    }
}

/// The endpoint of a DNS entry without endpoints: the host itself, on each port's target port
/// (or its number), resolved by the proxy.
fn host_endpoint(host: &Hostname, ctx: &Context) -> Endpoint {
    Endpoint::new(host.to_string(), ctx.origin.clone())
}

#[cfg(test)]
mod tests;
