//! Everything the registry holds → the services it serves, one per hostname, and the objects it
//! could not serve.
//!
//! Rules, each deterministic whatever order objects arrived in (REG-10):
//! - An object defined twice (the same kind, namespace and name in two files, or in a file and
//!   the cluster) is served from the first place: files by path, then the cluster. The others are
//!   reported.
//! - A ServiceEntry exported to no one (`exportTo: ["~"]`) defines no outbound service.
//! - Several ServiceEntries for one host: the oldest defines the service (creation time, then
//!   namespace/name; objects without a creation time, such as files, count as oldest), as istiod
//!   picks the oldest. Entries of the same namespace with the same ports and resolution add their
//!   endpoints (istiod merges instances per namespace and host), except DNS_ROUND_ROBIN, which
//!   keeps one endpoint. Any other entry's definition of that host is reported and not served:
//!   tributary serves every proxy the same view, so it cannot give each namespace its own.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::convert::{Context, selects, services_of, sort};
use super::store::{Entry, Place};
use super::types::ObjectKey;
use super::validate::{UNIX_PREFIX, Valid, ValidServiceEntry, Workload};
use crate::model::{Hostname, Resolution, ServiceState};
use crate::registry::Rejection;
use crate::rules::RuleSet;

/// What the registry serves, and what it rejects.
#[derive(Debug, Default, PartialEq)]
pub struct Catalog {
    /// One service per hostname.
    pub services: BTreeMap<Hostname, ServiceState>,
    /// Sorted.
    pub rejections: Vec<Rejection>,
    /// The valid DestinationRules and VirtualServices (the last valid version of each), for the
    /// config store.
    pub rules: RuleSet,
}

/// Pods (or other workloads known only by namespace and name) a selector may pick.
pub(crate) type Pods = BTreeMap<(String, String), Workload>;

/// Builds the catalog from `entries` in source precedence order (files by path, then the
/// cluster) and `pods`.
pub(crate) fn build<'a>(
    entries: impl IntoIterator<Item = &'a Entry>,
    pods: &Pods,
    ctx: &Context,
) -> Catalog {
    let mut rejections = Vec::new();
    let mut first: BTreeMap<&ObjectKey, &Place> = BTreeMap::new();
    let mut service_entries: Vec<(&ValidServiceEntry, &Place)> = Vec::new();
    let mut workloads: BTreeMap<&str, Vec<&Workload>> = BTreeMap::new();
    let mut rules = RuleSet::default();
    for entry in entries {
        rejections.extend(entry.rejections());
        if let Some(place) = first.get(&entry.key) {
            rejections.push(Rejection {
                object: entry.key.to_string(),
                source: entry.place.to_string(),
                field: "metadata.name".into(),
                message: format!("{} is also defined at {place}, which is served", entry.key),
                serving_previous: false,
            });
            continue;
        }
        first.insert(&entry.key, &entry.place);
        match entry.valid.as_deref() {
            Some(Valid::ServiceEntry(se)) => service_entries.push((se, &entry.place)),
            Some(Valid::WorkloadEntry(we)) => workloads
                .entry(we.meta.key.namespace.as_str())
                .or_default()
                .push(&we.workload),
            Some(Valid::DestinationRule(dr)) => rules.destination_rules.push(dr.clone()),
            Some(Valid::VirtualService(vs)) => rules.virtual_services.push(vs.clone()),
            None => {}
        }
    }
    for ((namespace, _), pod) in pods {
        workloads.entry(namespace.as_str()).or_default().push(pod);
    }
    service_entries.retain(|(se, _)| se.export_to != ["~"]);
    service_entries.sort_by(|(a, _), (b, _)| order(a).cmp(&order(b)));

    let mut services: BTreeMap<Hostname, ServiceState> = BTreeMap::new();
    let mut owners: BTreeMap<Hostname, &ValidServiceEntry> = BTreeMap::new();
    for (se, place) in service_entries {
        let selected: Vec<&Workload> = match se.selector {
            Some(_) => workloads
                .get(se.meta.key.namespace.as_str())
                .into_iter()
                .flatten()
                .copied()
                .filter(|w| selects(se, w))
                .collect(),
            None => Vec::new(),
        };
        for (i, state) in services_of(se, &selected, ctx).into_iter().enumerate() {
            let host = state.service.hostname.clone();
            let Some(owner) = owners.get(&host).copied() else {
                owners.insert(host.clone(), se);
                services.insert(host, state);
                continue;
            };
            let merged = services
                .get_mut(&host)
                .filter(|_| mergeable(owner, se))
                .map(|served| {
                    add_endpoints(served, state, se);
                });
            if merged.is_none() {
                rejections.push(shadowed(se, place, i, &host, owner));
            }
        }
    }
    rejections.sort();
    rejections.dedup();
    Catalog {
        services,
        rejections,
        rules,
    }
}

/// Oldest first; no creation time counts as oldest; then namespace and name.
fn order(se: &ValidServiceEntry) -> (SystemTime, &str, &str) {
    let key = &se.meta.key;
    (
        se.meta.created.unwrap_or(SystemTime::UNIX_EPOCH),
        &key.namespace,
        &key.name,
    )
}

/// Whether `later`'s endpoints join `owner`'s service for a shared host.
fn mergeable(owner: &ValidServiceEntry, later: &ValidServiceEntry) -> bool {
    let shape = |se: &ValidServiceEntry| {
        se.ports
            .iter()
            .map(|p| (p.name.clone(), p.port, p.protocol))
            .collect::<Vec<_>>()
    };
    owner.meta.key.namespace == later.meta.key.namespace
        && owner.resolution == later.resolution
        && owner.resolution != Resolution::DnsRoundRobin
        && shape(owner) == shape(later)
}

/// Adds `from`'s endpoints to `served`, with their ports spelled out (the entries' target ports
/// may differ, and the served service only knows its owner's).
fn add_endpoints(served: &mut ServiceState, from: ServiceState, se: &ValidServiceEntry) {
    for mut ep in from.endpoints {
        if !ep.address.starts_with(UNIX_PREFIX) {
            for port in &se.ports {
                let number = ep.port_for(port);
                ep.ports.insert(port.name.clone(), number);
            }
        }
        served.endpoints.push(ep);
    }
    sort(&mut served.endpoints);
}

fn shadowed(
    se: &ValidServiceEntry,
    place: &Place,
    index: usize,
    host: &Hostname,
    owner: &ValidServiceEntry,
) -> Rejection {
    let why = match owner.meta.key.namespace == se.meta.key.namespace {
        true => {
            "in the same namespace with other ports or resolution (or DNS_ROUND_ROBIN, which \
                 keeps one endpoint)"
        }
        false => "in another namespace (tributary serves one definition of a host to every proxy)",
    };
    Rejection {
        object: se.meta.key.to_string(),
        source: place.to_string(),
        field: format!("spec.hosts[{index}]"),
        message: format!(
            "host {host} is already defined by the older {} {why}; this entry's definition of it \
             is not served",
            owner.meta.key
        ),
        serving_previous: false,
    }
}

#[cfg(test)]
mod tests;
