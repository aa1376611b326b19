//! Istio's ServiceEntry and WorkloadEntry validation (`pkg/config/validation/validation.go`
//! `ValidateServiceEntry`, `validateWorkloadEntry`, `validateExportTo`, REG-11), plus the few
//! things tributary cannot serve, turning what was written into checked objects.
//!
//! Every problem is collected (not only the first), each with the field it is about, so that one
//! look at `/debug/configz` shows everything wrong with an object. Messages are Istio's where Istio
//! has one, so they can be searched for.
//!
//! Stricter than Istio, and why:
//! - wildcard hosts (`*.example.com`) are rejected: a host names a cluster and a route domain here,
//!   and tributary does not generate wildcard routes or dynamic forward proxies;
//! - `DYNAMIC_DNS` resolution is rejected for the same reason;
//! - a workload without an address (reachable only through a network gateway) is rejected:
//!   tributary does not route through network gateways.

mod service_entry;
#[cfg(test)]
mod tests;
mod workload;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use super::checks::{FieldPath, Violation, is_dns1123_label, validate_label};
use super::types::{Metadata, ObjectKey};
use crate::model::{Health, Hostname, Locality, MeshLocation, Resolution, ServicePort};
use crate::rules::{DestinationRule, Rule, VirtualService};

pub(crate) use service_entry::validate_service_entry;
pub(crate) use workload::{UNIX_PREFIX, sanitize_locality, validate_workload_entry};

/// Identity and metadata of a checked object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Meta {
    pub(crate) key: ObjectKey,
    pub(crate) labels: BTreeMap<String, String>,
    /// `None` when not written (files); such objects count as the oldest.
    pub(crate) created: Option<SystemTime>,
}

/// One instance a service can send traffic to: an inline endpoint, a WorkloadEntry or a Pod.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Workload {
    /// IP, DNS name, or `unix://` path.
    pub(crate) address: String,
    /// Service port name → its port on this workload.
    pub(crate) ports: BTreeMap<String, u16>,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) network: String,
    pub(crate) locality: Locality,
    /// 0 means unset (weight 1).
    pub(crate) weight: u32,
    /// The account name as written (not yet a SPIFFE URI).
    pub(crate) service_account: String,
    pub(crate) health: Health,
}

impl Workload {
    /// Whether only a DNS ServiceEntry may select it (its address is a name or a socket path),
    /// as istiod's `DNSServiceEntryOnly`.
    pub(crate) fn dns_only(&self) -> bool {
        self.address.parse::<IpAddr>().is_err()
    }
}

/// A ServiceEntry that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ValidServiceEntry {
    pub(crate) meta: Meta,
    pub(crate) hosts: Vec<Hostname>,
    /// Single addresses (a `/32` or `/128` block counts as one); wider CIDR blocks only shape
    /// listeners in Istio, which tributary's per-port listeners do not need.
    pub(crate) vips: Vec<IpAddr>,
    /// UDP ports are left out (no Envoy listener serves them here).
    pub(crate) ports: Vec<ServicePort>,
    pub(crate) location: MeshLocation,
    pub(crate) resolution: Resolution,
    pub(crate) endpoints: Vec<Workload>,
    pub(crate) selector: Option<BTreeMap<String, String>>,
    pub(crate) export_to: Vec<String>,
    pub(crate) subject_alt_names: Vec<String>,
}

/// A WorkloadEntry that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ValidWorkloadEntry {
    pub(crate) meta: Meta,
    /// Labels are the spec's merged with the metadata's (metadata wins), as istiod merges them.
    pub(crate) workload: Workload,
}

/// Any kind, checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Valid {
    ServiceEntry(ValidServiceEntry),
    WorkloadEntry(ValidWorkloadEntry),
    /// A traffic rule, as the snapshot builder takes it (`meta.source` is filled in by the
    /// store, which knows the place).
    DestinationRule(Arc<Rule<DestinationRule>>),
    VirtualService(Arc<Rule<VirtualService>>),
}

/// Checks the metadata every object needs: a name and namespace Kubernetes would accept, and a
/// readable creation time.
pub(crate) fn validate_meta(key: ObjectKey, meta: &Metadata, out: &mut Vec<Violation>) -> Meta {
    let at = FieldPath::default().key("metadata");
    let name_ok = key.name.len() <= 253 && key.name.split('.').all(is_dns1123_label);
    if !name_ok {
        out.push(Violation::new(
            at.key("name"),
            format!(
                "{:?} is not a valid object name (a DNS-1123 subdomain)",
                key.name
            ),
        ));
    }
    if !is_dns1123_label(&key.namespace) {
        out.push(Violation::new(
            at.key("namespace"),
            format!(
                "{:?} is not a valid namespace (a DNS-1123 label)",
                key.namespace
            ),
        ));
    }
    let created = meta.creation_timestamp.as_deref().and_then(|t| {
        let parsed = humantime::parse_rfc3339(t).ok();
        if parsed.is_none() {
            out.push(Violation::new(
                at.key("creationTimestamp"),
                format!("{t:?} is not an RFC 3339 UTC time such as 2024-05-01T10:00:00Z"),
            ));
        }
        parsed
    });
    Meta {
        key,
        labels: meta.labels.clone(),
        created,
    }
}

/// Labels of a workload, checked.
pub(crate) fn check_labels(
    labels: &BTreeMap<String, String>,
    at: &FieldPath,
    out: &mut Vec<Violation>,
) {
    for (k, v) in labels {
        if let Err(e) = validate_label(k, v) {
            out.push(Violation::new(at.key(k), e));
        }
    }
}

/// Istio's `ValidatePort`: 1..=65535.
pub(crate) fn port_number(n: u32, field: &FieldPath, out: &mut Vec<Violation>) -> Option<u16> {
    match u16::try_from(n) {
        Ok(p) if p > 0 => Some(p),
        _ => {
            out.push(Violation::new(
                field.clone(),
                format!("port number {n} must be in the range 1..65535"),
            ));
            None
        }
    }
}
