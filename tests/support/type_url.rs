//! The type URLs of the resources tributary serves, as literal strings: a test that spells the
//! wire value out fails if the crate's own constant ever drifts from it.

/// `envoy.config.cluster.v3.Cluster` (CDS).
pub const CDS: &str = "type.googleapis.com/envoy.config.cluster.v3.Cluster";
/// `envoy.config.endpoint.v3.ClusterLoadAssignment` (EDS).
pub const EDS: &str = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment";
/// `envoy.config.listener.v3.Listener` (LDS).
pub const LDS: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
/// `envoy.config.route.v3.RouteConfiguration` (RDS).
pub const RDS: &str = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration";
