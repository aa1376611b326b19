use std::collections::BTreeMap;

use envoy_types::pb::envoy::config::core::v3::Locality as PbLocality;
use envoy_types::pb::envoy::config::endpoint::v3::{ClusterLoadAssignment, LocalityLbEndpoints};
use tributary_registries::rules::LocalityLbSetting;

use super::*;
use crate::envoy::rules::LocalityInput;
use crate::snapshot::{BuildInput, SnapshotBuilder, View};

fn group(region: &str, zone: &str) -> LocalityLbEndpoints {
    LocalityLbEndpoints {
        locality: Some(PbLocality {
            region: region.into(),
            zone: zone.into(),
            ..Default::default()
        }),
        lb_endpoints: vec![Default::default()],
        ..Default::default()
    }
}

/// Assignment `a`: one endpoint in east/z1, one in west/z1.
fn two_zones() -> ClusterLoadAssignment {
    ClusterLoadAssignment {
        cluster_name: "a".into(),
        endpoints: vec![group("east", "z1"), group("west", "z1")],
        ..Default::default()
    }
}

/// `a` differs by proxy locality (failover by proximity), `b` does not.
fn input() -> BuildInput {
    let cla = two_zones();
    let setting = LocalityLbSetting::default();
    let located = LocalityInput::new(&cla, &setting, true, |_| BTreeMap::new()).expect("applies");
    let plain = ClusterLoadAssignment {
        cluster_name: "b".into(),
        ..Default::default()
    };
    BuildInput {
        upserts: vec![
            EncodedResource::encode_located("a", located),
            EncodedResource::encode(ResourceType::Endpoint, "b", &plain),
        ],
        ..Default::default()
    }
}

fn view(region: &str) -> View {
    View::Located {
        bind: None,
        proxyless: false,
        locality: LocalityId::intern(Locality::parse(&format!("{region}/z1"))).expect("room"),
    }
}

/// Whether a proxy in `region` sees the very map of type `ty` a proxy without a locality sees.
fn same_as_default(snap: &crate::snapshot::Snapshot, ty: ResourceType, region: &str) -> bool {
    Arc::ptr_eq(
        &snap.resources_for(ty, view(region)),
        &snap.resources_for(ty, View::Envoy),
    )
}

fn priority_of_east(res: &TypeResources) -> u32 {
    let cla: ClusterLoadAssignment =
        crate::envoy::fixtures::decode(&res.get("a").unwrap().resource);
    cla.endpoints[0].priority
}

#[test]
fn localities_are_interned_and_empty_ones_are_not() {
    let a = LocalityId::intern(Locality::parse("r1/z1")).unwrap();
    assert_eq!(LocalityId::intern(Locality::parse("r1/z1")), Some(a));
    assert_ne!(LocalityId::intern(Locality::parse("r1/z2")), Some(a));
    assert_eq!(*a.locality(), Locality::parse("r1/z1"));
    assert_eq!(LocalityId::intern(Locality::default()), None);
}

#[test]
fn each_locality_builds_its_variant_once_and_shares_the_rest() {
    let snap = SnapshotBuilder::new().build(input()).expect("a change");
    let default = snap.resources_for(ResourceType::Endpoint, View::Envoy);
    let east = snap.resources_for(ResourceType::Endpoint, view("east"));
    let west = snap.resources_for(ResourceType::Endpoint, view("west"));
    assert_eq!((priority_of_east(&east), priority_of_east(&west)), (0, 1));
    assert_eq!(priority_of_east(&default), 0, "no locality: no priorities");
    let east_again = snap.resources_for(ResourceType::Endpoint, view("east"));
    assert!(Arc::ptr_eq(&east, &east_again), "one encoding per locality");
    assert_eq!(snap.locality_variants_built(), 2);
    // Assignments without a locality setting are the default's own entries.
    assert!(Arc::ptr_eq(
        &east.get("b").unwrap().resource,
        &default.get("b").unwrap().resource
    ));
    assert_ne!(east.version, west.version);
    assert_ne!(east.version, default.version);
    // Other types do not differ by locality.
    assert!(same_as_default(&snap, ResourceType::Cluster, "east"));
}

#[test]
fn a_setting_change_alone_is_a_change_and_removal_forgets_the_name() {
    let mut b = SnapshotBuilder::new();
    b.build(input()).expect("first");
    let mut next = input();
    let cla = two_zones();
    let setting = LocalityLbSetting {
        failover_priority: vec!["topology.kubernetes.io/region".into()],
        ..Default::default()
    };
    next.upserts[0] = EncodedResource::encode_located(
        "a",
        LocalityInput::new(&cla, &setting, true, |_| BTreeMap::new()).unwrap(),
    );
    let snap = b
        .build(next)
        .expect("the setting changed, the bytes did not");
    let changes = snap.changes_since(ResourceType::Endpoint, 1).unwrap();
    let changed: Vec<&str> = changes.changed.iter().map(|n| &**n).collect();
    assert_eq!(changed, ["a"]);
    let snap = b
        .build(BuildInput {
            removes: vec![(ResourceType::Endpoint, "a".into())],
            ..Default::default()
        })
        .expect("removed");
    assert!(snap.located.names().is_empty());
    assert!(same_as_default(&snap, ResourceType::Endpoint, "east"));
}

#[test]
fn the_next_snapshot_builds_a_variant_from_the_previous_one_and_the_change() {
    let mut b = SnapshotBuilder::new();
    let s1 = b.build(input()).expect("first");
    let east1 = s1.resources_for(ResourceType::Endpoint, view("east"));
    let plain = |name: &str| {
        let cla = ClusterLoadAssignment {
            cluster_name: name.into(),
            ..Default::default()
        };
        EncodedResource::encode(ResourceType::Endpoint, name, &cla)
    };
    let s2 = b
        .build(BuildInput {
            upserts: vec![plain("c")],
            ..Default::default()
        })
        .expect("c added");
    let east2 = s2.resources_for(ResourceType::Endpoint, view("east"));
    let a = |r: &TypeResources| Arc::clone(&r.get("a").unwrap().resource);
    assert!(
        Arc::ptr_eq(&a(&east1), &a(&east2)),
        "unchanged: not re-encoded"
    );
    assert!(east2.get("c").is_some() && east2.get("b").is_some());
    assert_ne!(east1.version, east2.version);
    // `a` loses its east endpoints: re-specialised, west is now the first priority.
    let cla = ClusterLoadAssignment {
        cluster_name: "a".into(),
        endpoints: vec![group("west", "z1")],
        ..Default::default()
    };
    let input = LocalityInput::new(&cla, &LocalityLbSetting::default(), true, |_| {
        BTreeMap::new()
    });
    let s3 = b
        .build(BuildInput {
            upserts: vec![EncodedResource::encode_located("a", input.unwrap())],
            removes: vec![(ResourceType::Endpoint, "c".into())],
            ..Default::default()
        })
        .expect("a changed");
    let east3 = s3.resources_for(ResourceType::Endpoint, view("east"));
    let got: ClusterLoadAssignment = crate::envoy::fixtures::decode(&a(&east3));
    assert_eq!(got.endpoints.len(), 1);
    assert_eq!(got.endpoints[0].priority, 0);
    assert!(east3.get("c").is_none(), "removals follow");
    assert_eq!(s3.locality_variants_built(), 1);
}
