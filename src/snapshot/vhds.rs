//! The VHDS form of the route configurations: for each route configuration, its copy without
//! virtual hosts (what a VHDS client gets over RDS) and one `VirtualHost` resource per virtual host
//! (`crate::envoy::split_route_config`).
//!
//! Built only for a mesh that has a VHDS client: most have none, and splitting a 360 KB route
//! configuration on every service add or delete would be work for nobody. A snapshot splits its
//! route configurations the first time a VHDS view reads them ([`super::Snapshot::resources_for`])
//! and raises its builder's demand flag; from then on every build brings the previous form in step,
//! splitting only the route configurations it changed. A virtual host whose bytes did not change
//! keeps its entry, so delta streams diff the virtual hosts as cheaply as any type.

use std::collections::HashSet;
use std::ops::Bound;
use std::sync::Arc;

use super::TypeResources;
use super::builder::{remove, upsert};
use super::history::ChangeSet;
use crate::envoy::{ResourceType, split_route_config, virtual_host_prefix};

/// The route configurations of one snapshot as VHDS clients get them.
#[derive(Debug, Clone, Default)]
pub(crate) struct VhdsForm {
    /// The route configurations without virtual hosts: same names, and they change only when one
    /// is added or removed, so the Route history covers them.
    pub(crate) routes: Arc<TypeResources>,
    /// The [`ResourceType::VirtualHost`] resources, named `<route configuration>/<virtual host>`.
    pub(crate) virtual_hosts: Arc<TypeResources>,
    /// The snapshot whose route configurations were split whole. The `VirtualHost` history is
    /// complete only after it: the builds before it recorded no virtual host.
    pub(crate) split_at: u64,
}

impl VhdsForm {
    /// Every route configuration of `routes` split, for snapshot `seq`.
    pub(crate) fn split(routes: &TypeResources, seq: u64) -> Self {
        let all = routes.entries.keys().cloned().collect();
        let start = Self {
            split_at: seq,
            ..Self::default()
        };
        // A first split is no change of the snapshot's: recorded apart, never published.
        start.follow(routes, all, &mut ChangeSet::default(), seq)
    }

    /// The form of build `seq`, this one brought in step with the route configurations `set` changed
    /// or removed in `routes`; the virtual hosts that changed are recorded in `set`.
    pub(crate) fn follow_routes(
        &self,
        routes: &TypeResources,
        set: &mut ChangeSet,
        seq: u64,
    ) -> Self {
        let touched: Vec<Arc<str>> = set.changed[ResourceType::Route.index()]
            .iter()
            .chain(&set.removed[ResourceType::Route.index()])
            .cloned()
            .collect();
        if touched.is_empty() {
            return self.clone();
        }
        self.follow(routes, touched, set, seq)
    }

    fn follow(
        &self,
        routes: &TypeResources,
        touched: Vec<Arc<str>>,
        set: &mut ChangeSet,
        seq: u64,
    ) -> Self {
        let mut vhds_routes = (*self.routes).clone();
        let mut virtual_hosts = (*self.virtual_hosts).clone();
        // The copy's changes are the route configurations' own: recorded apart, never published.
        let mut own = ChangeSet::default();
        for name in touched {
            let old = names_of(&virtual_hosts, &name);
            let Some(entry) = routes.get(&name) else {
                remove(&mut vhds_routes, &mut own, ResourceType::Route, &name);
                for vh in old {
                    remove(&mut virtual_hosts, set, ResourceType::VirtualHost, &vh);
                }
                continue;
            };
            let split = match split_route_config(&entry.resource) {
                Ok(split) => split,
                Err(e) => {
                    // Never happens with what tributary encodes; keep what VHDS clients had.
                    let route = &*name;
                    tracing::error!(route, error = %e, "cannot split route configuration for VHDS");
                    continue;
                }
            };
            upsert(&mut vhds_routes, &mut own, seq, split.route);
            let kept: HashSet<Arc<str>> = split
                .virtual_hosts
                .iter()
                .map(|vh| Arc::clone(&vh.name))
                .collect();
            for vh in old.into_iter().filter(|vh| !kept.contains(vh)) {
                remove(&mut virtual_hosts, set, ResourceType::VirtualHost, &vh);
            }
            for vh in split.virtual_hosts {
                upsert(&mut virtual_hosts, set, seq, vh);
            }
        }
        Self {
            routes: Arc::new(vhds_routes),
            virtual_hosts: Arc::new(virtual_hosts),
            split_at: self.split_at,
        }
    }
}

/// The VHDS form of build `seq`: `prev`'s brought in step with what `set` changed; every route
/// configuration split when a VHDS client asked before but `prev` has no form (it was built before
/// the ask); none while no VHDS client ever asked.
pub(super) fn next(
    prev: Option<&VhdsForm>,
    demanded: bool,
    routes: &TypeResources,
    set: &mut ChangeSet,
    seq: u64,
) -> Option<VhdsForm> {
    match prev {
        Some(prev) => Some(prev.follow_routes(routes, set, seq)),
        None if demanded => Some(VhdsForm::split(routes, seq)),
        None => None,
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
