//! Listeners for nodes that bind somewhere other than `0.0.0.0`.
//!
//! A node may ask, through its metadata, for its listeners to bind to another address (so several
//! Envoys can share one machine). Only the listener's socket address differs, so such a variant is
//! generated at most once per snapshot and bind address, on first use, and shared by every stream
//! with that address: still encode once, send to many.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tributary_registries::Hostname;

use super::{Entry, TypeResources};
use crate::aggregate::MergedService;
use crate::envoy::rules::L4Routes;

/// Port → the services that expose it, ordered by hostname. Persistent maps: the builder keeps
/// this index up to date in O(change) and each snapshot's copy costs O(1).
pub type PortIndex = imbl::OrdMap<u16, imbl::OrdMap<Hostname, Arc<MergedService>>>;

/// The TCP ports whose proxies traffic rules change (VirtualService `tcp`/`tls` routes, TCP idle
/// timeouts), with how they proxy.
pub type L4Index = imbl::OrdMap<u16, Arc<L4Routes>>;

/// Everything listeners are generated from: the services on each port, and the rules' L4 routes.
#[derive(Debug, Default)]
pub struct ListenerInputs {
    /// The services on each port.
    pub by_port: PortIndex,
    /// The L4 routes of the TCP ports that have some.
    pub l4: L4Index,
}

/// The listener variants of one snapshot, built lazily per bind address.
#[derive(Debug)]
pub(crate) struct BoundListeners {
    inputs: Arc<ListenerInputs>,
    /// Bind address → its listeners. Locked only to look up or insert, never across an await.
    cache: Mutex<HashMap<IpAddr, Arc<TypeResources>>>,
}

impl BoundListeners {
    pub(crate) fn new(inputs: Arc<ListenerInputs>) -> Self {
        Self {
            inputs,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn inputs(&self) -> Arc<ListenerInputs> {
        Arc::clone(&self.inputs)
    }

    /// The listeners of `default` rebound to `ip`, with the same names and `changed_seq`.
    pub(crate) fn bound_to(&self, ip: IpAddr, default: &TypeResources) -> Arc<TypeResources> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = cache.get(&ip) {
            return Arc::clone(found);
        }
        let mut out = TypeResources {
            entries: Default::default(),
            version: default.version.salted(&ip.to_string()),
        };
        for (port, services) in &self.inputs.by_port {
            let services: Vec<&MergedService> = services.values().map(|s| &**s).collect();
            let l4 = self.inputs.l4.get(port).map(|l| &**l);
            let Some(resource) =
                crate::envoy::listener_with_l4(*port, &services, ip, l4, &mut Vec::new())
            else {
                continue;
            };
            let changed_seq = default.get(&resource.name).map_or(0, |e| e.changed_seq);
            out.entries.insert(
                Arc::clone(&resource.name),
                Entry {
                    resource: Arc::new(resource),
                    changed_seq,
                },
            );
        }
        let out = Arc::new(out);
        cache.insert(ip, Arc::clone(&out));
        out
    }
}
