//! Traffic rules (Istio's DestinationRule and VirtualService, `tributary_registries::rules`) applied
//! to the generated resources.
//!
//! - `index`: which rule applies to which hostname, as Istio matches hosts (exact, short names in
//!   the rule's namespace, wildcards with the most specific winning);
//! - `policy`: a DestinationRule's traffic policy (subset over rule, port over both) → cluster
//!   settings: load balancer, circuit breakers, outlier detection, upstream TLS;
//! - `cluster`: the service's clusters with the policy applied, plus one subset cluster
//!   `outbound|<port>|<subset>|<host>` per subset, whose EDS holds only the endpoints whose labels
//!   match;
//! - `locality`: `localityLbSetting` → EDS priorities and locality weights for a proxy locality;
//! - `route`: a VirtualService's HTTP routes → the routes of the service's virtual host;
//! - `external`: a virtual host of its own for a VirtualService host no registry knows;
//! - `tcp`: its `tcp` and `tls` routes (and the DestinationRule's TCP idle timeout) → the TCP
//!   proxies of a TCP port's listener.
//!
//! Like the rest of `envoy`, pure functions: the snapshot builder decides what to regenerate.

mod cluster;
mod external;
mod index;
mod locality;
mod policy;
mod route;
mod tcp;

#[cfg(test)]
mod tests;

pub use cluster::{clusters_with_rule, load_assignments_with_rule};
pub use external::{external_ports, external_virtual_hosts};
pub use index::RuleIndex;
pub use locality::{LocalityInput, locality_matches};
pub(crate) use route::{CORS_FILTER, FAULT_FILTER};
pub use route::{DEFAULT_RETRY_ON, RouteContext, TrafficOptions, virtual_service_routes};
pub use tcp::{L4Routes, l4_routes, l4_routes_for_port};

use envoy_types::pb::envoy::config::route::v3::Route;
use tributary_registries::ServicePort;

use super::ConfigIssue;
use crate::aggregate::MergedService;

/// Istio's default domain suffix: a short name `reviews` in namespace `default` is
/// `reviews.default.svc.cluster.local`.
pub const DOMAIN_SUFFIX: &str = "svc.cluster.local";

/// The routes of `svc`'s virtual host on `port` under the rules: its VirtualService's routes, or
/// the default route hashed as its DestinationRule says; `None` when no rule changes the default
/// route (also when its VirtualService has no HTTP route for this port).
pub fn routes_for(
    svc: &MergedService,
    port: &ServicePort,
    ctx: &RouteContext<'_>,
    issues: &mut Vec<ConfigIssue>,
) -> Option<Vec<Route>> {
    let host = &svc.service.hostname;
    if let Some(vs) = ctx.rules.virtual_service(host) {
        let routes = virtual_service_routes(vs, ctx, issues);
        if !routes.is_empty() {
            return Some(routes);
        }
    }
    let hash = route::hash_policy_for(ctx.rules, host);
    (!hash.is_empty()).then(|| vec![route::default_route_with_hash(svc, port, hash)])
}
