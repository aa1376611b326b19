//! EDS: one `ClusterLoadAssignment` per port of every `Static` service, and the locality-grouped
//! endpoint lists that DNS clusters carry inline.
//!
//! The output depends on the *set* of endpoints, not on the order a registry listed them in: the
//! same endpoints always give the same bytes, hence the same version on every replica (SOTW-7) and
//! no push for a reordering resync (REG-14).

use std::collections::HashSet;
use std::net::IpAddr;

use envoy_types::pb::envoy::config::core::v3::{HealthStatus, Locality as PbLocality};
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, Endpoint as PbEndpoint, LbEndpoint, LocalityLbEndpoints,
    lb_endpoint::HostIdentifier,
};
use envoy_types::pb::google::protobuf::UInt32Value;
use tributary_registries::{Health, Hostname, Locality, Resolution, ServicePort};

use super::naming::cluster_name;
use super::pb::{pipe_address, socket_address};
use super::port_plan::distinct_ports;
use super::{ConfigIssue, EncodedResource, GenerateOptions, ResourceType};
use crate::aggregate::MergedService;

/// Prefix that marks an endpoint address as a Unix domain socket path.
pub(super) const UNIX_PREFIX: &str = "unix://";

/// The CLAs of `svc`, one per distinct port, for `Static` services; nothing for other resolutions
/// (their clusters carry endpoints inline or need none).
///
/// A port whose endpoints are all gone still gets a CLA, with empty `endpoints`: silence would
/// leave Envoy on the last list it had (SOTW-26).
pub fn load_assignments_for(
    svc: &MergedService,
    opts: &GenerateOptions,
    issues: &mut Vec<ConfigIssue>,
) -> Vec<EncodedResource> {
    load_assignment_protos(svc, opts, issues)
        .into_iter()
        .map(|(_, cla)| EncodedResource::encode(ResourceType::Endpoint, &cla.cluster_name, &cla))
        .collect()
}

/// What [`load_assignments_for`] encodes, before encoding, each with its port: traffic rules
/// make subset assignments from these (`crate::traffic`).
pub(crate) fn load_assignment_protos(
    svc: &MergedService,
    opts: &GenerateOptions,
    issues: &mut Vec<ConfigIssue>,
) -> Vec<(ServicePort, ClusterLoadAssignment)> {
    if svc.service.resolution != Resolution::Static {
        return Vec::new();
    }
    let targets = resolve_targets(svc, AddressKind::IpOrPipe, issues);
    distinct_ports(&svc.service, None)
        .into_iter()
        .map(|port| {
            let name = cluster_name(port.port, &svc.service.hostname);
            let drafts = drafts(svc, &targets, port, opts, issues);
            let cla = ClusterLoadAssignment {
                cluster_name: name,
                endpoints: group_by_locality(drafts, &svc.service.hostname, port, issues),
                ..Default::default()
            };
            (port.clone(), cla)
        })
        .collect()
}

/// What an endpoint address must be for the cluster type it goes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AddressKind {
    /// EDS: IP literals, or `unix://` paths; DNS names are dropped (REG-17).
    IpOrPipe,
    /// STRICT_DNS / LOGICAL_DNS: names or IPs the proxy resolves; a pipe cannot be resolved.
    DnsName,
}

/// Where Envoy connects for one endpoint, normalised so that equal targets compare equal.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Target {
    /// An IP literal in canonical text form, or a lower-case DNS name.
    Socket(String),
    /// A Unix domain socket path.
    Pipe(String),
}

/// Checks every endpoint address of `svc` once (not once per port, so each bad address is
/// reported once): `None` for an address that cannot go into a cluster of `kind`.
pub(super) fn resolve_targets(
    svc: &MergedService,
    kind: AddressKind,
    issues: &mut Vec<ConfigIssue>,
) -> Vec<Option<Target>> {
    svc.endpoints
        .iter()
        .enumerate()
        .map(|(i, ep)| match target(&ep.address, kind) {
            Ok(t) => Some(t),
            Err(why) => {
                issues.push(ConfigIssue {
                    object: svc.service.hostname.to_string(),
                    field: format!("endpoints[{i}].address"),
                    message: format!("{:?} {why}; the endpoint is left out", ep.address),
                });
                None
            }
        })
        .collect()
}

