//! Deterministic merge of one hostname across registries.
//!
//! The rule (docs/architecture.md, REG-10): service attributes come from the first registry, in
//! configured order, that knows the hostname; endpoints are the union of every registry's, in
//! registry order, each keeping its origin. VIPs and service accounts are unions too, since each
//! registry or cluster contributes its own. Disagreements on the attributes that shape Envoy
//! config (ports, resolution, location) are recorded on the merged service so `/debug/registryz`
//! shows them; the first registry's view is what gets served, whatever order events arrived in.
//!
//! Endpoints of the other registries are renamed onto the merged service's ports (`ports.rs`,
//! HYB-1..HYB-4), so each keeps the port it was registered on; a merged port an endpoint cannot be
//! matched to is listed in [`MergedService::unmapped`] and that endpoint is left out of it.

use serde::Serialize;
use tributary_registries::{Endpoint, RegistryId, Service, ServiceState};

use super::ports::{UnmappedPort, map_ports, remap};

/// One hostname as the whole mesh sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MergedService {
    /// Attributes from the first registry, in configured order, that knows the hostname.
    pub service: Service,
    /// The union of every registry's endpoints, in registry order, each tagged with its origin.
    pub endpoints: Vec<Endpoint>,
    /// Every registry that knows this hostname, in configured order.
    pub registries: Vec<RegistryId>,
    /// Attribute disagreements between registries, shown in `/debug/registryz`.
    pub conflicts: Vec<String>,
    /// Merged ports that an endpoint of another registry does not serve (no port of its registry
    /// matches them, HYB-4): that endpoint is left out of those ports' clusters and reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmapped: Vec<UnmappedPort>,
}

impl MergedService {
    /// Whether endpoint `index` is left out of the merged port named `port` (HYB-4).
    pub fn is_unmapped(&self, index: usize, port: &str) -> bool {
        self.unmapped
            .iter()
            .any(|u| u.endpoint == index && u.port == port)
    }
}

/// Merges the states registries reported for one hostname, given in configured registry order.
/// `None` when no registry knows the hostname any more.
pub fn merge<'a>(states: impl IntoIterator<Item = &'a ServiceState>) -> Option<MergedService> {
    let mut states = states.into_iter();
    let first = states.next()?;
    let mut merged = MergedService {
        service: first.service.clone(),
        endpoints: first.endpoints.clone(),
        registries: vec![first.service.origin.registry.clone()],
        conflicts: Vec::new(),
        unmapped: Vec::new(),
    };
    for state in states {
        let other = &state.service;
        let base = &merged.service;
        let mut differs = Vec::new();
        if other.ports != base.ports {
            differs.push("ports");
        }
        if other.resolution != base.resolution {
            differs.push("resolution");
        }
        if other.location != base.location {
            differs.push("location");
        }
        if !differs.is_empty() {
            merged.conflicts.push(format!(
                "registry {} disagrees with {} on {}; serving {}'s definition",
                other.origin.registry,
                base.origin.registry,
                differs.join(", "),
                base.origin.registry,
            ));
        }
        for (cluster, vips) in &other.vips {
            merged
                .service
                .vips
                .entry(cluster.clone())
                .or_insert_with(|| vips.clone());
        }
        for sa in &other.service_accounts {
            if !merged.service.service_accounts.contains(sa) {
                merged.service.service_accounts.push(sa.clone());
            }
        }
        let map = map_ports(&merged.service, other);
        for ep in &state.endpoints {
            let (ep, missing) = remap(ep, &map);
            let index = merged.endpoints.len();
            merged
                .unmapped
                .extend(missing.into_iter().map(|(port, reason)| UnmappedPort {
                    endpoint: index,
                    address: ep.address.clone(),
                    registry: other.origin.registry.clone(),
                    port,
                    reason,
                }));
            merged.endpoints.push(ep);
        }
        if !merged.registries.contains(&other.origin.registry) {
            merged.registries.push(other.origin.registry.clone());
        }
    }
    merged.service.service_accounts.sort();
    Some(merged)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tributary_registries::ClusterId;

    use super::*;

    /// `a.example` from registry `r`, with a VIP and a service account of its own.
    fn state(r: &str, port: u16, ips: &[&str]) -> ServiceState {
        let mut s = super::super::tests::state(r, "a.example", port, ips);
        s.service.vips = BTreeMap::from([(ClusterId::new(r), vec!["10.0.0.1".parse().unwrap()])]);
        s.service.service_accounts = vec![format!("sa-{r}")];
        s
    }

    #[test]
    fn first_registry_wins_attributes_endpoints_are_union() {
        // REG-10: attributes from the first registry in configured order, endpoints unioned.
        let kube = state("kube", 80, &["10.1.0.1"]);
        let consul = state("consul", 8080, &["10.2.0.1", "10.2.0.2"]);
        let m = merge([&kube, &consul]).unwrap();
        assert_eq!(m.service.ports[0].port, 80);
        assert_eq!(m.service.origin.registry.as_str(), "kube");
        let addrs: Vec<_> = m.endpoints.iter().map(|e| e.address.as_str()).collect();
        assert_eq!(addrs, ["10.1.0.1", "10.2.0.1", "10.2.0.2"]);
        assert_eq!(m.endpoints[1].origin.registry.as_str(), "consul");
        assert_eq!(m.service.vips.len(), 2);
        assert_eq!(m.service.service_accounts, ["sa-consul", "sa-kube"]);
        assert_eq!(m.conflicts.len(), 1);
        assert!(m.conflicts[0].contains("ports"), "{}", m.conflicts[0]);
    }

    #[test]
    fn agreeing_registries_have_no_conflict() {
        let a = state("kube", 80, &["10.1.0.1"]);
        let b = state("consul", 80, &["10.2.0.1"]);
        assert!(merge([&a, &b]).unwrap().conflicts.is_empty());
        assert!(merge(std::iter::empty::<&ServiceState>()).is_none());
    }
}
