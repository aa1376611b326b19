//! LDS: one listener per port, named `0.0.0.0_<port>`, shaped by the port's [`PortPlan`].
//!
//! HTTP ports get an HTTP connection manager that fetches route configuration `"<port>"` over ADS;
//! a TCP port gets a TCP proxy straight to its one cluster. Only the socket address follows the
//! node's bind address; the name stays, so rebinding replaces the listener instead of adding one.

use std::net::IpAddr;

use envoy_types::pb::envoy::config::core::v3::TrafficDirection;
use envoy_types::pb::envoy::config::listener::v3::{
    Filter, FilterChain, FilterChainMatch, Listener, ListenerFilter, filter, listener_filter,
};
use envoy_types::pb::envoy::extensions::filters::http::cors::v3::Cors;
use envoy_types::pb::envoy::extensions::filters::http::fault::v3::HttpFault;
use envoy_types::pb::envoy::extensions::filters::http::router::v3::Router;
use envoy_types::pb::envoy::extensions::filters::listener::tls_inspector::v3::TlsInspector;
use envoy_types::pb::envoy::extensions::filters::network::http_connection_manager::v3::{
    HttpConnectionManager, HttpFilter, Rds, http_connection_manager, http_filter,
};
use envoy_types::pb::envoy::extensions::filters::network::tcp_proxy::v3::{TcpProxy, tcp_proxy};

use super::naming::{cluster_name, listener_name, route_config_name};
use super::pb::{ads, any, socket_address};
use super::port_plan::{Member, PortPlan, plan};
use super::rules;
use super::{ConfigIssue, EncodedResource, ResourceType};
use crate::aggregate::MergedService;

/// Well-known name of the HTTP connection manager network filter.
const HCM_FILTER: &str = "envoy.filters.network.http_connection_manager";
/// Well-known name of the TCP proxy network filter.
const TCP_PROXY_FILTER: &str = "envoy.filters.network.tcp_proxy";
/// Well-known name of the TLS inspector listener filter (reads SNI for `tls` routes).
const TLS_INSPECTOR_FILTER: &str = "envoy.filters.listener.tls_inspector";
/// Well-known name of the router HTTP filter.
const ROUTER_FILTER: &str = "envoy.filters.http.router";

/// The listener of `port`, bound to `bind:port`, or `None` when no service has that port.
///
/// `services` are the services with a port of that number; only they are looked at. Services the
/// port cannot serve (see `super::port_plan`) are reported in `issues`.
pub fn listener_for_port(
    port: u16,
    services: &[&MergedService],
    bind: IpAddr,
    issues: &mut Vec<ConfigIssue>,
) -> Option<EncodedResource> {
    listener_with_l4(port, services, bind, None, issues)
}

/// [`listener_for_port`], with a TCP port proxying as `l4` says (its VirtualService's `tcp` and
/// `tls` routes, from [`rules::l4_routes_for_port`]) when given.
pub fn listener_with_l4(
    port: u16,
    services: &[&MergedService],
    bind: IpAddr,
    l4: Option<&rules::L4Routes>,
    issues: &mut Vec<ConfigIssue>,
) -> Option<EncodedResource> {
    let (plan, left_out) = plan(port, services);
    issues.extend(left_out);
    let mut listener_filters = Vec::new();
    let filter_chains = match plan? {
        PortPlan::Http(_) => vec![FilterChain {
            filters: vec![Filter {
                name: HCM_FILTER.to_string(),
                config_type: Some(filter::ConfigType::TypedConfig(any(
                    &http_connection_manager(port),
                ))),
            }],
            ..Default::default()
        }],
        PortPlan::Tcp(member) => {
            let (sni, default) = match l4 {
                Some(l4) => (l4.sni.as_slice(), l4.default.clone()),
                None => (&[][..], None),
            };
            let mut chains: Vec<FilterChain> = sni
                .iter()
                .map(|(names, proxy)| FilterChain {
                    filter_chain_match: Some(FilterChainMatch {
                        server_names: names.clone(),
                        ..Default::default()
                    }),
                    filters: vec![tcp_proxy_filter(proxy)],
                    ..Default::default()
                })
                .collect();
            if !chains.is_empty() {
                listener_filters.push(ListenerFilter {
                    name: TLS_INSPECTOR_FILTER.to_string(),
                    config_type: Some(listener_filter::ConfigType::TypedConfig(any(
                        &TlsInspector::default(),
                    ))),
                    ..Default::default()
                });
            }
            chains.push(FilterChain {
                filters: vec![tcp_proxy_filter(
                    &default.unwrap_or_else(|| tcp_proxy(member)),
                )],
                ..Default::default()
            });
            chains
        }
    };
    let name = listener_name(port);
    let listener = Listener {
        name: name.clone(),
        address: Some(socket_address(bind.to_string(), port)),
        // A connection that sends nothing first (a server-first protocol) is not held up by
        // the TLS inspector: after its timeout it takes the chain without SNI, as istiod sets.
        continue_on_listener_filters_timeout: !listener_filters.is_empty(),
        listener_filters,
        filter_chains,
        traffic_direction: TrafficDirection::Outbound as i32,
        ..Default::default()
    };
    Some(EncodedResource::encode(
        ResourceType::Listener,
        &name,
        &listener,
    ))
}

fn tcp_proxy_filter(proxy: &TcpProxy) -> Filter {
    Filter {
        name: TCP_PROXY_FILTER.to_string(),
        config_type: Some(filter::ConfigType::TypedConfig(any(proxy))),
    }
}