fn target(address: &str, kind: AddressKind) -> Result<Target, &'static str> {
    if let Some(path) = address.strip_prefix(UNIX_PREFIX) {
        return match kind {
            AddressKind::DnsName => Err("is a unix:// path, which a DNS cluster cannot resolve"),
            AddressKind::IpOrPipe if path.is_empty() => Err("is a unix:// address with no path"),
            AddressKind::IpOrPipe => Ok(Target::Pipe(path.to_string())),
        };
    }
    if let Ok(ip) = address.parse::<IpAddr>() {
        return Ok(Target::Socket(ip.to_string()));
    }
    match kind {
        AddressKind::IpOrPipe => {
            Err("is not an IP address; STATIC resolution needs IPs (or unix:// paths)")
        }
        AddressKind::DnsName => Hostname::new(address)
            .map(|h| Target::Socket(h.to_string()))
            .map_err(|_| "is neither an IP address nor a DNS name"),
    }
}

/// One endpoint that made it into a port's list, before grouping.
#[derive(Debug, Clone)]
pub(super) struct Draft<'a> {
    locality: &'a Locality,
    target: Target,
    /// 0 for pipes, which have no port.
    port: u16,
    health: HealthStatus,
    weight: u32,
}

/// The endpoints of `svc` for `port`, in merged (registry) order: bad addresses and filtered
/// health left out, and a repeated address:port kept only the first time it appears, so the first
/// registry in configured order decides its health and weight.
pub(super) fn drafts<'a>(
    svc: &'a MergedService,
    targets: &[Option<Target>],
    port: &ServicePort,
    opts: &GenerateOptions,
    issues: &mut Vec<ConfigIssue>,
) -> Vec<Draft<'a>> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, (ep, target)) in svc.endpoints.iter().zip(targets).enumerate() {
        let Some(target) = target else { continue };
        if svc.is_unmapped(i, &port.name) {
            // HYB-4: no port of the endpoint's own registry matches this one; never guess.
            issues.push(ConfigIssue {
                object: svc.service.hostname.to_string(),
                field: format!("endpoints[{i}].ports[{}]", port.name),
                message: unmapped_message(svc, i, port),
            });
            continue;
        }
        let ep_port = match target {
            Target::Pipe(_) => 0,
            Target::Socket(_) => ep.port_for(port),
        };
        if ep_port == 0 && matches!(target, Target::Socket(_)) {
            issues.push(ConfigIssue {
                object: svc.service.hostname.to_string(),
                field: format!("endpoints[{i}].ports[{}]", port.name),
                message: "port 0 cannot be connected to; the endpoint is left out".to_string(),
            });
            continue;
        }
        if !seen.insert((target, ep_port)) {
            continue;
        }
        let Some(health) = health_status(ep.health, opts) else {
            continue;
        };
        out.push(Draft {
            locality: &ep.locality,
            target: target.clone(),
            port: ep_port,
            health,
            weight: ep.weight.max(1),
        });
    }
    out
}

fn unmapped_message(svc: &MergedService, index: usize, port: &ServicePort) -> String {
    let why = svc
        .unmapped
        .iter()
        .find(|u| u.endpoint == index && u.port == port.name)
        .map(|u| {
            format!(
                "endpoint {} of registry {}: {}",
                u.address, u.registry, u.reason
            )
        })
        .unwrap_or_default();
    format!(
        "{why}; the endpoint is left out of {}",
        cluster_name(port.port, &svc.service.hostname)
    )
}

