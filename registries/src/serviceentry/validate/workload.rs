//! Checks shared by a ServiceEntry's inline `endpoints[]` and WorkloadEntry objects (Istio's
//! `validateWorkloadEntry`), and the conversion of a WorkloadEntry to a [`Workload`].

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use super::{FieldPath, Meta, ValidWorkloadEntry, Violation, Workload, check_labels, port_number};
use crate::model::{Health, Locality};
use crate::serviceentry::checks::{is_dns1123_label, validate_fqdn, validate_unix_address};
use crate::serviceentry::types::{Status, WorkloadEntrySpec};

/// Prefix of a Unix domain socket address.
pub(crate) const UNIX_PREFIX: &str = "unix://";

/// The annotation that turns on Istio's WorkloadEntry health checks; health then comes from the
/// `Healthy` status condition (`pilot/pkg/model/status/workloadentry.go`).
const HEALTH_CHECKS_ANNOTATION: &str = "proxy.istio.io/health-checks-enabled";

/// The status condition Istio's health checks write.
const HEALTHY_CONDITION: &str = "Healthy";

/// The label a workload's locality may come from when `locality` is not set (Istio's
/// `topology.istio.io/locality`, then the legacy `istio-locality`), written with `.` separators
/// because label values cannot hold `/`.
const LOCALITY_LABELS: [&str; 2] = ["topology.istio.io/locality", "istio-locality"];

/// Checks one workload spec. `port_names` are the ServiceEntry's port names, when known (inline
/// endpoints); `allow_fqdn` says whether the address may be a DNS name (any resolution but
/// STATIC). `labels` are the labels it carries (a WorkloadEntry's merged ones).
pub(crate) fn validate_workload(
    spec: &WorkloadEntrySpec,
    labels: BTreeMap<String, String>,
    port_names: Option<&BTreeSet<String>>,
    allow_fqdn: bool,
    at: &FieldPath,
    out: &mut Vec<Violation>,
) -> Option<Workload> {
    let before = out.len();
    let address = spec.address.as_str();
    let field = at.key("address");
    if address.is_empty() {
        let message = match spec.network.is_empty() {
            true => "address is required".to_string(),
            false => format!(
                "address is unset (reachable only through network {:?}'s gateway); tributary does \
                 not route through network gateways",
                spec.network
            ),
        };
        out.push(Violation::new(field, message));
    } else if let Some(path) = address.strip_prefix(UNIX_PREFIX) {
        if let Err(e) = validate_unix_address(path) {
            out.push(Violation::new(field, e));
        }
        if !spec.ports.is_empty() {
            out.push(Violation::new(
                at.key("ports"),
                format!("unix endpoint {address} must not include ports"),
            ));
        }
    } else if address.parse::<IpAddr>().is_err() {
        if !allow_fqdn {
            out.push(Violation::new(
                field,
                format!("endpoint address {address:?} is not a valid IP address"),
            ));
        } else if validate_fqdn(address).is_err() {
            out.push(Violation::new(
                field,
                format!("endpoint address {address:?} is not a valid FQDN or an IP address"),
            ));
        }
    }
    let mut ports = BTreeMap::new();
    for (name, &port) in &spec.ports {
        let field = at.key("ports").key(name);
        if let Some(names) = port_names
            && !names.contains(name)
        {
            out.push(Violation::new(
                field.clone(),
                format!("endpoint port {port} is not defined by the service entry"),
            ));
        }
        if !is_dns1123_label(name) {
            out.push(Violation::new(
                field.clone(),
                format!("invalid port name: {name}"),
            ));
        }
        if let Some(p) = port_number(port, &field, out) {
            ports.insert(name.clone(), p);
        }
    }
    check_labels(&spec.labels, &at.key("labels"), out);
    if out.len() > before {
        return None;
    }
    let locality = match spec.locality.is_empty() {
        false => Locality::parse(&spec.locality),
        true => LOCALITY_LABELS
            .iter()
            .find_map(|l| labels.get(*l))
            .map(|v| Locality::parse(&sanitize_locality(v)))
            .unwrap_or_default(),
    };
    Some(Workload {
        address: address.to_string(),
        ports,
        labels,
        network: spec.network.clone(),
        locality,
        weight: spec.weight,
        service_account: spec.service_account.clone(),
        health: Health::Healthy,
    })
}

/// `us.east.a` → `us/east/a`, unless it already uses `/` (Istio's `SanitizeLocalityLabel`).
pub(crate) fn sanitize_locality(label: &str) -> String {
    match label.contains('/') {
        true => label.to_string(),
        false => label.replace('.', "/"),
    }
}

/// Istio's `ValidateWorkloadEntry` (no ServiceEntry known, so any address form is allowed and
/// port names are not checked against one), then the workload it stands for.
pub(crate) fn validate_workload_entry(
    meta: Meta,
    annotations: &BTreeMap<String, String>,
    status: &Status,
    spec: &WorkloadEntrySpec,
) -> Result<ValidWorkloadEntry, Vec<Violation>> {
    let mut out = Vec::new();
    // istiod merges the spec's labels with the metadata's, the metadata's winning.
    let mut labels = spec.labels.clone();
    labels.extend(meta.labels.clone());
    let workload = validate_workload(spec, labels, None, true, &FieldPath::spec(), &mut out);
    match workload {
        Some(mut workload) if out.is_empty() => {
            workload.health = health(annotations, status);
            Ok(ValidWorkloadEntry { meta, workload })
        }
        _ => Err(out),
    }
}

/// Healthy unless Istio's health checks are on for the entry and its `Healthy` condition is not
/// `True` (a new entry with checks on is unhealthy until a probe succeeds, as in istiod).
fn health(annotations: &BTreeMap<String, String>, status: &Status) -> Health {
    let checked = annotations
        .get(HEALTH_CHECKS_ANNOTATION)
        .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    if !checked {
        return Health::Healthy;
    }
    let healthy = status
        .conditions
        .iter()
        .any(|c| c.type_ == HEALTHY_CONDITION && c.status.eq_ignore_ascii_case("true"));
    match healthy {
        true => Health::Healthy,
        false => Health::Unhealthy,
    }
}
