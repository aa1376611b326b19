//! EndpointSlices → endpoints, with pod and node metadata, as istiod builds them.
//!
//! - Slices of `addressType: FQDN` and multi-cluster-services slices are ignored (as istiod does).
//! - Every address of every endpoint is one endpoint; the same address in several slices (a
//!   slice being split or migrated) is one endpoint: ports are merged and the healthiest state
//!   wins.
//! - Health from the endpoint's conditions (istiod's `endpointHealthStatus`):
//!   `ready` unset or true → healthy; else, for a service labelled
//!   `istio.io/persistent-session`, `serving` and `terminating` not false → draining; else
//!   `terminating` unset or true → **left out** (a terminating endpoint leaves EDS at once,
//!   REG-4 / BUG-1); else unhealthy.
//! - An endpoint whose `targetRef` is a pod that is not known yet is **held**: not emitted,
//!   counted (`pilot_k8s_endpoints_pending_pod`), and emitted as soon as the pod arrives.
//! - Pod labels, plus istiod's topology labels; service account as a SPIFFE id; locality from the
//!   pod's `topology.istio.io/locality` label (`.` separated), else the node's
//!   `topology.kubernetes.io/region|zone` (or the `failure-domain.beta` ones) and
//!   `topology.istio.io/subzone`, else the slice's `zone`; network from the pod's
//!   `topology.istio.io/network` label.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::{EndpointConditions, EndpointSlice};

use super::{Context, Lookup};
use crate::model::{Endpoint, Health, Locality};

/// A service label that lets terminating-but-serving endpoints stay as DRAINING.
pub(crate) const PERSISTENT_SESSION_LABEL: &str = "istio.io/persistent-session";
const MCS_SERVICE_NAME_LABEL: &str = "multicluster.kubernetes.io/service-name";
const LOCALITY_LABEL: &str = "topology.istio.io/locality";
const NETWORK_LABEL: &str = "topology.istio.io/network";
const CLUSTER_LABEL: &str = "topology.istio.io/cluster";
const REGION_LABEL: &str = "topology.kubernetes.io/region";
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
const BETA_REGION_LABEL: &str = "failure-domain.beta.kubernetes.io/region";
const BETA_ZONE_LABEL: &str = "failure-domain.beta.kubernetes.io/zone";
const SUBZONE_LABEL: &str = "topology.istio.io/subzone";
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// `(namespace, name)` of a pod.
pub(crate) type PodKey = (String, String);

/// An endpoint's state by its slice conditions, before filtering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SliceHealth {
    Healthy,
    Draining,
    Terminating,
    Unhealthy,
}

/// istiod's `endpointHealthStatus`.
pub(crate) fn slice_health(c: Option<&EndpointConditions>, persistent: bool) -> SliceHealth {
    let ready = c.and_then(|c| c.ready);
    let serving = c.and_then(|c| c.serving);
    let terminating = c.and_then(|c| c.terminating);
    if ready.unwrap_or(true) {
        SliceHealth::Healthy
    } else if persistent && serving != Some(false) && terminating != Some(false) {
        SliceHealth::Draining
    } else if terminating.unwrap_or(true) {
        SliceHealth::Terminating
    } else {
        SliceHealth::Unhealthy
    }
}

fn rank(h: Health) -> u8 {
    match h {
        Health::Healthy => 0,
        Health::Draining => 1,
        Health::Unhealthy => 2,
    }
}

/// The endpoints of one service.
#[derive(Debug, Default)]
pub(crate) struct Endpoints {
    pub(crate) list: Vec<Endpoint>,
    pub(crate) pending: usize,
    pub(crate) pods: BTreeSet<PodKey>,
    pub(crate) nodes: BTreeSet<String>,
}

fn node_locality(labels: &BTreeMap<String, String>) -> Locality {
    let get = |k: &str, beta: &str| {
        labels
            .get(k)
            .or_else(|| labels.get(beta))
            .cloned()
            .unwrap_or_default()
    };
    Locality {
        region: get(REGION_LABEL, BETA_REGION_LABEL),
        zone: get(ZONE_LABEL, BETA_ZONE_LABEL),
        subzone: labels.get(SUBZONE_LABEL).cloned().unwrap_or_default(),
    }
}

