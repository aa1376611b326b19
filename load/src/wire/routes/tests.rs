#![allow(clippy::unwrap_used)]

use super::super::fixtures::{delta, route_config, sotw};
use super::*;
use crate::wire::{CDS, RDS};

const HOST: &str = "svc-00001.load.svc.cluster.local";

#[test]
fn a_virtual_host_belongs_to_its_hostname_only() {
    assert!(is_host(b"svc-00001.load.svc.cluster.local:80", HOST));
    assert!(is_host(HOST.as_bytes(), HOST));
    // Another service whose name starts with this one's, or a longer domain.
    assert!(!is_host(
        b"svc-000012.load.svc.cluster.local:80",
        "svc-00001"
    ));
    assert!(!is_host(b"svc-00001.load.svc.cluster.local.eu:80", HOST));
    assert!(!is_host(b"svc-00002.load.svc.cluster.local:80", HOST));
    assert!(is_host_resource(&format!("80/{HOST}:80"), HOST));
    assert!(!is_host_resource(&format!("{HOST}:80"), HOST));
    assert!(!is_host_resource(
        "80/svc-00002.load.svc.cluster.local:80",
        HOST
    ));
}

#[test]
fn route_configurations_are_read_for_the_host_in_both_protocols() {
    let with = format!("{HOST}:80");
    let other = "svc-00002.load.svc.cluster.local:80";
    let r = sotw(
        RDS,
        vec![
            route_config("80", &[other, &with]),
            route_config("81", &[other]),
        ],
    );
    assert_eq!(r.routes_with_host(false, HOST).unwrap(), [true, false]);
    let r = delta(RDS, vec![("81", route_config("81", &[other, &with]))], &[]);
    assert_eq!(r.routes_with_host(true, HOST).unwrap(), [true]);
    assert_eq!(r.routes_with_host(true, "svc-00003").unwrap(), [false]);
    // A route configuration without virtual hosts (what a VHDS client gets) has none.
    let r = sotw(RDS, vec![route_config("80", &[])]);
    assert_eq!(r.routes_with_host(false, HOST).unwrap(), [false]);
    assert!(
        sotw(CDS, vec![])
            .routes_with_host(false, HOST)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn an_unreadable_route_configuration_is_an_error() {
    let mut r = sotw(RDS, vec![route_config("80", &[HOST])]);
    // An `Any` whose value is a truncated message: field 2, length 80, one byte.
    r.resources = vec![Bytes::from_static(&[0x12, 0x03, 0x12, 0x50, 0x01])];
    assert!(r.routes_with_host(false, HOST).is_err());
}
