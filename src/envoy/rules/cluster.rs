//! A service's clusters and load assignments under its DestinationRule: the policy applied to the
//! default cluster of each port, and one subset cluster per subset and port.
//!
//! A subset cluster is generated exactly like the default one from the service with only the
//! endpoints whose labels include the subset's, then renamed `outbound|<port>|<subset>|<host>`:
//! an EDS cluster gets its own load assignment under that name, a DNS cluster carries the
//! matching endpoints inline, and a passthrough cluster has nothing to filter.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::core::v3::address;
use envoy_types::pb::envoy::config::endpoint::v3::{
    ClusterLoadAssignment, LbEndpoint, lb_endpoint::HostIdentifier,
};
use tributary_registries::rules::{DestinationRule, Rule, Subset};
use tributary_registries::{Hostname, ServicePort};

use super::locality::LocalityInput;
use super::policy::Effective;
use crate::aggregate::MergedService;
use crate::envoy::cluster::cluster_protos;
use crate::envoy::endpoint::{UNIX_PREFIX, load_assignment_protos};
use crate::envoy::naming::subset_cluster_name;
use crate::envoy::{ConfigIssue, EncodedResource, GenerateOptions, ResourceType};

/// The clusters of `svc` with `rule` applied (no rule: exactly [`crate::envoy::clusters_for`]).
pub fn clusters_with_rule(
    svc: &MergedService,
    rule: Option<&Arc<Rule<DestinationRule>>>,
    opts: &GenerateOptions,
    issues: &mut Vec<ConfigIssue>,
) -> Vec<EncodedResource> {
    let host = &svc.service.hostname;
    let mut out: Vec<EncodedResource> = Vec::new();
    for (port, mut c) in cluster_protos(svc, opts, issues) {
        let base = policy_for(rule, None, port.port);
        base.apply(&mut c, host, &port);
        out.push(encode(&c));
    }
    let Some(rule) = rule else { return out };
    for subset in &rule.spec.subsets {
        let only = subset_of(svc, subset);
        // Problems with endpoints were reported for the whole service just above.
        for (port, mut c) in cluster_protos(&only, opts, &mut Vec::new()) {
            rename(&mut c, &port, subset, host);
            policy_for(Some(rule), Some(subset), port.port).apply(&mut c, host, &port);
            out.push(encode(&c));
        }
    }
    out
}

/// The load assignments of `svc`, plus one per subset and port for EDS services.
pub fn load_assignments_with_rule(
    svc: &MergedService,
    rule: Option<&Arc<Rule<DestinationRule>>>,
    opts: &GenerateOptions,
    issues: &mut Vec<ConfigIssue>,
) -> Vec<EncodedResource> {
    let labels = EndpointLabels::of(svc);
    let mut out: Vec<EncodedResource> = load_assignment_protos(svc, opts, issues)
        .into_iter()
        .map(|(port, cla)| encode_cla(cla, &policy_for(rule, None, port.port), &labels))
        .collect();
    let Some(rule) = rule else { return out };
    for subset in &rule.spec.subsets {
        let only = subset_of(svc, subset);
        for (port, mut cla) in load_assignment_protos(&only, opts, &mut Vec::new()) {
            cla.cluster_name = subset_cluster_name(port.port, &subset.name, &svc.service.hostname);
            let policy = policy_for(Some(rule), Some(subset), port.port);
            out.push(encode_cla(cla, &policy, &labels));
        }
    }
    out
}

/// Encodes `cla`, with what its per-locality variants need when `policy` has a locality setting
/// that applies.
fn encode_cla(
    cla: ClusterLoadAssignment,
    policy: &Effective<'_>,
    labels: &EndpointLabels<'_>,
) -> EncodedResource {
    let setting = policy
        .load_balancer
        .and_then(|lb| lb.locality_lb_setting.as_ref());
    let failover = policy.outlier_detection.is_some();
    match setting.and_then(|s| LocalityInput::new(&cla, s, failover, |ep| labels.of_endpoint(ep))) {
        Some(input) => EncodedResource::encode_located(&cla.cluster_name, input),
        None => EncodedResource::encode(ResourceType::Endpoint, &cla.cluster_name, &cla),
    }
}

