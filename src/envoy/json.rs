//! The proto3 JSON mapping of Envoy's v3 messages: what `/debug/config_dump` and REST-JSON xDS
//! speak, so that anything which reads Envoy's own dumps or sends Envoy's REST requests reads ours.
//!
//! Envoy's generated Rust types (`envoy-types`) carry no JSON support, so this goes through
//! reflection: `build.rs` compiles the `.proto` files that `envoy-types` ships into one descriptor
//! set, embedded here, and `prost-reflect` maps any message of it to and from JSON, `Any` included
//! (`{"@type": "type.googleapis.com/...", ...fields}`), as the proto3 JSON spec writes it. Only the
//! messages reachable from the roots listed in `build.rs` are known; an `Any` of another type is an
//! error, never a silently empty object.

use std::sync::LazyLock;

use prost::{Message, Name};
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, SerializeOptions};
use serde_json::Value;

/// The descriptor set `build.rs` compiled from `envoy-types`' protos.
static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/envoy_descriptor.bin"));

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(DESCRIPTORS).expect("build.rs wrote a valid descriptor set with protox")
});

/// Serialisation as the proto3 JSON mapping prints it by default: camelCase names, 64-bit integers
/// as strings, enums by name, default values left out.
const SERIALIZE: SerializeOptions = SerializeOptions::new();

/// Requests from newer clients may carry fields this build does not know; they are ignored rather
/// than failing the request (the mapping's "ignore unknown fields" parser option).
const DESERIALIZE: DeserializeOptions = DeserializeOptions::new().deny_unknown_fields(false);

/// Why a message could not be mapped.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// The message type is not in the embedded descriptor set.
    #[error("unknown message type {0} (not among the Envoy protos tributary embeds)")]
    UnknownType(String),
    /// The bytes do not decode as that message.
    #[error("{type_name} does not decode: {source}")]
    Decode {
        /// The message's full name.
        type_name: String,
        /// What the decoder said.
        source: prost::DecodeError,
    },
    /// The JSON does not map onto the message (wrong field type, unknown `@type`, bad syntax).
    #[error("invalid JSON for {type_name}: {source}")]
    Json {
        /// The message's full name.
        type_name: String,
        /// What the mapping said.
        source: serde_json::Error,
    },
}

/// The proto3 JSON of an encoded message of the given full name (`envoy.config.cluster.v3.Cluster`).
pub fn encoded_to_json(type_name: &str, bytes: &[u8]) -> Result<Value, JsonError> {
    let descriptor = POOL
        .get_message_by_name(type_name)
        .ok_or_else(|| JsonError::UnknownType(type_name.to_owned()))?;
    let message =
        DynamicMessage::decode(descriptor, bytes).map_err(|source| JsonError::Decode {
            type_name: type_name.to_owned(),
            source,
        })?;
    message
        .serialize_with_options(serde_json::value::Serializer, &SERIALIZE)
        .map_err(|source| JsonError::Json {
            type_name: type_name.to_owned(),
            source,
        })
}

/// The proto3 JSON of a generated Envoy message.
pub fn to_json<M: Message + Name>(message: &M) -> Result<Value, JsonError> {
    encoded_to_json(&M::full_name(), &message.encode_to_vec())
}

/// A `type.googleapis.com/...` resource as proto3 JSON with its `@type`, as an `Any` prints.
pub fn any_to_json(any: &prost_types::Any) -> Result<Value, JsonError> {
    let type_name = any.type_url.rsplit('/').next().unwrap_or_default();
    let mut value = encoded_to_json(type_name, &any.value)?;
    if let Value::Object(fields) = &mut value {
        // `@type` first, as Envoy and protobuf's own printers put it.
        let mut with_type = serde_json::Map::with_capacity(fields.len() + 1);
        with_type.insert("@type".to_owned(), Value::String(any.type_url.clone()));
        with_type.append(fields);
        value = Value::Object(with_type);
    }
    Ok(value)
}

/// A generated Envoy message from its proto3 JSON text.
pub fn from_json<M: Message + Name + Default>(json: &[u8]) -> Result<M, JsonError> {
    let type_name = M::full_name();
    let descriptor = POOL
        .get_message_by_name(&type_name)
        .ok_or_else(|| JsonError::UnknownType(type_name.clone()))?;
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    let dynamic =
        DynamicMessage::deserialize_with_options(descriptor, &mut deserializer, &DESERIALIZE)
            .and_then(|m| deserializer.end().map(|()| m))
            .map_err(|source| JsonError::Json {
                type_name: type_name.clone(),
                source,
            })?;
    dynamic
        .transcode_to::<M>()
        .map_err(|source| JsonError::Decode { type_name, source })
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::config::cluster::v3::Cluster;
    use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
    use envoy_types::pb::google::protobuf::Any;
    use serde_json::json;

    use super::*;

    fn cluster() -> Cluster {
        Cluster {
            name: "outbound|80||web.shop.svc.cluster.local".into(),
            connect_timeout: Some(envoy_types::pb::google::protobuf::Duration {
                seconds: 1,
                nanos: 500_000_000,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn messages_print_as_the_proto3_json_mapping() {
        let value = to_json(&cluster()).expect("maps");
        assert_eq!(
            value,
            json!({"name": "outbound|80||web.shop.svc.cluster.local", "connectTimeout": "1.500s"})
        );
    }

    #[test]
    fn any_carries_its_type_first_and_nested_anys_resolve() {
        let response = DiscoveryResponse {
            version_info: "v1".into(),
            type_url: Cluster::type_url(),
            resources: vec![Any {
                type_url: Cluster::type_url(),
                value: cluster().encode_to_vec(),
            }],
            ..Default::default()
        };
        let value = to_json(&response).expect("maps");
        let resource = &value["resources"][0];
        assert_eq!(resource["@type"], Cluster::type_url());
        assert_eq!(resource["name"], "outbound|80||web.shop.svc.cluster.local");

        let any = prost_types::Any {
            type_url: Cluster::type_url(),
            value: cluster().encode_to_vec(),
        };
        let top = any_to_json(&any).expect("maps");
        let keys: Vec<&String> = top.as_object().expect("object").keys().collect();
        assert_eq!(keys.first().map(|k| k.as_str()), Some("@type"));
    }

    #[test]
    fn requests_parse_from_json_and_ignore_unknown_fields() {
        let request: DiscoveryRequest = from_json(
            br#"{"versionInfo": "v7", "node": {"id": "sidecar~10.0.0.1~a.b~b.svc.cluster.local"},
                 "resourceNames": ["outbound|80||web"], "typeUrl": "t", "futureField": 1}"#,
        )
        .expect("parses");
        assert_eq!(request.version_info, "v7");
        assert_eq!(request.resource_names, ["outbound|80||web"]);
        assert_eq!(
            request.node.map(|n| n.id).as_deref(),
            Some("sidecar~10.0.0.1~a.b~b.svc.cluster.local")
        );
    }

    #[test]
    fn bad_input_is_an_error_naming_the_type() {
        let err = from_json::<DiscoveryRequest>(br#"{"versionInfo": 7"#).expect_err("truncated");
        assert!(err.to_string().contains("DiscoveryRequest"), "{err}");
        let err = encoded_to_json("envoy.Nope", &[]).expect_err("unknown");
        assert!(matches!(err, JsonError::UnknownType(_)));
        let unknown_any = prost_types::Any {
            type_url: "type.googleapis.com/example.Unknown".into(),
            value: vec![],
        };
        assert!(any_to_json(&unknown_any).is_err());
    }
}
