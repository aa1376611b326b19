//! Serve: tributary as an MCP config source for istiod (`docs/mcp.md`, "Serve").
//!
//! istiod with `configSources: [{address: xds://tributary:15010}]` subscribes over ADS to Istio
//! config collections (`networking.istio.io/v1alpha3/ServiceEntry`, ...). This module turns each
//! merged service into the resources of those collections: one `ServiceEntry` per hostname with
//! its endpoints inline (or, with `mcp.endpoints: workload_entries`, one `WorkloadEntry` per
//! endpoint selected by a label), each wrapped in an `istio.mcp.v1alpha1.Resource`. The snapshot
//! builder calls [`resources_for`] for exactly the hostnames a push touched, and the resources are
//! encoded once and versioned by content like Envoy's, so two replicas serve the same versions.
//!
//! It does not serve DestinationRules or VirtualServices (those collections are answered empty:
//! istiod reads rules from its own `k8s://` source, and re-serving tributary's config store would
//! hand it every rule twice), and it does not read MCP (the consume side is a config source).

mod names;
mod service_entry;
mod settings;

pub use names::{object_name, resource_name};
pub use service_entry::resources_for;
pub use settings::{EndpointMode, McpSettings};

/// The `type_url` of the `Any` wrapping every MCP resource, as istiod sends and expects it.
pub const RESOURCE_TYPE_URL: &str = "type.googleapis.com/istio.mcp.v1alpha1.Resource";

/// The label that ties a published ServiceEntry to its WorkloadEntries (`workload_entries` mode).
pub const SELECTOR_LABEL: &str = "tributary.io/service";

/// The annotation naming the registry a published object came from.
pub const REGISTRY_ANNOTATION: &str = "tributary.io/registry";
