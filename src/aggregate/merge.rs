//! Deterministic merge of one hostname across registries.

use serde::Serialize;
use tributary_registries::{Endpoint, RegistryId, Service};

/// One hostname as the whole mesh sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MergedService {
    /// Attributes from the first registry, in configured order, that knows the hostname.
    pub service: Service,
    /// The union of every registry's endpoints, in registry order, each tagged with its origin.
    pub endpoints: Vec<Endpoint>,
    /// Every registry that knows this hostname, in configured order.
    pub registries: Vec<RegistryId>,
    /// Attribute disagreements between registries, reported once and shown in `/debug`.
    pub conflicts: Vec<String>,
}
