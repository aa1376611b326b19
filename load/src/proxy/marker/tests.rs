#![allow(clippy::unwrap_used)]

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::config::route::v3::VirtualHost;
use envoy_types::pb::google::protobuf::Any;

use super::*;
use crate::wire::fixtures::{any, delta, route_config, sotw};
use crate::wire::{CDS, EDS, LDS};

const HOST: &str = "svc-10000.load.svc.cluster.local";
const OTHER: &str = "svc-00000.load.svc.cluster.local:80";

fn new_service() -> Marker {
    Marker::Routable { host: HOST.into() }
}

fn deleted_service() -> Marker {
    Marker::Unroutable { host: HOST.into() }
}

fn proxy(delta: bool, vhds: bool) -> Proxy<'static> {
    Proxy {
        delta,
        vhds,
        full_set: None,
    }
}

fn vhost(name: &str) -> (String, Any) {
    let vh = VirtualHost {
        name: name.into(),
        domains: vec![name.into()],
        ..Default::default()
    };
    (format!("80/{name}"), any(VHDS, &vh))
}

fn cluster(name: &str) -> Any {
    let c = Cluster {
        name: name.into(),
        ..Default::default()
    };
    any(CDS, &c)
}

#[test]
fn a_new_service_is_reached_with_its_route_not_its_cluster() {
    let host_vh = format!("{HOST}:80");
    let sotw_proxy = proxy(false, false);
    let cds = sotw(CDS, vec![cluster(&format!("outbound|80||{HOST}"))]);
    assert!(!hits(&new_service(), &cds, &sotw_proxy));
    let without = sotw(RDS, vec![route_config("80", &[OTHER])]);
    assert!(!hits(&new_service(), &without, &sotw_proxy));
    let with = sotw(
        RDS,
        vec![
            route_config("80", &[OTHER, &host_vh]),
            route_config("81", &[OTHER]),
        ],
    );
    assert!(hits(&new_service(), &with, &sotw_proxy));
    // Delta: the route configuration resent with the host's virtual host in it.
    let with = delta(
        RDS,
        vec![("80", route_config("80", &[&host_vh, OTHER]))],
        &[],
    );
    assert!(hits(&new_service(), &with, &proxy(true, false)));
    let lds = sotw(LDS, vec![]);
    assert!(!hits(&new_service(), &lds, &sotw_proxy));
}

#[test]
fn a_vhds_proxy_reaches_a_new_service_with_its_virtual_host() {
    let vhds_proxy = proxy(true, true);
    let (name, vh) = vhost(&format!("{HOST}:80"));
    let r = delta(VHDS, vec![(&name, vh)], &[]);
    assert!(hits(&new_service(), &r, &vhds_proxy));
    let (name, vh) = vhost(OTHER);
    let r = delta(VHDS, vec![(&name, vh)], &[]);
    assert!(!hits(&new_service(), &r, &vhds_proxy));
    // Its route configurations carry no virtual host: neither added nor removed by them.
    let rds = delta(RDS, vec![("80", route_config("80", &[]))], &[]);
    assert!(!hits(&new_service(), &rds, &vhds_proxy));
    assert!(!hits(&deleted_service(), &rds, &vhds_proxy));
}

#[test]
fn a_deleted_service_is_gone_with_its_virtual_host() {
    let host_vh = format!("{HOST}:80");
    let sotw_proxy = proxy(false, false);
    let still = sotw(RDS, vec![route_config("80", &[OTHER, &host_vh])]);
    assert!(!hits(&deleted_service(), &still, &sotw_proxy));
    let gone = sotw(
        RDS,
        vec![route_config("80", &[OTHER]), route_config("81", &[OTHER])],
    );
    assert!(hits(&deleted_service(), &gone, &sotw_proxy));
    // Some route configuration must be there to say the host is absent.
    assert!(!hits(&deleted_service(), &sotw(RDS, vec![]), &sotw_proxy));
    // The cluster's removal alone does not make the host unroutable.
    let cds = delta(CDS, vec![], &[&format!("outbound|80||{HOST}")]);
    assert!(!hits(&deleted_service(), &cds, &proxy(true, false)));
    let gone = delta(RDS, vec![("80", route_config("80", &[OTHER]))], &[]);
    assert!(hits(&deleted_service(), &gone, &proxy(true, false)));
    let removed = format!("80/{host_vh}");
    let vhds = delta(VHDS, vec![], &[&removed]);
    assert!(hits(&deleted_service(), &vhds, &proxy(true, true)));
    let vhds = delta(VHDS, vec![], &[&format!("80/{OTHER}")]);
    assert!(!hits(&deleted_service(), &vhds, &proxy(true, true)));
}

#[test]
fn an_endpoint_change_is_its_cluster_load_assignment() {
    let marker = Marker::Carries {
        type_url: EDS,
        name: "outbound|80||a".into(),
    };
    let cla = ClusterLoadAssignment {
        cluster_name: "outbound|80||a".into(),
        ..Default::default()
    };
    assert!(hits(
        &marker,
        &sotw(EDS, vec![any(EDS, &cla)]),
        &proxy(false, false)
    ));
    let other = ClusterLoadAssignment {
        cluster_name: "outbound|80||b".into(),
        ..Default::default()
    };
    assert!(!hits(
        &marker,
        &sotw(EDS, vec![any(EDS, &other)]),
        &proxy(false, false)
    ));
}
