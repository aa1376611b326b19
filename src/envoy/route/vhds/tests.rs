use envoy_types::pb::envoy::config::core::v3::config_source::ConfigSourceSpecifier;
use envoy_types::pb::envoy::config::route::v3::VirtualHost;

use super::*;
use crate::envoy::fixtures::{decode, http_route};

fn route_config(hosts: &[&str]) -> EncodedResource {
    http_route(80, hosts)
}

#[test]
fn the_route_configuration_keeps_no_virtual_host_and_points_at_vhds_over_ads() {
    let rc = route_config(&["a.demo.svc.cluster.local", "b.demo.svc.cluster.local"]);
    let split = split_route_config(&rc).unwrap();
    assert_eq!(split.route.ty, ResourceType::Route);
    assert_eq!(&*split.route.name, "80");
    let vhds_form: RouteConfiguration = decode(&split.route);
    assert_eq!(vhds_form.name, "80");
    assert!(vhds_form.virtual_hosts.is_empty());
    let source = vhds_form.vhds.and_then(|v| v.config_source).unwrap();
    assert!(matches!(
        source.config_source_specifier,
        Some(ConfigSourceSpecifier::Ads(_))
    ));
}

#[test]
fn each_virtual_host_is_a_resource_named_after_its_route_configuration() {
    let rc = route_config(&["a.demo.svc.cluster.local", "b.demo.svc.cluster.local"]);
    let whole: RouteConfiguration = decode(&rc);
    let split = split_route_config(&rc).unwrap();
    assert_eq!(split.virtual_hosts.len(), 2);
    for (res, original) in split.virtual_hosts.iter().zip(&whole.virtual_hosts) {
        assert_eq!(res.ty, ResourceType::VirtualHost);
        let name = format!("80/{}", original.name);
        assert_eq!(&*res.name, name);
        let vh: VirtualHost = decode(res);
        // Envoy removes a virtual host by its `name`: it must be the resource name.
        assert_eq!(vh.name, name);
        assert_eq!(
            VirtualHost {
                name: original.name.clone(),
                ..vh
            },
            *original
        );
    }
}

#[test]
fn the_same_route_configuration_splits_into_the_same_versions() {
    let a = split_route_config(&route_config(&["a.demo.svc.cluster.local"])).unwrap();
    let b = split_route_config(&route_config(&[
        "a.demo.svc.cluster.local",
        "b.demo.svc.cluster.local",
    ]))
    .unwrap();
    // Adding a service changes the route configuration, not the other virtual hosts (DELTA-13).
    assert_eq!(a.route.hash, b.route.hash);
    assert_eq!(a.virtual_hosts[0].name, b.virtual_hosts[0].name);
    assert_eq!(a.virtual_hosts[0].hash, b.virtual_hosts[0].hash);
}

#[test]
fn bytes_that_are_not_a_route_configuration_are_an_error() {
    let bad = EncodedResource::encode(
        ResourceType::Route,
        "80",
        &Encoded::from_bytes(vec![0x12, 0x7f, 0x01]),
    );
    assert!(split_route_config(&bad).is_err());
}

#[test]
fn names_join_the_route_configuration_and_the_virtual_host() {
    assert_eq!(virtual_host_resource_name("80", "a:80"), "80/a:80");
    assert!(virtual_host_resource_name("80", "a:80").starts_with(&virtual_host_prefix("80")));
}
