//! RDS: the route configuration `"<port>"` of every HTTP port, one virtual host per HTTP service.
//!
//! A virtual host answers to every name a client on the mesh would put in `Host`: the hostname, its
//! VIPs, and the short names a user types (`echo`, `echo.demo`, ... for
//! `echo.demo.svc.cluster.local`), each bare and with `:<port>`. Envoy rejects a whole route
//! configuration in which one domain appears twice (istio #4845), so names are assigned here:
//!
//! - a service's own hostname is always its own (hostnames are unique on a port);
//! - a short name or VIP that is another service's hostname belongs to that service;
//! - a short name or VIP claimed by several services belongs to none of them.
//!
//! Every name a service loses is reported against it (REG-10, REG-12, BUG-14). The result depends
//! only on the set of services, not on their order.

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;

use envoy_types::pb::envoy::config::route::v3::{
    Route, RouteAction, RouteConfiguration, RouteMatch, VirtualHost, route, route_action,
    route_match,
};

use tributary_registries::ServicePort;

use super::naming::{cluster_name, route_config_name, virtual_host_name};
use super::pb::duration;
use super::port_plan::{Member, PortPlan, plan};
use super::{ConfigIssue, EncodedResource, ResourceType};
use crate::aggregate::MergedService;

/// The route configuration of `port`, or `None` when the port is not served as HTTP.
///
/// `services` are the services with a port of that number; only they are looked at. Services left
/// out of the port entirely are reported by [`super::listener_for_port`], not here, so that each
/// problem is told once; this reports the names a service lost.
pub fn route_config_for_port(
    port: u16,
    services: &[&MergedService],
    issues: &mut Vec<ConfigIssue>,
) -> Option<EncodedResource> {
    route_config_with_rules(port, services, &|_, _| None, issues)
}

/// The routes a traffic rule gives one service's virtual host on a port, in place of the default
/// route (`None`: no rule, keep the default).
pub type RouteSource<'a> = dyn Fn(&MergedService, &ServicePort) -> Option<Vec<Route>> + 'a;

/// [`route_config_for_port`], with the routes of each virtual host taken from `rules` where it
/// has some (`crate::traffic`).
pub fn route_config_with_rules(
    port: u16,
    services: &[&MergedService],
    rules: &RouteSource<'_>,
    issues: &mut Vec<ConfigIssue>,
) -> Option<EncodedResource> {
    route_config_with_extra(port, services, rules, Vec::new(), issues)
}

/// [`route_config_with_rules`], plus `extra` virtual hosts (VirtualServices for names no registry
/// knows) after the services'. A domain of theirs that a service's virtual host already answers to
/// is dropped and reported (Envoy rejects a repeated domain); one left with no domain is dropped.
pub fn route_config_with_extra(
    port: u16,
    services: &[&MergedService],
    rules: &RouteSource<'_>,
    extra: Vec<(String, VirtualHost)>,
    issues: &mut Vec<ConfigIssue>,
) -> Option<EncodedResource> {
    let (plan, _reported_by_listener) = plan(port, services);
    let PortPlan::Http(members) = plan? else {
        return None;
    };
    let owned = assign_names(port, &members, issues);
    let mut virtual_hosts: Vec<VirtualHost> = members
        .iter()
        .zip(owned)
        .map(|(m, names)| {
            let mut vh = virtual_host(port, m, names);
            if let Some(routes) = rules(m.svc, m.port) {
                vh.routes = routes;
            }
            vh
        })
        .collect();
    let mut taken: HashSet<String> = virtual_hosts
        .iter()
        .flat_map(|vh| vh.domains.iter().cloned())
        .collect();
    for (object, mut vh) in extra {
        vh.domains.retain(|d| {
            let fresh = taken.insert(d.clone());
            if !fresh {
                issues.push(ConfigIssue {
                    object: object.clone(),
                    field: "spec.hosts".to_string(),
                    message: format!(
                        "{d:?} is already a name of a service on port {port}; the service keeps it"
                    ),
                });
            }
            fresh
        });
        if !vh.domains.is_empty() {
            virtual_hosts.push(vh);
        }
    }
    let name = route_config_name(port);
    let config = RouteConfiguration {
        name: name.clone(),
        virtual_hosts,
        ..Default::default()
    };
    Some(EncodedResource::encode(
        ResourceType::Route,
        &name,
        &canonical::encode(config),
    ))
}

/// How strongly a service claims a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// The service's own hostname.
    Own,
    /// A short name or VIP, valid only while nobody else wants it.
    Alias,
}

