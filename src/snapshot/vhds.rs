//! The VHDS form of the route configurations, kept in step with them build by build: for each
//! route configuration, its copy without virtual hosts (what a VHDS client gets over RDS) and one
//! `VirtualHost` resource per virtual host (`crate::envoy::split_route_config`).
//!
//! Only the route configurations a build changed are split again; a virtual host whose bytes did
//! not change keeps its entry, so delta streams diff the virtual hosts as cheaply as any type.

use std::ops::Bound;
use std::sync::Arc;

use super::TypeResources;
use super::builder::{remove, upsert};
use super::history::ChangeSet;
use crate::envoy::{ResourceType, split_route_config, virtual_host_prefix};

/// Brings `vhds_routes` and `virtual_hosts` in step with the route configurations `set` changed
/// or removed in `routes`.
pub(super) fn follow_routes(
    routes: &TypeResources,
    vhds_routes: &mut TypeResources,
    virtual_hosts: &mut TypeResources,
    set: &mut ChangeSet,
    seq: u64,
) {
    let touched: Vec<Arc<str>> = set.changed[ResourceType::Route.index()]
        .iter()
        .chain(&set.removed[ResourceType::Route.index()])
        .cloned()
        .collect();
    // The copy's changes are the route configurations' own: recorded apart, never published.
    let mut own = ChangeSet::default();
    for name in touched {
        let old = names_of(virtual_hosts, &name);
        let Some(entry) = routes.get(&name) else {
            remove(vhds_routes, &mut own, ResourceType::Route, &name);
            for vh in old {
                remove(virtual_hosts, set, ResourceType::VirtualHost, &vh);
            }
            continue;
        };
        let split = match split_route_config(&entry.resource) {
            Ok(split) => split,
            Err(e) => {
                // Never happens with what tributary encodes; keep what VHDS clients had.
                tracing::error!(route = %name, error = %e, "cannot split route configuration for VHDS");
                continue;
            }
        };
        upsert(vhds_routes, &mut own, seq, split.route);
        let kept: std::collections::HashSet<Arc<str>> = split
            .virtual_hosts
            .iter()
            .map(|vh| Arc::clone(&vh.name))
            .collect();
        for vh in old.into_iter().filter(|vh| !kept.contains(vh)) {
            remove(virtual_hosts, set, ResourceType::VirtualHost, &vh);
        }
        for vh in split.virtual_hosts {
            upsert(virtual_hosts, set, seq, vh);
        }
    }
}

/// The VHDS resource names of route configuration `route` in `virtual_hosts`.
pub(crate) fn names_of(virtual_hosts: &TypeResources, route: &str) -> Vec<Arc<str>> {
    let prefix = virtual_host_prefix(route);
    virtual_hosts
        .entries
        .range::<_, str>((Bound::Included(prefix.as_str()), Bound::Unbounded))
        .take_while(|(n, _)| n.starts_with(&prefix))
        .map(|(n, _)| Arc::clone(n))
        .collect()
}

#[cfg(test)]
mod tests;
