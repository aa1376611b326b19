//! Pods as workloads a ServiceEntry's `workloadSelector` may pick (istiod lets selectors pick Pods
//! as well as WorkloadEntries in the entry's namespace).
//!
//! A Pod is selectable once it has an IP and until it terminates or finishes. Its labels, its
//! service account and its readiness (`Ready` condition → healthy, else unhealthy, so it leaves
//! EDS) come from the Pod; its locality only from the Pod's `topology.istio.io/locality` label,
//! since this source does not watch Nodes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::ClusterObject;
use crate::model::{Health, Locality};
use crate::serviceentry::validate::{Workload, sanitize_locality};

/// The Pod label that carries a locality (`region.zone.subzone`).
const LOCALITY_LABEL: &str = "topology.istio.io/locality";

/// A Pod as the watch reports it.
pub(super) fn pod_object(pod: &Pod) -> ClusterObject {
    ClusterObject::Pod {
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        workload: workload(pod),
    }
}

/// The workload a Pod stands for, or `None` when it cannot receive traffic.
pub(crate) fn workload(pod: &Pod) -> Option<Workload> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    let ip = status.pod_ip.clone().filter(|ip| !ip.is_empty())?;
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let labels: BTreeMap<String, String> = pod.labels().clone();
    let locality = labels
        .get(LOCALITY_LABEL)
        .map(|l| Locality::parse(&sanitize_locality(l)))
        .unwrap_or_default();
    Some(Workload {
        address: ip,
        ports: BTreeMap::new(),
        labels,
        network: String::new(),
        locality,
        weight: 0,
        service_account: pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        health: match ready {
            true => Health::Healthy,
            false => Health::Unhealthy,
        },
    })
}
