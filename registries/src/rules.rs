//! Istio's traffic rules — `DestinationRule` and `VirtualService` (`networking.istio.io/v1`,
//! `v1beta1`, `v1alpha3`) — as users write them, and Istio's validation of them.
//!
//! This module owns:
//! - the specs as written ([`DestinationRule`], [`VirtualService`] and their parts): camelCase
//!   field names and enum names exactly as in istio/api `networking/v1alpha3`, so existing YAML
//!   loads unchanged;
//! - [`Rule`]: a spec with where it came from ([`RuleMeta`]), and [`RuleSet`]: every valid rule
//!   the config sources hold, the snapshot builder's input;
//! - [`validate_destination_rule`] / [`validate_virtual_service`]: Istio's checks and messages,
//!   one [`Problem`] per thing wrong, with the field it is about.
//!
//! It does **not** read files or the Kubernetes API (the config sources do), and does not build
//! Envoy resources (the `tributary` crate's `traffic` module does).
//!
//! # Fields accepted but not applied
//!
//! Every field of the two specs is accepted so that real manifests load, but these are carried
//! only so they can be shown: `exportTo` and `workloadSelector` (every proxy sees every rule),
//! `trafficPolicy.tunnel`, `proxyProtocol`, `retryBudget`, `loadBalancer.warmupDurationSecs`,
//! `tls.credentialName` / `caCrl` / `insecureSkipVerify`, `http[].delegate`, match
//! `sourceLabels` / `sourceNamespace` / `gateways` / `statPrefix`, `tcp[].match.sourceSubnet`,
//! `destinationSubnets`. Validation rejects what would change traffic if silently ignored
//! (`ISTIO_MUTUAL` tls, gateways other than `mesh`, `delegate`); see `docs/traffic-rules.md`.

mod common;
mod destination_rule;
mod validate;
mod virtual_service;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

pub use common::{Duration, DurationError, Percent, PortSelector, StringMatch};
pub use destination_rule::{
    ClientTlsSettings, ConnectionPoolSettings, ConsistentHash, DestinationRule, Distribute,
    Failover, H2UpgradePolicy, HttpCookie, HttpSettings, LoadBalancerSettings, LocalityLbSetting,
    MaglevSettings, OutlierDetection, PortTrafficPolicy, RingHashSettings, SimpleLb, Subset,
    TcpKeepalive, TcpSettings, TlsMode, TrafficPolicy, WorkloadSelector,
};
pub use validate::{
    Problem, Severity, grpc_status_code, validate_destination_rule, validate_virtual_service,
};
pub use virtual_service::{
    Abort, CorsPolicy, Delay, Destination, DirectResponse, DirectResponseBody, HeaderOperations,
    Headers, HttpFaultInjection, HttpMatchRequest, HttpMirrorPolicy, HttpRedirect, HttpRetry,
    HttpRewrite, HttpRoute, HttpRouteDestination, L4MatchAttributes, RegexRewrite,
    RouteDestination, TcpRoute, TlsMatchAttributes, TlsRoute, VirtualService,
};

/// The API group of both kinds.
pub const GROUP: &str = "networking.istio.io";

/// The versions Istio serves both kinds under; all three carry the same schema.
pub const API_VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha3"];

/// `kind:` of a destination rule.
pub const DESTINATION_RULE_KIND: &str = "DestinationRule";

/// `kind:` of a virtual service.
pub const VIRTUAL_SERVICE_KIND: &str = "VirtualService";

/// The only gateway a virtual service may bind to here: the sidecars of the mesh.
pub const MESH_GATEWAY: &str = "mesh";

/// Where a rule came from and who it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RuleMeta {
    /// `metadata.namespace`; short hosts in the rule are read in it.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// Where it was read: `path:line` for a file, `k8s://<cluster>/<namespace>/<name>` for a CRD.
    pub source: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations`.
    pub annotations: BTreeMap<String, String>,
    /// `metadata.resourceVersion` (CRDs), empty for files.
    pub resource_version: String,
    /// `metadata.creationTimestamp` (RFC 3339) when written; rules for the same host are merged
    /// oldest first, as istiod does, and rules without one count as the oldest.
    pub creation_timestamp: Option<String>,
}

/// One rule: its spec and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rule<T> {
    pub meta: RuleMeta,
    pub spec: T,
}

impl<T> Rule<T> {
    /// `namespace/name`, how rules are named in messages.
    pub fn key(&self) -> String {
        format!("{}/{}", self.meta.namespace, self.meta.name)
    }
}

/// Every valid rule from every config source: what the snapshot builder applies.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RuleSet {
    pub destination_rules: Vec<Arc<Rule<DestinationRule>>>,
    pub virtual_services: Vec<Arc<Rule<VirtualService>>>,
}

impl RuleSet {
    /// Whether there is no rule at all.
    pub fn is_empty(&self) -> bool {
        self.destination_rules.is_empty() && self.virtual_services.is_empty()
    }
}

/// Which of the two kinds `kind` (as written in `kind:`) is, if either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuleKind {
    DestinationRule,
    VirtualService,
}

impl RuleKind {
    /// The kind written as `kind` under `api_version`, if it is one of these two and the version
    /// is one Istio serves.
    pub fn from_header(api_version: &str, kind: &str) -> Option<RuleKind> {
        let (group, version) = api_version.split_once('/')?;
        if group != GROUP || !API_VERSIONS.contains(&version) {
            return None;
        }
        match kind {
            DESTINATION_RULE_KIND => Some(RuleKind::DestinationRule),
            VIRTUAL_SERVICE_KIND => Some(RuleKind::VirtualService),
            _ => None,
        }
    }

    /// The kind as written in `kind:`.
    pub fn name(self) -> &'static str {
        match self {
            RuleKind::DestinationRule => DESTINATION_RULE_KIND,
            RuleKind::VirtualService => VIRTUAL_SERVICE_KIND,
        }
    }

    /// The resource's plural, as in its API URLs.
    pub fn plural(self) -> &'static str {
        match self {
            RuleKind::DestinationRule => "destinationrules",
            RuleKind::VirtualService => "virtualservices",
        }
    }
}
