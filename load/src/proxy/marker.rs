//! Whether a response is the one a measurement waits for ([`Marker`]).
//!
//! A new service counts as reached when it is routable: when the proxy has the virtual host of its
//! hostname, which comes after its cluster (over SotW: CDS, then EDS, then LDS/RDS). So the marker
//! of a new service is the route configuration (RDS) response that carries the host's virtual host,
//! or for a VHDS proxy the `VirtualHost` response that does; a deleted service is gone when the
//! route configurations no longer have it (the RDS response without it, or the VHDS response that
//! removes it).

use super::vhds::VHDS;
use super::{NameList, RDS};
use crate::probe::Marker;
use crate::wire::{Response, is_host_resource};

/// What a proxy knows to test a response against a marker.
pub(super) struct Proxy<'a> {
    pub delta: bool,
    /// Takes its virtual hosts over VHDS.
    pub vhds: bool,
    /// For a SotW CDS response: the clusters it names (shared by every proxy).
    pub full_set: Option<&'a NameList>,
}

/// Whether `r`, received by `proxy`, is the response `marker` waits for. A route configuration
/// that cannot be read never matches.
pub(super) fn hits(marker: &Marker, r: &Response, proxy: &Proxy<'_>) -> bool {
    match marker {
        Marker::Carries { type_url, name } if *type_url == r.type_url => match proxy.full_set {
            Some(set) => set.names.contains(name),
            None => r.names(proxy.delta).iter().any(|n| n == name),
        },
        Marker::Routable { host } if proxy.vhds => {
            r.type_url == VHDS && r.names(true).iter().any(|n| is_host_resource(n, host))
        }
        Marker::Routable { host } => {
            r.type_url == RDS
                && r.routes_with_host(proxy.delta, host)
                    .is_ok_and(|with| with.contains(&true))
        }
        Marker::Unroutable { host } if proxy.vhds => {
            r.type_url == VHDS && r.removed.iter().any(|n| is_host_resource(n, host))
        }
        Marker::Unroutable { host } => {
            r.type_url == RDS
                && r.routes_with_host(proxy.delta, host)
                    .is_ok_and(|with| !with.is_empty() && !with.contains(&true))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
