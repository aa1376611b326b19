//! A VirtualService's `tcp` and `tls` routes → the TCP proxies of a TCP port's listener, as
//! istiod builds them for a sidecar's outbound listener.
//!
//! - `tls[]`: one filter chain per route, matched on the SNI names of its `match[].sniHosts`
//!   (the first route naming a name keeps it: Envoy rejects two chains with the same match);
//! - `tcp[]`: the first route whose match applies to the port (no match, or a match with no
//!   `port` or this port) proxies every other connection;
//! - several destinations → a weighted TCP proxy (weight 0 leaves a destination out; all
//!   omitted: equal);
//! - `connectionPool.tcp.idleTimeout` of the destination's DestinationRule → the proxy's
//!   `idle_timeout` (the longest of the destinations'), also on a port with no VirtualService.
//!
//! Not applied (stored and reported by validation as such): `destinationSubnets`, `sourceLabels`,
//! `sourceNamespace`, `sourceSubnet`.

use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{
    TcpProxy, tcp_proxy, tcp_proxy::weighted_cluster::ClusterWeight,
};
use tributary_registries::rules::{RouteDestination, Rule, VirtualService};
use tributary_registries::{Hostname, ServicePort};

use super::RouteContext;
use super::cluster::policy_for;
use super::route::destination_cluster;
use crate::aggregate::MergedService;
use crate::envoy::ConfigIssue;
use crate::envoy::naming::cluster_name;
use crate::envoy::pb::duration;
use crate::envoy::port_plan::{PortPlan, plan};

/// How a TCP port's listener proxies, when rules change it from one plain proxy to the service.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct L4Routes {
    /// Filter chains matched on SNI, in order: the server names and the proxy for them.
    pub sni: Vec<(Vec<String>, TcpProxy)>,
    /// The proxy for every other connection; `None`: the plain proxy to the service's cluster.
    pub default: Option<TcpProxy>,
}

/// The L4 routes of the TCP port `port` served to `services` (those with a port of that number);
/// `None` when the port is not served as TCP or no rule changes its plain proxy.
pub fn l4_routes_for_port(
    port: u16,
    services: &[&MergedService],
    ctx: &RouteContext<'_>,
    issues: &mut Vec<ConfigIssue>,
) -> Option<L4Routes> {
    let (Some(PortPlan::Tcp(m)), _) = plan(port, services) else {
        return None;
    };
    l4_routes(m.svc, m.port, ctx, issues)
}

/// The L4 routes of `svc`, the TCP service served on `port`; `None` when no rule changes its
/// plain proxy. Issues name the VirtualService.
pub fn l4_routes(
    svc: &MergedService,
    port: &ServicePort,
    ctx: &RouteContext<'_>,
    issues: &mut Vec<ConfigIssue>,
) -> Option<L4Routes> {
    let host = &svc.service.hostname;
    let mut out = L4Routes::default();
    if let Some(vs) = ctx.rules.virtual_service(host) {
        from_virtual_service(vs, ctx, &mut out, issues);
    }
    if out.default.is_none() {
        let idle = idle_timeout(ctx, host, None, port.port);
        if idle.is_some() {
            let cluster = cluster_name(port.port, host);
            out.default = Some(TcpProxy {
                stat_prefix: cluster.clone(),
                cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(cluster)),
                idle_timeout: idle.map(duration),
                ..Default::default()
            });
        }
    }
    (out != L4Routes::default()).then_some(out)
}

fn from_virtual_service(
    vs: &Rule<VirtualService>,
    ctx: &RouteContext<'_>,
    out: &mut L4Routes,
    issues: &mut Vec<ConfigIssue>,
) {
    let object = format!("VirtualService {}", vs.key());
    let on_port = |p: Option<u32>| p.is_none_or(|p| p == u32::from(ctx.port));
    for (i, tls) in vs.spec.tls.iter().enumerate() {
        let mut names: Vec<String> = Vec::new();
        for m in tls.match_.iter().filter(|m| on_port(m.port)) {
            for name in &m.sni_hosts {
                let taken = out.sni.iter().any(|(n, _)| n.contains(name));
                if !taken && !names.contains(name) {
                    names.push(name.clone());
                }
            }
        }
        if names.is_empty() {
            continue;
        }
        let field = format!("spec.tls[{i}]");
        if let Some(proxy) = proxy(&tls.route, vs, ctx, &object, &field, issues) {
            out.sni.push((names, proxy));
        }
    }
    let first_tcp = vs
        .spec
        .tcp
        .iter()
        .enumerate()
        .find(|(_, t)| t.match_.is_empty() || t.match_.iter().any(|m| on_port(m.port)));
    if let Some((i, tcp)) = first_tcp {
        let field = format!("spec.tcp[{i}]");
        out.default = proxy(&tcp.route, vs, ctx, &object, &field, issues);
    }
}

/// The TCP proxy to `route`'s destinations; `None` (reported) when none is usable.
fn proxy(
    route: &[RouteDestination],
    vs: &Rule<VirtualService>,
    ctx: &RouteContext<'_>,
    object: &str,
    field: &str,
    issues: &mut Vec<ConfigIssue>,
) -> Option<TcpProxy> {
    let mut dests: Vec<(String, u32)> = Vec::new();
    let mut idle: Option<std::time::Duration> = None;
    for (i, d) in route.iter().enumerate() {
        match destination_cluster(&d.destination, &vs.meta.namespace, ctx) {
            Ok((cluster, host, port)) => {
                let subset = d.destination.subset.as_deref();
                idle = idle.max(idle_timeout(ctx, &host, subset, port));
                let weight = u32::try_from(d.weight.unwrap_or(0).max(0)).unwrap_or(u32::MAX);
                dests.push((cluster, weight));
            }
            Err(message) => issues.push(ConfigIssue {
                object: object.to_string(),
                field: format!("{field}.route[{i}].destination"),
                message,
            }),
        }
    }
    let total: u64 = dests.iter().map(|d| u64::from(d.1)).sum();
    let specifier = match dests.as_slice() {
        [] => return None,
        [(cluster, _)] => tcp_proxy::ClusterSpecifier::Cluster(cluster.clone()),
        _ => tcp_proxy::ClusterSpecifier::WeightedClusters(tcp_proxy::WeightedCluster {
            clusters: dests
                .iter()
                .filter(|d| d.1 > 0 || total == 0)
                .map(|(name, weight)| ClusterWeight {
                    name: name.clone(),
                    weight: if total == 0 { 1 } else { *weight },
                    ..Default::default()
                })
                .collect(),
        }),
    };
    Some(TcpProxy {
        stat_prefix: format!("{}.{}", vs.meta.namespace, vs.meta.name),
        cluster_specifier: Some(specifier),
        idle_timeout: idle.map(duration),
        ..Default::default()
    })
}

/// `connectionPool.tcp.idleTimeout` of `host`'s DestinationRule for `port` (and `subset`).
fn idle_timeout(
    ctx: &RouteContext<'_>,
    host: &Hostname,
    subset: Option<&str>,
    port: u16,
) -> Option<std::time::Duration> {
    let rule = ctx.rules.destination_rule(host);
    let subset =
        subset.and_then(|name| rule.and_then(|r| r.spec.subsets.iter().find(|s| s.name == name)));
    policy_for(rule, subset, port)
        .connection_pool?
        .tcp
        .as_ref()?
        .idle_timeout
        .map(|d| d.get())
}
