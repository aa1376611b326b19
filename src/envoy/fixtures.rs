//! Builders shared by the tests of every resource file, and by the integration tests through the
//! `test-util` feature (tests/e2e/envoy_validate.rs builds its mesh with them).

use prost::Message;
use tributary_registries::rules::RuleMeta;
use tributary_registries::{
    ClusterId, Endpoint, Hostname, Origin, Protocol, RegistryId, Resolution, Service, ServicePort,
};

use envoy_types::pb::envoy::config::core::v3::Address;
use envoy_types::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
use envoy_types::pb::google::protobuf::Any;

use super::EncodedResource;
use crate::aggregate::MergedService;

/// The metadata of a rule named `name` in namespace `default`, from source `test`.
pub fn rule_meta(name: &str) -> RuleMeta {
    RuleMeta {
        namespace: "default".into(),
        name: name.into(),
        source: "test".into(),
        ..RuleMeta::default()
    }
}

/// A service port.
pub fn port(name: &str, port: u16, protocol: Protocol) -> ServicePort {
    ServicePort {
        name: name.to_string(),
        port,
        protocol,
        target_port: None,
    }
}

fn origin(registry: &str) -> Origin {
    Origin {
        registry: RegistryId::new(registry),
        cluster: ClusterId::new("c1"),
    }
}

/// A healthy endpoint of weight 1 at `address`, no locality, serving every port on its number.
pub fn ep(address: &str) -> Endpoint {
    Endpoint::new(address.to_string(), origin("mock"))
}

/// A `Static`, mesh-internal service as the aggregate would hand it over.
pub fn merged(host: &str, ports: Vec<ServicePort>, endpoints: Vec<Endpoint>) -> MergedService {
    MergedService {
        service: Service {
            ports,
            ..Service::new(
                Hostname::new(host).expect("test hostnames are valid"),
                origin("mock"),
            )
        },
        endpoints,
        registries: vec![RegistryId::new("mock")],
        conflicts: Vec::new(),
        unmapped: Vec::new(),
    }
}

/// The route configuration of HTTP port `port` for one service per name in `hosts`.
pub fn http_route(port_: u16, hosts: &[&str]) -> EncodedResource {
    let services: Vec<_> = hosts
        .iter()
        .map(|h| merged(h, vec![port("http", port_, Protocol::Http)], vec![]))
        .collect();
    let refs: Vec<_> = services.iter().collect();
    super::route_config_for_port(port_, &refs, &mut Vec::new()).expect("an HTTP port")
}

/// `merged` with another resolution.
pub fn with_resolution(mut svc: MergedService, resolution: Resolution) -> MergedService {
    svc.service.resolution = resolution;
    svc
}

/// Decodes the message inside an encoded resource.
pub fn decode<M: Message + Default>(r: &EncodedResource) -> M {
    M::decode(r.to_any().value.as_slice()).expect("resource decodes as its own type")
}

/// `message` packed into an `Any`, as generation packs nested typed configs.
pub fn any<M: Message + prost::Name>(message: &M) -> Any {
    super::pb::any(message)
}

/// A TCP socket address, as generation spells one.
pub fn socket_address(host: &str, port: u16) -> Address {
    super::pb::socket_address(host.to_string(), port)
}

/// The upstream protocol options generated clusters use for HTTP/2 (gRPC) upstreams.
pub fn http2_options() -> HttpProtocolOptions {
    super::cluster::http2_options()
}