/// The names `m` wants, own hostname first, then short names longest first, then VIPs; no repeats.
fn wanted_names(m: &Member<'_>) -> Vec<(String, Claim)> {
    let host = m.svc.service.hostname.as_str();
    let mut out = vec![(host.to_string(), Claim::Own)];
    // Every proper dot-prefix: echo.demo.svc.cluster, echo.demo.svc, echo.demo, echo.
    out.extend(
        host.match_indices('.')
            .map(|(i, _)| (host[..i].to_string(), Claim::Alias))
            .rev(),
    );
    let mut vips: Vec<&IpAddr> = m.svc.service.vips.values().flatten().collect();
    vips.sort();
    vips.dedup();
    out.extend(vips.into_iter().map(|ip| {
        let text = match ip {
            IpAddr::V4(v4) => v4.to_string(),
            // The form a client puts in `Host`, so that `[vip]:port` below is well formed.
            IpAddr::V6(v6) => format!("[{v6}]"),
        };
        (text, Claim::Alias)
    }));
    // A VIP can spell a short name too (`10.0.0.1` of `10.0.0.1.nip.io`): want it once, or the
    // service would contest its own name.
    let mut seen = HashSet::new();
    out.retain(|(name, _)| seen.insert(name.clone()));
    out
}

/// For each member (same order), the names it keeps; reports every name a member loses.
fn assign_names(
    port: u16,
    members: &[Member<'_>],
    issues: &mut Vec<ConfigIssue>,
) -> Vec<Vec<String>> {
    let wanted: Vec<Vec<(String, Claim)>> = members.iter().map(wanted_names).collect();
    let mut claims: BTreeMap<&str, Vec<(usize, Claim)>> = BTreeMap::new();
    for (i, names) in wanted.iter().enumerate() {
        for (name, claim) in names {
            claims.entry(name.as_str()).or_default().push((i, *claim));
        }
    }
    let winner = |claimants: &[(usize, Claim)]| -> Option<usize> {
        match claimants {
            [(only, _)] => Some(*only),
            _ => claimants
                .iter()
                .find(|(_, c)| *c == Claim::Own)
                .map(|(i, _)| *i),
        }
    };
    for (name, claimants) in &claims {
        let won_by = winner(claimants);
        for (loser, _) in claimants.iter().filter(|(i, _)| Some(*i) != won_by) {
            let message = match won_by {
                Some(w) => format!(
                    "{name:?} (and {name}:{port}) is the hostname of {}; it is not routed to this \
                     service",
                    members[w].svc.service.hostname
                ),
                None => {
                    let others: Vec<String> = claimants
                        .iter()
                        .filter(|(i, _)| i != loser)
                        .map(|(i, _)| members[*i].svc.service.hostname.to_string())
                        .collect();
                    format!(
                        "{name:?} (and {name}:{port}) is also wanted by {}; an ambiguous name is \
                         routed to none of them",
                        others.join(", ")
                    )
                }
            };
            let m = &members[*loser];
            issues.push(ConfigIssue {
                object: m.svc.service.hostname.to_string(),
                field: format!("ports[{}]", m.port.name),
                message,
            });
        }
    }
    wanted
        .iter()
        .enumerate()
        .map(|(i, names)| {
            names
                .iter()
                .filter(|(name, _)| claims.get(name.as_str()).and_then(|c| winner(c)) == Some(i))
                .map(|(name, _)| name.clone())
                .collect()
        })
        .collect()
}

/// The virtual host of one service: its names bare and with `:<port>`, everything to its cluster.
fn virtual_host(port: u16, m: &Member<'_>, names: Vec<String>) -> VirtualHost {
    let hostname = &m.svc.service.hostname;
    let domains = names
        .into_iter()
        .flat_map(|n| {
            let with_port = format!("{n}:{port}");
            [n, with_port]
        })
        .collect();
    VirtualHost {
        name: virtual_host_name(hostname, port),
        domains,
        routes: vec![Route {
            name: "default".to_string(),
            r#match: Some(RouteMatch {
                path_specifier: Some(route_match::PathSpecifier::Prefix("/".to_string())),
                ..Default::default()
            }),
            action: Some(route::Action::Route(RouteAction {
                cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster_name(
                    m.port.port,
                    hostname,
                ))),
                // 0s disables the 15s default, as istiod does: gRPC streams and long polls must
                // not be cut.
                timeout: Some(duration(std::time::Duration::ZERO)),
                ..Default::default()
            })),
            ..Default::default()
        }],
        ..Default::default()
    }
}

mod canonical;
pub(super) mod vhds;

#[cfg(test)]
mod tests;
