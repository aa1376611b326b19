//! LDS for proxyless gRPC clients: one API listener per name a gRPC target can carry.
//!
//! A gRPC client resolving `xds:///<host>:<port>` asks LDS for exactly the listener `<host>:<port>`
//! (gRFC A27), and for `xds:///<host>` the listener `<host>`. The answer is a [`Listener`] with no
//! address and no filter chains: its `api_listener` holds an HTTP connection manager that names the
//! route configuration to fetch over ADS and ends with the router filter (PG-1, PG-2 in
//! `docs/proxyless-grpc.md`).
//!
//! The route configuration is the port's own (`"<port>"`, see [`super::route_config_for_port`]):
//! its virtual host for the service answers to both `<host>:<port>` and `<host>`, which is the
//! authority a gRPC client matches (PG-3), and Envoy and gRPC clients then follow the same routes.
//! Only ports served by an HTTP connection manager get API listeners (gRPC is HTTP/2); the bare
//! `<host>` name exists only for a service with exactly one such port, so it is never ambiguous.
//!
//! These listeners live in their own set of the snapshot and are only ever seen by proxyless
//! clients (`crate::snapshot::View::Proxyless`): Envoy's wildcard LDS never receives them (PG-4).

use envoy_types::pb::envoy::config::listener::v3::{ApiListener, Listener};
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, HttpFilter, Rds, http_connection_manager, http_filter,
};
use tributary_registries::Hostname;

use super::naming::route_config_name;
use super::pb::{ads, any};
use super::{EncodedResource, ResourceType};
use crate::aggregate::MergedService;

/// Well-known name of the router HTTP filter (gRFC A39 requires it last in the chain).
const ROUTER_FILTER: &str = "envoy.filters.http.router";

/// The API listener name for `hostname` on `port`: `<hostname>:<port>`, the gRPC target's authority.
pub fn api_listener_name(hostname: &Hostname, port: u16) -> String {
    format!("{hostname}:{port}")
}

/// The API listeners of one service: `<host>:<port>` for each HTTP-family port, and `<host>` too
/// when it has exactly one. Empty for a service without HTTP-family ports.
pub fn api_listeners_for(svc: &MergedService) -> Vec<EncodedResource> {
    let host = &svc.service.hostname;
    let mut ports: Vec<u16> = svc
        .service
        .ports
        .iter()
        .filter(|p| p.protocol.is_http())
        .map(|p| p.port)
        .collect();
    ports.sort_unstable();
    ports.dedup();
    let mut out: Vec<EncodedResource> = ports
        .iter()
        .map(|&port| api_listener(&api_listener_name(host, port), port))
        .collect();
    if let [only] = ports[..] {
        out.push(api_listener(host.as_str(), only));
    }
    out
}

/// One API listener named `name`, routing with the route configuration of `port`.
fn api_listener(name: &str, port: u16) -> EncodedResource {
    let hcm = HttpConnectionManager {
        stat_prefix: name.to_string(),
        route_specifier: Some(http_connection_manager::RouteSpecifier::Rds(Rds {
            config_source: Some(ads()),
            route_config_name: route_config_name(port),
        })),
        http_filters: vec![HttpFilter {
            name: ROUTER_FILTER.to_string(),
            config_type: Some(http_filter::ConfigType::TypedConfig(
                any(&Router::default()),
            )),
            ..Default::default()
        }],
        ..Default::default()
    };
    let listener = Listener {
        name: name.to_string(),
        api_listener: Some(ApiListener {
            api_listener: Some(any(&hcm)),
        }),
        ..Default::default()
    };
    EncodedResource::encode(ResourceType::Listener, name, &listener)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envoy::fixtures::{decode, merged, port};
    use prost::Message;
    use tributary_registries::Protocol;

    fn hcm_of(r: &EncodedResource) -> HttpConnectionManager {
        let l: Listener = decode(r);
        let any = l.api_listener.unwrap().api_listener.unwrap();
        assert_eq!(
            any.type_url,
            "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
        );
        HttpConnectionManager::decode(any.value.as_slice()).unwrap()
    }

    #[test]
    fn one_port_service_gets_host_port_and_bare_host() {
        // PG-1, PG-2: named listeners with an HCM API listener fetching RDS over ADS, router last.
        let svc = merged(
            "greeter.demo.svc.cluster.local",
            vec![port("grpc", 18090, Protocol::Grpc)],
            vec![],
        );
        let ls = api_listeners_for(&svc);
        let names: Vec<&str> = ls.iter().map(|r| &*r.name).collect();
        assert_eq!(
            names,
            [
                "greeter.demo.svc.cluster.local:18090",
                "greeter.demo.svc.cluster.local"
            ]
        );
        for r in &ls {
            let l: Listener = decode(r);
            assert!(l.address.is_none() && l.filter_chains.is_empty());
            let hcm = hcm_of(r);
            let Some(http_connection_manager::RouteSpecifier::Rds(rds)) = hcm.route_specifier
            else {
                panic!("RDS expected");
            };
            assert_eq!(rds.route_config_name, "18090");
            assert!(rds.config_source.unwrap().config_source_specifier.is_some());
            assert_eq!(hcm.http_filters.last().unwrap().name, ROUTER_FILTER);
        }
    }

    #[test]
    fn several_ports_get_no_bare_name_and_tcp_ports_none() {
        let svc = merged(
            "multi.test",
            vec![
                port("grpc", 9000, Protocol::Grpc),
                port("http", 8080, Protocol::Http),
                port("db", 5432, Protocol::Tcp),
            ],
            vec![],
        );
        let names: Vec<String> = api_listeners_for(&svc)
            .iter()
            .map(|r| r.name.to_string())
            .collect();
        assert_eq!(names, ["multi.test:8080", "multi.test:9000"]);
        let tcp = merged("db.test", vec![port("db", 5432, Protocol::Tcp)], vec![]);
        assert!(api_listeners_for(&tcp).is_empty());
    }
}
