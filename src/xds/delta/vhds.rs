//! VHDS on a delta stream (`docs/architecture.md`, "Route configurations for delta clients").
//!
//! Envoy subscribes to `VirtualHost` once, with a wildcard, and files each virtual host under the
//! route configuration its name starts with. A virtual host that arrives before its route
//! configuration is dropped, and the listener of a route configuration that arrives later stays
//! warming until a virtual host of that route configuration follows it. So every RDS response is
//! followed by all the virtual hosts of each route configuration it carried, even those the client
//! was already sent: route configurations of a VHDS view change only when they are added, so this
//! costs one resend of a port's virtual hosts when the port appears.

use super::state::{DeltaBuilt, DeltaState};
use crate::envoy::ResourceType;
use crate::snapshot::{Snapshot, View, virtual_host_names_of};

/// Owes, on the `VirtualHost` state `virtual_hosts`, the virtual hosts of the route configurations
/// the RDS response `routes` carries.
pub(super) fn owe_after_routes(
    virtual_hosts: &mut DeltaState,
    routes: &DeltaBuilt,
    snap: &Snapshot,
    view: View,
) {
    let all = snap.resources_for(ResourceType::VirtualHost, view);
    for rc in &routes.resources {
        virtual_hosts.owe(virtual_host_names_of(&all, &rc.name));
    }
}
