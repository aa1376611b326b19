//! `ServiceEntry` and `WorkloadEntry` exactly as Istio users write them (`networking.istio.io`,
//! `v1` / `v1beta1` / `v1alpha3`; istio/api `networking/v1alpha3/{service_entry,workload_entry}.proto`
//! in its JSON form: camelCase fields, enums as their names).
//!
//! These types only carry what was written; every check lives in `validate`. Fields that Istio
//! defines but tributary does not use (`subjectAltNames` aside) are still accepted, so manifests
//! apply unchanged. Unknown fields are reported by the parser (errors in files, logged for CRDs,
//! whose schema the API server enforces).

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

/// The API group of both kinds.
pub const GROUP: &str = "networking.istio.io";

/// The versions Istio serves them under; all three carry the same schema.
pub const API_VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha3"];

/// The kinds the config store reads: the two that define services and endpoints, and the two
/// traffic rules (validated and converted by `crate::rules`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    /// `ServiceEntry`.
    ServiceEntry,
    /// `WorkloadEntry`.
    WorkloadEntry,
    /// `DestinationRule`.
    DestinationRule,
    /// `VirtualService`.
    VirtualService,
}

impl Kind {
    /// Every kind, in the order they are listed and watched.
    pub(crate) const ALL: [Kind; 4] = [
        Kind::ServiceEntry,
        Kind::WorkloadEntry,
        Kind::DestinationRule,
        Kind::VirtualService,
    ];

    /// The kind as written in `kind:`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::ServiceEntry => "ServiceEntry",
            Kind::WorkloadEntry => "WorkloadEntry",
            Kind::DestinationRule => "DestinationRule",
            Kind::VirtualService => "VirtualService",
        }
    }

    /// The resource's plural, as in its URLs.
    pub(crate) fn plural(self) -> &'static str {
        match self {
            Kind::ServiceEntry => "serviceentries",
            Kind::WorkloadEntry => "workloadentries",
            Kind::DestinationRule => "destinationrules",
            Kind::VirtualService => "virtualservices",
        }
    }

    /// The kind written as `name`, if it is one of ours.
    pub(crate) fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Which object: kind, namespace and name, as Kubernetes identifies it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct ObjectKey {
    pub(crate) kind: Kind,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind.name(), self.namespace, self.name)
    }
}

/// A whole object as written: the header, metadata, the spec of kind `S`, and a status.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Object<S> {
    /// `networking.istio.io/<version>`; read from the document header by the parser, declared
    /// here so that it is not an unknown field.
    #[serde(default)]
    #[allow(dead_code)]
    pub(crate) api_version: String,
    /// `ServiceEntry` or `WorkloadEntry`; as `api_version`.
    #[serde(default)]
    #[allow(dead_code)]
    pub(crate) kind: String,
    /// Name, namespace, labels, ...
    #[serde(default)]
    pub(crate) metadata: Metadata,
    /// The spec.
    #[serde(default)]
    pub(crate) spec: S,
    /// Status as the API server (or Istio's health checker) writes it.
    #[serde(default)]
    pub(crate) status: Status,
}

/// The parts of `metadata` tributary reads besides the name and namespace (which the parser reads
/// from the document header); the rest (uid, resourceVersion, managedFields, ...) is accepted and
/// ignored.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Metadata {
    #[serde(default)]
    pub(crate) labels: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) annotations: BTreeMap<String, String>,
    /// RFC 3339, as the API server writes it; orders objects that define the same host.
    #[serde(default)]
    pub(crate) creation_timestamp: Option<String>,
    /// The API server's version of the object (CRDs); shown with traffic rules.
    #[serde(default)]
    pub(crate) resource_version: Option<String>,
}

/// `status.conditions`, where Istio's WorkloadEntry health checks report `Healthy`.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Status {
    #[serde(default)]
    pub(crate) conditions: Vec<Condition>,
}

/// One status condition.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Condition {
    #[serde(default, rename = "type")]
    pub(crate) type_: String,
    #[serde(default)]
    pub(crate) status: String,
}

/// `ServiceEntry.spec`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ServiceEntrySpec {
    #[serde(default)]
    pub(crate) hosts: Vec<String>,
    #[serde(default)]
    pub(crate) addresses: Vec<String>,
    /// `Option` so that a `null` port is reported, as Istio does.
    #[serde(default)]
    pub(crate) ports: Vec<Option<PortSpec>>,
    /// `MESH_EXTERNAL` (the default) or `MESH_INTERNAL`.
    #[serde(default)]
    pub(crate) location: Option<String>,
    /// `NONE` (the default), `STATIC`, `DNS`, `DNS_ROUND_ROBIN` or `DYNAMIC_DNS`.
    #[serde(default)]
    pub(crate) resolution: Option<String>,
    #[serde(default)]
    pub(crate) endpoints: Vec<Option<WorkloadEntrySpec>>,
    #[serde(default)]
    pub(crate) workload_selector: Option<WorkloadSelector>,
    #[serde(default)]
    pub(crate) export_to: Vec<String>,
    #[serde(default)]
    pub(crate) subject_alt_names: Vec<String>,
}

/// `ServiceEntry.spec.ports[]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PortSpec {
    #[serde(default)]
    pub(crate) number: u32,
    #[serde(default)]
    pub(crate) protocol: String,
    #[serde(default)]
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) target_port: u32,
}

/// `WorkloadEntry.spec`, also the type of a ServiceEntry's inline `endpoints[]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WorkloadEntrySpec {
    #[serde(default)]
    pub(crate) address: String,
    #[serde(default)]
    pub(crate) ports: BTreeMap<String, u32>,
    #[serde(default)]
    pub(crate) labels: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) network: String,
    #[serde(default)]
    pub(crate) locality: String,
    #[serde(default)]
    pub(crate) weight: u32,
    #[serde(default)]
    pub(crate) service_account: String,
}

/// `ServiceEntry.spec.workloadSelector`.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct WorkloadSelector {
    #[serde(default)]
    pub(crate) labels: BTreeMap<String, String>,
}
