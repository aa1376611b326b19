//! From MCP resources to the objects the worker parses: each `istio.mcp.v1alpha1.Resource` is
//! unwrapped, its `metadata.name` split into namespace and name, and its body mapped to the
//! YAML-shaped `spec` (`istio_api::body_to_spec`), then written as the JSON text of a Kubernetes
//! object so that it takes exactly the parse and validation path of a file or a CRD.
//!
//! Two kinds of failure, handled differently (`docs/mcp.md`, "Consume"):
//! - a resource that cannot be identified (not a `Resource`, no name): the response as a whole is
//!   refused ([`ResponseError`], a NACK) and the collection keeps what it held;
//! - an identified resource whose body does not decode: that object alone is rejected
//!   ([`ClusterObject::Undecodable`]), reported like an invalid file object.

use envoy_types::pb::google::protobuf::Any;
use prost::Message;
use serde_json::{Map, Value, json};

use super::super::cluster::ClusterObject;
use super::super::types::{GROUP, Kind};
use crate::istio_api::proto::istio::mcp::v1alpha1::Resource;
use crate::istio_api::{Collection, body_to_spec};

/// The API version objects read over MCP are written with: the one the collections name.
const API_VERSION: &str = "v1alpha3";

/// The `Any` type URL of the wrapper, which some servers put instead of the collection name.
const RESOURCE_TYPE_URL: &str = "type.googleapis.com/istio.mcp.v1alpha1.Resource";

/// Why a response is refused as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ResponseError {
    /// The response's type URL is not one of the four collections.
    #[error("type URL {0:?} is not a collection this client subscribed to")]
    UnknownType(String),
    /// A resource's `Any` holds something other than an MCP resource of the collection.
    #[error(
        "resource {index} of {collection}: its Any is {found:?}, not {collection} (an \
         istio.mcp.v1alpha1.Resource)"
    )]
    WrongType {
        /// The collection.
        collection: &'static str,
        /// Position in the response.
        index: usize,
        /// The `Any`'s type URL.
        found: String,
    },
    /// A resource's bytes are not an `istio.mcp.v1alpha1.Resource`.
    #[error("resource {index} of {collection} is not an istio.mcp.v1alpha1.Resource: {why}")]
    Decode {
        /// The collection.
        collection: &'static str,
        /// Position in the response.
        index: usize,
        /// What the decoder said.
        why: String,
    },
    /// A resource without `metadata.name` cannot be identified.
    #[error("resource {index} of {collection} has no metadata.name")]
    NoName {
        /// The collection.
        collection: &'static str,
        /// Position in the response.
        index: usize,
    },
}

/// The kind of a collection's objects.
pub(crate) fn kind_of(collection: &Collection) -> Kind {
    Kind::from_name(collection.kind).expect("every MCP collection is one of the four kinds")
}

/// `namespace/name` split; a name without a namespace is in `default_namespace`, as istiod reads
/// it.
pub(crate) fn split_name<'a>(full: &'a str, default_namespace: &'a str) -> (&'a str, &'a str) {
    match full.split_once('/') {
        Some((ns, name)) if !ns.is_empty() => (ns, name),
        Some((_, name)) => (default_namespace, name),
        None => (default_namespace, full),
    }
}

/// Every resource of a response, or why the response is refused.
pub(crate) fn decode_all(
    collection: &Collection,
    resources: &[Any],
    default_namespace: &str,
) -> Result<Vec<ClusterObject>, ResponseError> {
    resources
        .iter()
        .enumerate()
        .map(|(index, any)| decode(collection, index, any, default_namespace))
        .collect()
}

/// One resource.
pub(crate) fn decode(
    collection: &Collection,
    index: usize,
    any: &Any,
    default_namespace: &str,
) -> Result<ClusterObject, ResponseError> {
    let name = collection.type_url;
    if any.type_url != collection.type_url && any.type_url != RESOURCE_TYPE_URL {
        return Err(ResponseError::WrongType {
            collection: name,
            index,
            found: any.type_url.clone(),
        });
    }
    let resource = Resource::decode(any.value.as_slice()).map_err(|e| ResponseError::Decode {
        collection: name,
        index,
        why: e.to_string(),
    })?;
    let meta = resource.metadata.unwrap_or_default();
    if meta.name.is_empty() {
        return Err(ResponseError::NoName {
            collection: name,
            index,
        });
    }
    let (namespace, object) = split_name(&meta.name, default_namespace);
    let kind = kind_of(collection);
    let (namespace, object) = (namespace.to_string(), object.to_string());
    let spec = match resource.body {
        None => Ok(Value::Object(Map::new())),
        Some(body) if body.type_url != collection.body_type_url() => Err(format!(
            "the body is {:?}, expected {:?}",
            body.type_url,
            collection.body_type_url()
        )),
        Some(body) => body_to_spec(collection, &body.value).map_err(|e| e.to_string()),
    };
    let spec = match spec {
        Ok(spec) => spec,
        Err(message) => {
            return Ok(ClusterObject::Undecodable {
                kind,
                namespace,
                name: object,
                message,
            });
        }
    };
    let mut metadata = json!({
        "name": object,
        "namespace": namespace,
        "labels": meta.labels,
        "annotations": meta.annotations,
    });
    if !meta.version.is_empty() {
        metadata["resourceVersion"] = json!(meta.version);
    }
    if let Some(t) = meta.create_time {
        metadata["creationTimestamp"] = json!(t.to_string());
    }
    let text = json!({
        "apiVersion": format!("{GROUP}/{API_VERSION}"),
        "kind": collection.kind,
        "metadata": metadata,
        "spec": spec,
    })
    .to_string();
    Ok(ClusterObject::Config {
        kind,
        namespace,
        name: object,
        text,
    })
}