/// The labels of a service's endpoints by the address they have in a load assignment (an IP in
/// canonical form, or a pipe path); the first endpoint with an address wins, as in the assignment.
struct EndpointLabels<'a>(HashMap<String, &'a BTreeMap<String, String>>);

impl<'a> EndpointLabels<'a> {
    fn of(svc: &'a MergedService) -> Self {
        let mut map = HashMap::new();
        for ep in &svc.endpoints {
            let key = match ep.address.strip_prefix(UNIX_PREFIX) {
                Some(path) => path.to_string(),
                None => match ep.address.parse::<IpAddr>() {
                    Ok(ip) => ip.to_string(),
                    Err(_) => continue,
                },
            };
            map.entry(key).or_insert(&ep.labels);
        }
        Self(map)
    }

    fn of_endpoint(&self, ep: &LbEndpoint) -> BTreeMap<String, String> {
        let Some(HostIdentifier::Endpoint(e)) = &ep.host_identifier else {
            return BTreeMap::new();
        };
        let key = match e.address.as_ref().and_then(|a| a.address.as_ref()) {
            Some(address::Address::SocketAddress(s)) => &s.address,
            Some(address::Address::Pipe(p)) => &p.path,
            _ => return BTreeMap::new(),
        };
        self.0.get(key).map(|l| (*l).clone()).unwrap_or_default()
    }
}

/// The policy of the default cluster (`subset` = `None`) or of a subset cluster on `port`.
pub(super) fn policy_for<'a>(
    rule: Option<&'a Arc<Rule<DestinationRule>>>,
    subset: Option<&'a Subset>,
    port: u16,
) -> Effective<'a> {
    let base = Effective::over(
        Effective::default(),
        rule.and_then(|r| r.spec.traffic_policy.as_ref()),
        port,
    );
    Effective::over(base, subset.and_then(|s| s.traffic_policy.as_ref()), port)
}

fn encode(c: &Cluster) -> EncodedResource {
    EncodedResource::encode(ResourceType::Cluster, &c.name, c)
}

/// Gives a cluster generated for the whole service its subset name (and its EDS service name, or
/// its inline assignment's name, with it).
fn rename(c: &mut Cluster, port: &ServicePort, subset: &Subset, host: &Hostname) {
    let name = subset_cluster_name(port.port, &subset.name, host);
    if let Some(eds) = &mut c.eds_cluster_config {
        eds.service_name = name.clone();
    }
    if let Some(cla) = &mut c.load_assignment {
        cla.cluster_name = name.clone();
    }
    c.name = name;
}

/// `svc` with only the endpoints whose labels include every label of `subset` (their port
/// exceptions renumbered to match).
pub(crate) fn subset_of(svc: &MergedService, subset: &Subset) -> MergedService {
    let keep: Vec<bool> = svc
        .endpoints
        .iter()
        .map(|ep| {
            subset
                .labels
                .iter()
                .all(|(k, v)| ep.labels.get(k) == Some(v))
        })
        .collect();
    let mut new_index = Vec::with_capacity(keep.len());
    let mut next = 0;
    for k in &keep {
        new_index.push(next);
        next += usize::from(*k);
    }
    MergedService {
        service: svc.service.clone(),
        endpoints: svc
            .endpoints
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(ep, _)| ep.clone())
            .collect(),
        registries: svc.registries.clone(),
        conflicts: Vec::new(),
        unmapped: svc
            .unmapped
            .iter()
            .filter(|u| keep.get(u.endpoint).copied().unwrap_or(false))
            .map(|u| {
                let mut u = u.clone();
                u.endpoint = new_index[u.endpoint];
                u
            })
            .collect(),
    }
}
