//! Hand-made Envoy resources for tests (no dependency on the model → Envoy generator).

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, LocalityLbEndpoints};
use envoy_types::pb::envoy::config::listener::v3::Listener;
use envoy_types::pb::envoy::config::route::v3::route::Action;
use envoy_types::pb::envoy::config::route::v3::route_action::ClusterSpecifier;
use envoy_types::pb::envoy::config::route::v3::{
    Route, RouteAction, RouteConfiguration, VirtualHost,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use tributary::envoy::{EncodedResource, ResourceType};

/// A cluster; `tag` varies its content.
pub fn cluster(name: &str, tag: &str) -> EncodedResource {
    let c = Cluster {
        name: name.into(),
        alt_stat_name: tag.into(),
        ..Default::default()
    };
    EncodedResource::encode(ResourceType::Cluster, name, &c)
}

/// A large cluster (for filling flow-control windows): `pad` bytes of padding.
pub fn big_cluster(name: &str, pad: usize) -> EncodedResource {
    let c = Cluster {
        name: name.into(),
        alt_stat_name: "x".repeat(pad),
        ..Default::default()
    };
    EncodedResource::encode(ResourceType::Cluster, name, &c)
}

/// A load assignment for cluster `name`; `priority` varies its content.
pub fn cla(name: &str, priority: u32) -> EncodedResource {
    let c = ClusterLoadAssignment {
        cluster_name: name.into(),
        endpoints: vec![LocalityLbEndpoints {
            priority,
            ..Default::default()
        }],
        ..Default::default()
    };
    EncodedResource::encode(ResourceType::Endpoint, name, &c)
}

/// A listener that "references" route config `route` (kept in `stat_prefix` for the tests).
pub fn listener(name: &str, route: &str) -> EncodedResource {
    let l = Listener {
        name: name.into(),
        stat_prefix: route.into(),
        ..Default::default()
    };
    EncodedResource::encode(ResourceType::Listener, name, &l)
}

/// A route configuration sending everything to `cluster`.
pub fn route(name: &str, cluster: &str) -> EncodedResource {
    let r = RouteConfiguration {
        name: name.into(),
        virtual_hosts: vec![VirtualHost {
            name: "all".into(),
            domains: vec!["*".into()],
            routes: vec![Route {
                action: Some(Action::Route(RouteAction {
                    cluster_specifier: Some(ClusterSpecifier::Cluster(cluster.into())),
                    ..Default::default()
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    EncodedResource::encode(ResourceType::Route, name, &r)
}

/// The name of a resource in a response, whatever its type.
pub fn name_of(any: &Any) -> String {
    let v = any.value.as_slice();
    match ResourceType::from_type_url(&any.type_url) {
        Some(ResourceType::Cluster) => Cluster::decode(v).unwrap().name,
        Some(ResourceType::Endpoint) => ClusterLoadAssignment::decode(v).unwrap().cluster_name,
        Some(ResourceType::Listener) => Listener::decode(v).unwrap().name,
        Some(ResourceType::Route) => RouteConfiguration::decode(v).unwrap().name,
        _ => panic!("not an Envoy resource type: {}", any.type_url),
    }
}

/// The clusters a route configuration sends to.
pub fn route_clusters(any: &Any) -> Vec<String> {
    let r = RouteConfiguration::decode(any.value.as_slice()).unwrap();
    r.virtual_hosts
        .iter()
        .flat_map(|vh| vh.routes.iter())
        .filter_map(|rt| match &rt.action {
            Some(Action::Route(RouteAction {
                cluster_specifier: Some(ClusterSpecifier::Cluster(c)),
                ..
            })) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

/// The decoded load assignment.
pub fn decode_cla(any: &Any) -> ClusterLoadAssignment {
    ClusterLoadAssignment::decode(any.value.as_slice()).unwrap()
}

/// The route name a listener references.
pub fn listener_route(any: &Any) -> String {
    Listener::decode(any.value.as_slice()).unwrap().stat_prefix
}