/// The HCM of an HTTP port: routes from RDS `"<port>"` over ADS, codec sniffed (HTTP/1.1 or h2c),
/// then fault, CORS and the router.
fn http_connection_manager(port: u16) -> HttpConnectionManager {
    HttpConnectionManager {
        stat_prefix: format!("outbound_{}", listener_name(port)),
        codec_type: http_connection_manager::CodecType::Auto as i32,
        route_specifier: Some(http_connection_manager::RouteSpecifier::Rds(Rds {
            config_source: Some(ads()),
            route_config_name: route_config_name(port),
        })),
        // Fault and CORS do nothing until a route's per-filter config (from a VirtualService)
        // asks them to; they are always there, as in istiod's sidecars, so that a rule change
        // never has to change the listener.
        http_filters: vec![
            HttpFilter {
                name: rules::FAULT_FILTER.to_string(),
                config_type: Some(http_filter::ConfigType::TypedConfig(any(
                    &HttpFault::default(),
                ))),
                ..Default::default()
            },
            HttpFilter {
                name: rules::CORS_FILTER.to_string(),
                config_type: Some(http_filter::ConfigType::TypedConfig(any(&Cors::default()))),
                ..Default::default()
            },
            HttpFilter {
                name: ROUTER_FILTER.to_string(),
                config_type: Some(http_filter::ConfigType::TypedConfig(
                    any(&Router::default()),
                )),
                ..Default::default()
            },
        ],
        ..Default::default()
    }
}

/// A TCP proxy to the one service of a TCP port.
fn tcp_proxy(member: Member<'_>) -> TcpProxy {
    let cluster = cluster_name(member.port.port, &member.svc.service.hostname);
    TcpProxy {
        stat_prefix: cluster.clone(),
        cluster_specifier: Some(tcp_proxy::ClusterSpecifier::Cluster(cluster)),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envoy::fixtures::{decode, merged, port};
    use envoy_types::pb::envoy::config::core::v3::{address, socket_address::PortSpecifier};
    use prost::Message;
    use tributary_registries::Protocol;

    const ANY: IpAddr = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);

    fn network_filter(l: &Listener) -> &Filter {
        &l.filter_chains[0].filters[0]
    }

    fn typed<M: Message + Default>(f: &Filter) -> M {
        let Some(filter::ConfigType::TypedConfig(a)) = &f.config_type else {
            panic!("filter has no typed config")
        };
        M::decode(a.value.as_slice()).unwrap()
    }

    #[test]
    fn http_port_gets_an_hcm_with_rds_over_ads() {
        let a = merged("a.demo", vec![port("http", 8080, Protocol::Grpc)], vec![]);
        let r = listener_for_port(8080, &[&a], ANY, &mut Vec::new()).unwrap();
        assert_eq!(&*r.name, "0.0.0.0_8080");
        let l: Listener = decode(&r);
        let f = network_filter(&l);
        assert_eq!(f.name, HCM_FILTER);
        let hcm: HttpConnectionManager = typed(f);
        let Some(http_connection_manager::RouteSpecifier::Rds(rds)) = hcm.route_specifier else {
            panic!("expected rds")
        };
        assert_eq!(rds.route_config_name, "8080");
        assert_eq!(rds.config_source, Some(ads()));
        assert_eq!(
            hcm.http_filters.last().map(|f| f.name.as_str()),
            Some(ROUTER_FILTER)
        );
    }

    #[test]
    fn tcp_port_proxies_to_its_cluster() {
        let a = merged("db.demo", vec![port("pg", 5432, Protocol::Tcp)], vec![]);
        let r = listener_for_port(5432, &[&a], ANY, &mut Vec::new()).unwrap();
        let l: Listener = decode(&r);
        let tcp: TcpProxy = typed(network_filter(&l));
        assert_eq!(
            tcp.cluster_specifier,
            Some(tcp_proxy::ClusterSpecifier::Cluster(
                "outbound|5432||db.demo".to_string()
            ))
        );
    }

    #[test]
    fn bind_changes_the_socket_not_the_name() {
        let a = merged("a.demo", vec![port("http", 80, Protocol::Http)], vec![]);
        let bind: IpAddr = "127.0.0.2".parse().unwrap();
        let r = listener_for_port(80, &[&a], bind, &mut Vec::new()).unwrap();
        assert_eq!(&*r.name, "0.0.0.0_80");
        let l: Listener = decode(&r);
        let Some(address::Address::SocketAddress(sa)) = l.address.unwrap().address else {
            panic!("expected a socket address")
        };
        assert_eq!(sa.address, "127.0.0.2");
        assert_eq!(sa.port_specifier, Some(PortSpecifier::PortValue(80)));
    }

    #[test]
    fn conflicting_tcp_services_are_reported_and_output_is_stable() {
        // REG-10, REG-12, BUG-14.
        let a = merged("a.demo", vec![port("tcp-a", 9000, Protocol::Tcp)], vec![]);
        let b = merged("b.demo", vec![port("tcp-b", 9000, Protocol::Tcp)], vec![]);
        let mut i1 = Vec::new();
        let mut i2 = Vec::new();
        let r1 = listener_for_port(9000, &[&a, &b], ANY, &mut i1).unwrap();
        let r2 = listener_for_port(9000, &[&b, &a], ANY, &mut i2).unwrap();
        assert_eq!(r1, r2);
        assert_eq!(i1, i2);
        assert_eq!(i1.len(), 1);
        assert_eq!(i1[0].object, "b.demo");
    }

    #[test]
    fn no_service_no_listener() {
        assert!(listener_for_port(80, &[], ANY, &mut Vec::new()).is_none());
    }
}
