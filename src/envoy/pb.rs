//! Small constructors for protobuf pieces that every resource type uses.
//!
//! Kept apart so that each resource file reads as "what" rather than "how to spell it in proto".
//! Everything here is deterministic: no maps with more than one entry, no clocks.

use envoy_types::pb::envoy::config::core::v3::{
    Address, AggregatedConfigSource, ApiVersion, ConfigSource, Pipe, SocketAddress, address,
    config_source::ConfigSourceSpecifier, socket_address::PortSpecifier,
};
use envoy_types::pb::google::protobuf::{Any, Duration};
use prost::Message;

/// Packs `message` into an `Any` with its `type.googleapis.com/...` URL.
///
/// Used for nested typed configs (HCM, router, tcp_proxy, protocol options); top-level resources go
/// through [`super::EncodedResource::encode`] instead, so they are encoded exactly once.
pub(super) fn any<M: Message + prost::Name>(message: &M) -> Any {
    Any {
        type_url: M::type_url(),
        value: message.encode_to_vec(),
    }
}

/// A protobuf `Duration`; saturates instead of wrapping for absurdly long spans.
pub(super) fn duration(d: std::time::Duration) -> Duration {
    Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// "Get it over the ADS stream this proxy already has", in v3: how clusters find their EDS and
/// listeners their RDS.
pub(super) fn ads() -> ConfigSource {
    ConfigSource {
        resource_api_version: ApiVersion::V3 as i32,
        config_source_specifier: Some(ConfigSourceSpecifier::Ads(AggregatedConfigSource {})),
        ..Default::default()
    }
}

/// A TCP socket address; `host` is an IP literal or, for DNS clusters, a name to resolve.
pub(super) fn socket_address(host: String, port: u16) -> Address {
    Address {
        address: Some(address::Address::SocketAddress(SocketAddress {
            address: host,
            port_specifier: Some(PortSpecifier::PortValue(u32::from(port))),
            ..Default::default()
        })),
    }
}

/// A Unix domain socket address.
pub(super) fn pipe_address(path: String) -> Address {
    Address {
        address: Some(address::Address::Pipe(Pipe { path, mode: 0 })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;

    #[test]
    fn any_uses_the_full_type_url() {
        let a = any(&Router::default());
        assert_eq!(
            a.type_url,
            "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
        );
    }

    #[test]
    fn duration_splits_seconds_and_nanos() {
        let d = duration(std::time::Duration::from_millis(2500));
        assert_eq!((d.seconds, d.nanos), (2, 500_000_000));
    }
}
