//! The registries' metrics, named and described in one place. Kubernetes watch events and Istio
//! config objects are counted under istiod's names, so the Istio Control Plane dashboard's
//! "Events" panel charts them:
//!
//! | name | kind | labels | meaning |
//! | --- | --- | --- | --- |
//! | `pilot_k8s_reg_events` | counter | `type` (`Services`, `EndpointSlice`, `Pods`, `Nodes`), `event` (`add`, `update`, `delete`) | Kubernetes objects the registry watched change |
//! | `pilot_k8s_cfg_events` | counter | `type` (`ServiceEntry`, `WorkloadEntry`), `event` | Istio config objects changed, from any config source (files or a cluster) |
//! | `pilot_k8s_endpoints_pending_pod` | gauge | `cluster` | endpoints whose pod is not known yet |
//! | `tributary_consul_watches` | gauge | `registry` | blocking queries a Consul registry keeps open |
//! | `tributary_consul_requests` | counter | `registry`, `endpoint`, `outcome` | HTTP requests a Consul registry made |
//!
//! Label values come from closed sets or the config file (cluster and registry names). The other
//! registries' activity (Consul, mock) is counted by the aggregate per registry, as
//! `tributary_registry_changes`. Every metric the adapters emit goes through a function of this
//! file.

/// What happened to a watched object; the `event` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectEvent {
    /// First seen.
    Add,
    /// Changed.
    Update,
    /// Gone.
    Delete,
}

impl ObjectEvent {
    /// The label value, as istiod writes it.
    pub const fn label(self) -> &'static str {
        match self {
            ObjectEvent::Add => "add",
            ObjectEvent::Update => "update",
            ObjectEvent::Delete => "delete",
        }
    }

    /// `Update` if the object was known before, else `Add`.
    pub const fn upsert(existed: bool) -> Self {
        match existed {
            true => ObjectEvent::Update,
            false => ObjectEvent::Add,
        }
    }
}

/// Registers the descriptions (HELP lines). Safe to call repeatedly.
pub fn describe() {
    metrics::describe_counter!("pilot_k8s_reg_events", "Events from k8s registry.");
    metrics::describe_counter!("pilot_k8s_cfg_events", "Events from k8s config.");
    metrics::describe_gauge!(
        "pilot_k8s_endpoints_pending_pod",
        "Number of endpoints that do not currently have any corresponding pods."
    );
    metrics::describe_gauge!(
        "tributary_consul_watches",
        "Blocking queries a Consul registry keeps open."
    );
    metrics::describe_counter!(
        "tributary_consul_requests",
        "HTTP requests a Consul registry made, by outcome."
    );
}

/// A Kubernetes object of kind `kind` (istiod's label: `Services`, `EndpointSlice`, `Pods`,
/// `Nodes`) changed in a watched cluster.
pub(crate) fn k8s_registry_event(kind: &'static str, event: ObjectEvent) {
    metrics::counter!("pilot_k8s_reg_events", "type" => kind, "event" => event.label())
        .increment(1);
}

/// An Istio config object of kind `kind` (`ServiceEntry`, `WorkloadEntry`) changed.
pub(crate) fn config_event(kind: &'static str, event: ObjectEvent) {
    metrics::counter!("pilot_k8s_cfg_events", "type" => kind, "event" => event.label())
        .increment(1);
}

/// The gauge of endpoints in Kubernetes cluster `cluster` whose pod is not known yet.
pub(crate) fn k8s_pending_pods(cluster: &str) -> metrics::Gauge {
    metrics::gauge!("pilot_k8s_endpoints_pending_pod", "cluster" => cluster.to_string())
}

/// Consul registry `registry` keeps `n` blocking queries open.
pub(crate) fn consul_watches(registry: &str, n: usize) {
    metrics::gauge!("tributary_consul_watches", "registry" => registry.to_string()).set(n as f64);
}

/// Consul registry `registry` made a request to `endpoint` that ended in `outcome`.
pub(crate) fn consul_request(registry: &str, endpoint: &'static str, outcome: &'static str) {
    metrics::counter!("tributary_consul_requests", "registry" => registry.to_string(),
        "endpoint" => endpoint, "outcome" => outcome)
    .increment(1);
}
