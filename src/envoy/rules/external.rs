//! VirtualServices for names no registry knows (an external name routed to mesh services): each
//! such name gets a virtual host of its own, answering to the name bare and with `:<port>`, in the
//! route configuration of every port it routes on, as istiod gives a VirtualService host that is
//! not a service its own virtual host.
//!
//! The ports a VirtualService routes on: the `port` of its HTTP matches, and the port of each HTTP
//! destination — the destination's `port`, else every HTTP port of the destination's service.
//! Only exact names get one: a wildcard host (`*.example.com`) names no one host to answer to.

use std::collections::BTreeSet;

use envoy_types::pb::envoy::config::route::v3::VirtualHost;
use tributary_registries::Hostname;
use tributary_registries::rules::{Rule, VirtualService};

use super::RouteContext;
use super::index::resolve_host;
use super::route::virtual_service_routes;
use crate::envoy::ConfigIssue;

/// The names no registry knows that a VirtualService routes on `ctx.port`, as virtual hosts, each
/// with the object it comes from (for reports); sorted by name.
pub fn external_virtual_hosts(
    ctx: &RouteContext<'_>,
    issues: &mut Vec<ConfigIssue>,
) -> Vec<(String, VirtualHost)> {
    let mut out = Vec::new();
    for (name, vs) in ctx.rules.virtual_service_names() {
        if known(ctx, name) || !routed_ports(vs, ctx).contains(&ctx.port) {
            continue;
        }
        let routes = virtual_service_routes(vs, ctx, issues);
        if routes.is_empty() {
            continue;
        }
        out.push((
            format!("VirtualService {}", vs.key()),
            VirtualHost {
                name: format!("{name}:{}", ctx.port),
                domains: vec![name.to_string(), format!("{name}:{}", ctx.port)],
                routes,
                ..Default::default()
            },
        ));
    }
    out
}

/// The ports of the external virtual hosts of `name` (empty when a registry knows it or no
/// VirtualService names it exactly).
pub fn external_ports(ctx: &RouteContext<'_>, name: &str) -> BTreeSet<u16> {
    ctx.rules
        .virtual_service_exact(name)
        .filter(|_| !known(ctx, name))
        .map(|vs| routed_ports(vs, ctx))
        .unwrap_or_default()
}

fn known(ctx: &RouteContext<'_>, name: &str) -> bool {
    Hostname::new(name).is_ok_and(|h| ctx.services.contains_key(&h))
}

/// The ports `vs`'s HTTP routes route on.
fn routed_ports(vs: &Rule<VirtualService>, ctx: &RouteContext<'_>) -> BTreeSet<u16> {
    let mut ports = BTreeSet::new();
    for http in &vs.spec.http {
        ports.extend(
            http.match_
                .iter()
                .filter_map(|m| m.port.and_then(|p| u16::try_from(p).ok())),
        );
        for d in &http.route {
            let d = &d.destination;
            if let Some(p) = d.port.and_then(|p| u16::try_from(p.number).ok()) {
                ports.insert(p);
                continue;
            }
            let host = resolve_host(&d.host, &vs.meta.namespace);
            let Some(svc) = Hostname::new(&host).ok().and_then(|h| ctx.services.get(&h)) else {
                continue;
            };
            ports.extend(
                svc.service
                    .ports
                    .iter()
                    .filter(|p| p.protocol.is_http())
                    .map(|p| p.port),
            );
        }
    }
    ports
}