/// Registry health → EDS health; `None` means "do not send" (UNHEALTHY unless configured, as
/// istiod's `PILOT_SEND_UNHEALTHY_ENDPOINTS`).
fn health_status(health: Health, opts: &GenerateOptions) -> Option<HealthStatus> {
    match health {
        Health::Healthy => Some(HealthStatus::Healthy),
        Health::Draining => Some(HealthStatus::Draining),
        Health::Unhealthy if opts.send_unhealthy_endpoints => Some(HealthStatus::Unhealthy),
        Health::Unhealthy => None,
    }
}

/// Groups `drafts` by locality, localities and endpoints within each sorted, so the result does
/// not depend on input order.
///
/// Envoy rejects an assignment whose endpoint weights add up past `u32::MAX`; in that (absurd)
/// case weights are scaled down proportionally and the service is told.
pub(super) fn group_by_locality(
    mut drafts: Vec<Draft<'_>>,
    hostname: &Hostname,
    port: &ServicePort,
    issues: &mut Vec<ConfigIssue>,
) -> Vec<LocalityLbEndpoints> {
    if scale_weights(&mut drafts) {
        issues.push(ConfigIssue {
            object: hostname.to_string(),
            field: format!("ports[{}]", port.name),
            message: format!(
                "endpoint weights on port {} add up to more than {}; they were scaled down \
                 proportionally",
                port.port,
                u32::MAX
            ),
        });
    }
    drafts.sort_by(|a, b| (a.locality, &a.target, a.port).cmp(&(b.locality, &b.target, b.port)));
    let mut out: Vec<LocalityLbEndpoints> = Vec::new();
    let mut current: Option<&Locality> = None;
    for d in drafts {
        if current != Some(d.locality) {
            current = Some(d.locality);
            out.push(LocalityLbEndpoints {
                locality: pb_locality(d.locality),
                ..Default::default()
            });
        }
        let address = match d.target {
            Target::Socket(host) => socket_address(host, d.port),
            Target::Pipe(path) => pipe_address(path),
        };
        let lb = LbEndpoint {
            health_status: d.health as i32,
            load_balancing_weight: Some(UInt32Value { value: d.weight }),
            host_identifier: Some(HostIdentifier::Endpoint(PbEndpoint {
                address: Some(address),
                ..Default::default()
            })),
            ..Default::default()
        };
        if let Some(group) = out.last_mut() {
            group.lb_endpoints.push(lb);
        }
    }
    for group in &mut out {
        // gRPC clients drop a locality without a weight (gRFC A27, PG-7 in
        // docs/proxyless-grpc.md); Envoy ignores it unless locality-weighted balancing is on. The
        // sum of its endpoints' weights, as istiod sets it; it fits, since all weights together do.
        let sum = group
            .lb_endpoints
            .iter()
            .filter_map(|e| e.load_balancing_weight.as_ref())
            .fold(0u32, |acc, w| acc.saturating_add(w.value));
        group.load_balancing_weight = Some(UInt32Value { value: sum.max(1) });
    }
    out
}

/// Scales weights so their sum fits in a `u32`; returns whether it had to.
fn scale_weights(drafts: &mut [Draft<'_>]) -> bool {
    let sum: u64 = drafts.iter().map(|d| u64::from(d.weight)).sum();
    if sum <= u64::from(u32::MAX) {
        return false;
    }
    // Leave room for the endpoints that round down to 0 and are lifted back to 1.
    let budget = u64::from(u32::MAX) - drafts.len() as u64;
    for d in drafts.iter_mut() {
        let scaled = u64::from(d.weight) * budget / sum;
        d.weight = u32::try_from(scaled).unwrap_or(u32::MAX).max(1);
    }
    true
}

/// The locality message, or none for an endpoint with no locality (Envoy treats both alike; none
/// is smaller).
fn pb_locality(l: &Locality) -> Option<PbLocality> {
    (!l.is_empty()).then(|| PbLocality {
        region: l.region.clone(),
        zone: l.zone.clone(),
        sub_zone: l.subzone.clone(),
    })
}

#[cfg(test)]
mod tests;
