//! Turns the abstract model into Envoy v3 resources: one file per resource type.
//!
//! Pure functions of the model, no I/O and no protocol state. Names follow Istio so that trained
//! eyes and dashboards work unchanged: clusters `outbound|<port>||<hostname>`, route configurations
//! named by port, listeners `0.0.0.0_<port>`. Anything Envoy would reject is caught here and
//! reported as a [`ConfigIssue`] against the input object, never sent (INV-7, REG-12).

mod api_listener;
mod cluster;
mod endpoint;
#[cfg(any(test, feature = "test-util"))]
pub mod fixtures;
pub mod json;
mod listener;
mod naming;
mod pb;
mod port_plan;
mod resource;
mod rest_source;
mod route;
pub mod rules;

pub use api_listener::{api_listener_name, api_listeners_for};
pub use cluster::clusters_for;
pub use endpoint::load_assignments_for;
pub use listener::{listener_for_port, listener_with_l4};
pub use naming::{cluster_name, subset_cluster_name};
pub use resource::{ContentHash, EncodedResource};
pub(crate) use resource::{put_string_field, string_field_len};
pub use rest_source::{
    REST_REFRESH_DELAY, REST_XDS_CLUSTER, RestSourceError, for_rest, rest_config_source,
};
pub use route::route_config_for_port;
pub use route::vhds::{VhdsError, VhdsSplit, split_route_config, virtual_host_prefix};
pub use route::{RouteSource, route_config_with_extra, route_config_with_rules};

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use tributary_registries::istio_api as mcp;

/// The xDS resource types tributary serves, in ADS push order (SOTW-30: CDS → EDS → LDS → RDS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum ResourceType {
    /// `envoy.config.cluster.v3.Cluster` (CDS).
    Cluster,
    /// `envoy.config.endpoint.v3.ClusterLoadAssignment` (EDS).
    Endpoint,
    /// `envoy.config.listener.v3.Listener` (LDS).
    Listener,
    /// `envoy.config.route.v3.RouteConfiguration` (RDS).
    Route,
    /// `envoy.config.route.v3.VirtualHost` (VHDS): the virtual hosts of each route configuration,
    /// one resource each, served over delta only to nodes that opt in (`crate::envoy::route::vhds`).
    VirtualHost,
    /// Istio's `ServiceEntry` collection, served over MCP (`docs/mcp.md`).
    ServiceEntry,
    /// Istio's `WorkloadEntry` collection, served over MCP.
    WorkloadEntry,
    /// Istio's `DestinationRule` collection, served over MCP.
    DestinationRule,
    /// Istio's `VirtualService` collection, served over MCP.
    VirtualService,
}

impl ResourceType {
    /// Every type, in the order one push sends them (SOTW-30).
    pub const PUSH_ORDER: [ResourceType; 4] = [
        ResourceType::Cluster,
        ResourceType::Endpoint,
        ResourceType::Listener,
        ResourceType::Route,
    ];

    /// Every type: Envoy's four in push order, VHDS after the route configurations it fills, then
    /// the MCP collections (`src/mcp/`), which only a client that asks for them (istiod) ever sees.
    pub const ALL: [ResourceType; Self::COUNT] = [
        ResourceType::Cluster,
        ResourceType::Endpoint,
        ResourceType::Listener,
        ResourceType::Route,
        ResourceType::VirtualHost,
        ResourceType::ServiceEntry,
        ResourceType::WorkloadEntry,
        ResourceType::DestinationRule,
        ResourceType::VirtualService,
    ];

    /// Number of types, for per-type arrays.
    pub const COUNT: usize = 9;

    /// Whether this is an MCP collection rather than an Envoy type.
    pub const fn is_mcp(self) -> bool {
        matches!(
            self,
            ResourceType::ServiceEntry
                | ResourceType::WorkloadEntry
                | ResourceType::DestinationRule
                | ResourceType::VirtualService
        )
    }