/// Converts the slices of one service in `namespace`. `port_names` maps Kubernetes port names
/// to the model's.
pub(crate) fn convert(
    namespace: &str,
    port_names: &BTreeMap<String, String>,
    slices: &[Arc<EndpointSlice>],
    lookup: &dyn Lookup,
    ctx: &Context,
    persistent: bool,
) -> Endpoints {
    let mut out = Endpoints::default();
    let mut by_address: BTreeMap<String, Endpoint> = BTreeMap::new();
    let mut slices: Vec<&Arc<EndpointSlice>> = slices.iter().collect();
    slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for slice in slices {
        let mcs = slice
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(MCS_SERVICE_NAME_LABEL));
        if slice.address_type == "FQDN" || mcs {
            continue;
        }
        let ports: BTreeMap<String, u16> = slice
            .ports
            .iter()
            .flatten()
            .filter_map(|p| {
                let model = port_names.get(p.name.as_deref().unwrap_or(""))?;
                Some((model.clone(), u16::try_from(p.port?).ok()?))
            })
            .collect();
        for e in slice.endpoints.iter().flatten() {
            let health = match slice_health(e.conditions.as_ref(), persistent) {
                SliceHealth::Healthy => Health::Healthy,
                SliceHealth::Draining => Health::Draining,
                SliceHealth::Unhealthy => Health::Unhealthy,
                SliceHealth::Terminating => continue,
            };
            let pod = match e
                .target_ref
                .as_ref()
                .filter(|r| r.kind.as_deref() == Some("Pod"))
            {
                Some(r) => {
                    let key = (
                        r.namespace.clone().unwrap_or_else(|| namespace.to_string()),
                        r.name.clone().unwrap_or_default(),
                    );
                    out.pods.insert(key.clone());
                    match lookup.pod(&key.0, &key.1) {
                        Some(pod) => Some(pod),
                        None => {
                            out.pending += e.addresses.len();
                            continue;
                        }
                    }
                }
                None => None,
            };
            let pod_labels: BTreeMap<String, String> = pod
                .as_ref()
                .and_then(|p| p.metadata.labels.clone())
                .unwrap_or_default();
            let node_name = e.node_name.clone().or_else(|| {
                pod.as_ref()
                    .and_then(|p| p.spec.as_ref()?.node_name.clone())
            });
            if let Some(n) = &node_name {
                out.nodes.insert(n.clone());
            }
            let locality = match pod_labels.get(LOCALITY_LABEL) {
                Some(l) => Locality::parse(&l.replace('.', "/")),
                None => match node_name.as_deref().and_then(|n| lookup.node(n)) {
                    Some(node) => node_locality(&node.metadata.labels.clone().unwrap_or_default()),
                    None => Locality {
                        zone: e.zone.clone().unwrap_or_default(),
                        ..Locality::default()
                    },
                },
            };
            let network = pod_labels.get(NETWORK_LABEL).cloned().unwrap_or_default();
            let service_account = pod
                .as_ref()
                .and_then(|p| p.spec.as_ref()?.service_account_name.clone())
                .filter(|sa| !sa.is_empty())
                .map(|sa| {
                    let ns = pod
                        .as_ref()
                        .and_then(|p| p.metadata.namespace.clone())
                        .unwrap_or_else(|| namespace.to_string());
                    format!("spiffe://{}/ns/{ns}/sa/{sa}", ctx.trust_domain)
                })
                .unwrap_or_default();
            let mut labels = pod_labels.clone();
            labels.insert(CLUSTER_LABEL.into(), ctx.origin.cluster.as_str().into());
            for (k, v) in [
                (REGION_LABEL, &locality.region),
                (ZONE_LABEL, &locality.zone),
                (SUBZONE_LABEL, &locality.subzone),
                (NETWORK_LABEL, &network),
            ] {
                if !v.is_empty() {
                    labels.insert(k.into(), v.clone());
                }
            }
            if let Some(n) = &node_name {
                labels.insert(HOSTNAME_LABEL.into(), n.clone());
            }
            for address in &e.addresses {
                let ep = Endpoint {
                    address: address.clone(),
                    ports: ports.clone(),
                    labels: labels.clone(),
                    locality: locality.clone(),
                    network: network.clone(),
                    service_account: service_account.clone(),
                    health,
                    weight: 1,
                    origin: ctx.origin.clone(),
                };
                match by_address.get_mut(address) {
                    None => {
                        by_address.insert(address.clone(), ep);
                    }
                    Some(existing) => {
                        for (k, v) in ep.ports {
                            existing.ports.entry(k).or_insert(v);
                        }
                        if rank(ep.health) < rank(existing.health) {
                            existing.health = ep.health;
                        }
                    }
                }
            }
        }
    }
    out.list = by_address.into_values().collect();
    out
}
