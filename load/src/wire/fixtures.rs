//! Real xDS responses, encoded with Envoy's generated types, for the tests of the hand-written
//! readers.

use bytes::Bytes;
use envoy_types::pb::envoy::config::route::v3::{RouteConfiguration, VirtualHost};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryResponse, DiscoveryResponse, Resource as DeltaResource,
};
use envoy_types::pb::google::protobuf::Any;
use prost::Message;

use super::{RDS, Response};

/// `message` packed in an `Any` of `type_url`.
pub(crate) fn any(type_url: &str, message: &impl Message) -> Any {
    Any {
        type_url: type_url.into(),
        value: message.encode_to_vec(),
    }
}

/// Route configuration `name` with one virtual host per name in `vhosts`, each with a domain.
pub(crate) fn route_config(name: &str, vhosts: &[&str]) -> Any {
    let rc = RouteConfiguration {
        name: name.into(),
        virtual_hosts: vhosts
            .iter()
            .map(|vh| VirtualHost {
                name: (*vh).into(),
                domains: vec![(*vh).into()],
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    any(RDS, &rc)
}

/// A SotW response carrying `resources`, parsed as the simulated proxies parse it.
pub(crate) fn sotw(type_url: &str, resources: Vec<Any>) -> Response {
    let msg = DiscoveryResponse {
        version_info: "v".into(),
        resources,
        type_url: type_url.into(),
        nonce: "n".into(),
        ..Default::default()
    };
    Response::parse(Bytes::from(msg.encode_to_vec()), false).expect("a real response parses")
}

/// A delta response carrying `resources` (named by their `Any`'s first field) and `removed`.
pub(crate) fn delta(type_url: &str, resources: Vec<(&str, Any)>, removed: &[&str]) -> Response {
    let msg = DeltaDiscoveryResponse {
        system_version_info: "sv".into(),
        resources: resources
            .into_iter()
            .map(|(name, any)| DeltaResource {
                name: name.into(),
                version: "1".into(),
                resource: Some(any),
                ..Default::default()
            })
            .collect(),
        removed_resources: removed.iter().map(|r| (*r).into()).collect(),
        type_url: type_url.into(),
        nonce: "dn".into(),
        ..Default::default()
    };
    Response::parse(Bytes::from(msg.encode_to_vec()), true).expect("a real response parses")
}