    /// The `type_url` of the `Any` each resource is wrapped in: the type's own for Envoy's types;
    /// for an MCP collection the wrapper `istio.mcp.v1alpha1.Resource`, as istiod sends and
    /// expects (the response's `type_url` is the collection).
    pub const fn resource_type_url(self) -> &'static str {
        match self.is_mcp() {
            true => crate::mcp::RESOURCE_TYPE_URL,
            false => self.type_url(),
        }
    }

    /// The `type_url` clients use for this type.
    pub const fn type_url(self) -> &'static str {
        match self {
            ResourceType::ServiceEntry => mcp::SERVICE_ENTRY.type_url,
            ResourceType::WorkloadEntry => mcp::WORKLOAD_ENTRY.type_url,
            ResourceType::DestinationRule => mcp::DESTINATION_RULE.type_url,
            ResourceType::VirtualService => mcp::VIRTUAL_SERVICE.type_url,
            ResourceType::Cluster => "type.googleapis.com/envoy.config.cluster.v3.Cluster",
            ResourceType::Endpoint => {
                "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
            }
            ResourceType::Listener => "type.googleapis.com/envoy.config.listener.v3.Listener",
            ResourceType::Route => "type.googleapis.com/envoy.config.route.v3.RouteConfiguration",
            ResourceType::VirtualHost => "type.googleapis.com/envoy.config.route.v3.VirtualHost",
        }
    }

    /// The type with this `type_url`, if tributary serves it. An MCP collection is found under
    /// each of its API versions (`crate::mcp::type_urls`).
    pub fn from_type_url(url: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.type_url() == url)
            .or_else(|| crate::mcp::type_urls::served(url).map(|(t, _)| t))
    }

    /// Short lower-case name used in metric labels (`cds`, `eds`, `lds`, `rds`), as istiod does.
    pub const fn short(self) -> &'static str {
        match self {
            ResourceType::Cluster => "cds",
            ResourceType::Endpoint => "eds",
            ResourceType::Listener => "lds",
            ResourceType::Route => "rds",
            ResourceType::VirtualHost => "vhds",
            ResourceType::ServiceEntry => "serviceentry",
            ResourceType::WorkloadEntry => "workloadentry",
            ResourceType::DestinationRule => "destinationrule",
            ResourceType::VirtualService => "virtualservice",
        }
    }

    /// Position in [`Self::ALL`], for per-type arrays.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Whether a SotW response must carry every resource of the subscription, so that leaving one
    /// out deletes it (LDS, CDS, and every MCP collection, which istiod reads as the full set),
    /// rather than only the changed ones (EDS, RDS). SOTW-24, SOTW-26.
    pub const fn full_state_in_sotw(self) -> bool {
        matches!(self, ResourceType::Cluster | ResourceType::Listener) || self.is_mcp()
    }

    /// Whether an empty first request means "everything" (legacy wildcard). Only LDS, CDS, VHDS
    /// and the MCP collections (istiod subscribes to them with no names), as istiod and section
    /// G-3 decide: an empty EDS/RDS request subscribes to nothing (SOTW-22). Envoy subscribes to
    /// VHDS over delta ADS with an empty first request and expects every virtual host (DELTA-22).
    pub const fn legacy_wildcard(self) -> bool {
        self.full_state_in_sotw() || matches!(self, ResourceType::VirtualHost)
    }
}

impl fmt::Display for ResourceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.short())
    }
}

/// Something in the input that could not be turned into valid Envoy config, reported against the
/// object it came from. The object is left out (or the conflicting part of it), everything else is
/// served.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ConfigIssue {
    /// The input object: a hostname, or `port <n>` for listener/route conflicts.
    pub object: String,
    /// The field or part of the object at fault, e.g. `endpoints[2].address`.
    pub field: String,
    /// What is wrong and what was done about it.
    pub message: String,
}

impl fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}): {}", self.object, self.field, self.message)
    }
}

/// Knobs that change what is generated for every proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerateOptions {
    /// Include endpoints whose health is UNHEALTHY in EDS (marked UNHEALTHY). Off by default, as
    /// istiod's `PILOT_SEND_UNHEALTHY_ENDPOINTS`.
    pub send_unhealthy_endpoints: bool,
    /// Upstream connect timeout for generated clusters.
    pub connect_timeout: Duration,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self {
            send_unhealthy_endpoints: false,
            connect_timeout: Duration::from_secs(10),
        }
    }
}
