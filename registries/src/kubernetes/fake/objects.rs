//! Builders for the objects tests put into the fake API server: Services, EndpointSlices, Pods
//! and Nodes shaped as the Kubernetes controllers write them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, ObjectReference, Pod, PodSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn meta(ns: Option<&str>, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: ns.map(str::to_string),
        labels: (!labels.is_empty()).then(|| {
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        }),
        ..ObjectMeta::default()
    }
}

/// A ClusterIP Service (`cluster_ip` may be `None` for a headless one) with TCP ports
/// `(name, port)`.
pub fn service(ns: &str, name: &str, cluster_ip: &str, ports: &[(&str, u16)]) -> Service {
    Service {
        metadata: meta(Some(ns), name, &[]),
        spec: Some(ServiceSpec {
            cluster_ip: Some(cluster_ip.into()),
            cluster_ips: (cluster_ip != "None").then(|| vec![cluster_ip.to_string()]),
            type_: Some("ClusterIP".into()),
            ports: Some(
                ports
                    .iter()
                    .map(|(n, p)| ServicePort {
                        name: (!n.is_empty()).then(|| n.to_string()),
                        port: i32::from(*p),
                        protocol: Some("TCP".into()),
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// One endpoint of an EndpointSlice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SliceEndpoint {
    /// Its address.
    pub ip: String,
    /// The pod behind it (`targetRef`), in the slice's namespace.
    pub pod: Option<String>,
    /// The node it runs on.
    pub node: Option<String>,
    /// `conditions.ready`.
    pub ready: Option<bool>,
    /// `conditions.serving`.
    pub serving: Option<bool>,
    /// `conditions.terminating`.
    pub terminating: Option<bool>,
}

impl SliceEndpoint {
    /// A ready endpoint at `ip`.
    pub fn ready(ip: &str) -> Self {
        Self {
            ip: ip.into(),
            ready: Some(true),
            serving: Some(true),
            terminating: Some(false),
            ..Self::default()
        }
    }

    /// Backed by pod `name`.
    pub fn pod(mut self, name: &str) -> Self {
        self.pod = Some(name.into());
        self
    }

    /// Running on node `name`.
    pub fn node(mut self, name: &str) -> Self {
        self.node = Some(name.into());
        self
    }

    /// Shutting down, still serving (what the EndpointSlice controller writes on scale-down).
    pub fn terminating(mut self) -> Self {
        self.ready = Some(false);
        self.serving = Some(true);
        self.terminating = Some(true);
        self
    }
}

/// An IPv4 EndpointSlice `name` of Service `service`, with ports `(name, port)`.
pub fn endpoint_slice(
    ns: &str,
    name: &str,
    service: &str,
    ports: &[(&str, u16)],
    endpoints: &[SliceEndpoint],
) -> EndpointSlice {
    EndpointSlice {
        metadata: meta(
            Some(ns),
            name,
            &[
                ("kubernetes.io/service-name", service),
                (
                    "endpointslice.kubernetes.io/managed-by",
                    "endpointslice-controller.k8s.io",
                ),
            ],
        ),
        address_type: "IPv4".into(),
        ports: Some(
            ports
                .iter()
                .map(|(n, p)| EndpointPort {
                    name: Some(n.to_string()),
                    port: Some(i32::from(*p)),
                    protocol: Some("TCP".into()),
                    app_protocol: None,
                })
                .collect(),
        ),
        endpoints: Some(
            endpoints
                .iter()
                .map(|e| Endpoint {
                    addresses: vec![e.ip.clone()],
                    conditions: Some(EndpointConditions {
                        ready: e.ready,
                        serving: e.serving,
                        terminating: e.terminating,
                    }),
                    node_name: e.node.clone(),
                    target_ref: e.pod.as_ref().map(|p| ObjectReference {
                        kind: Some("Pod".into()),
                        name: Some(p.clone()),
                        namespace: Some(ns.into()),
                        ..ObjectReference::default()
                    }),
                    ..Endpoint::default()
                })
                .collect(),
        ),
    }
}

/// A Pod with labels, a service account and a node.
pub fn pod(
    ns: &str,
    name: &str,
    labels: &[(&str, &str)],
    service_account: &str,
    node: &str,
) -> Pod {
    Pod {
        metadata: meta(Some(ns), name, labels),
        spec: Some(PodSpec {
            service_account_name: Some(service_account.into()),
            node_name: Some(node.into()),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// A Node in `region` / `zone`.
pub fn node(name: &str, region: &str, zone: &str) -> Node {
    Node {
        metadata: meta(
            None,
            name,
            &[
                ("topology.kubernetes.io/region", region),
                ("topology.kubernetes.io/zone", zone),
            ],
        ),
        spec: None,
        status: None,
    }
}
