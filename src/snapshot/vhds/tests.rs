use super::*;
use crate::envoy::EncodedResource;
use crate::envoy::fixtures::http_route;
use crate::snapshot::{BuildInput, Snapshot, SnapshotBuilder, View};

const A: &str = "a.demo.svc.cluster.local";
const B: &str = "b.demo.svc.cluster.local";

fn route(hosts: &[&str]) -> EncodedResource {
    http_route(80, hosts)
}

fn build(b: &mut SnapshotBuilder, input: BuildInput) -> Arc<Snapshot> {
    b.build(input).expect("a change")
}

fn upsert(r: EncodedResource) -> BuildInput {
    BuildInput {
        upserts: vec![r],
        ..Default::default()
    }
}

fn vhds() -> View {
    View::Vhds {
        bind: None,
        locality: None,
    }
}

fn names(res: &TypeResources) -> Vec<String> {
    res.entries.keys().map(|k| k.to_string()).collect()
}

#[test]
fn a_vhds_view_sees_route_configurations_without_virtual_hosts_and_the_virtual_hosts() {
    let mut b = SnapshotBuilder::new();
    let s = build(&mut b, upsert(route(&[A, B])));
    let routes = s.resources_for(ResourceType::Route, vhds());
    assert_eq!(names(&routes), ["80"]);
    assert_ne!(
        routes.get("80").unwrap().resource.hash,
        s.resources(ResourceType::Route).get("80").unwrap().resource.hash,
        "the VHDS form differs from the inline one"
    );
    let vhs = s.resources_for(ResourceType::VirtualHost, vhds());
    assert_eq!(names(&vhs), [format!("80/{A}:80"), format!("80/{B}:80")]);
    // Other views keep inline virtual hosts and see no VirtualHost resources.
    assert!(s.resources_for(ResourceType::VirtualHost, View::Envoy).is_empty());
    assert_eq!(
        s.resources_for(ResourceType::Route, View::Envoy).get("80").unwrap().resource.hash,
        s.resources(ResourceType::Route).get("80").unwrap().resource.hash
    );
    assert!(Arc::ptr_eq(
        &s.resources_for(ResourceType::Cluster, vhds()),
        &s.resources_for(ResourceType::Cluster, View::Envoy)
    ));
}

#[test]
fn adding_a_service_changes_one_virtual_host_and_not_the_route_configuration() {
    let mut b = SnapshotBuilder::new();
    let first = build(&mut b, upsert(route(&[A])));
    let second = build(&mut b, upsert(route(&[A, B])));
    let before = first.resources_for(ResourceType::Route, vhds());
    let after = second.resources_for(ResourceType::Route, vhds());
    assert_eq!(before.entries.diff(&after.entries).count(), 0);
    let vhs = second.resources_for(ResourceType::VirtualHost, vhds());
    let a = vhs.get(&format!("80/{A}:80")).unwrap();
    let b_ = vhs.get(&format!("80/{B}:80")).unwrap();
    assert_eq!(a.changed_seq, first.seq, "unchanged virtual host keeps its entry");
    assert_eq!(b_.changed_seq, second.seq);
    let changes = second
        .changes_since(ResourceType::VirtualHost, first.seq)
        .unwrap();
    assert_eq!(
        changes.changed.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        [format!("80/{B}:80")]
    );
}

#[test]
fn deleting_a_service_or_the_route_configuration_removes_virtual_hosts() {
    let mut b = SnapshotBuilder::new();
    build(&mut b, upsert(route(&[A, B])));
    let s = build(&mut b, upsert(route(&[A])));
    let vhs = s.resources_for(ResourceType::VirtualHost, vhds());
    assert_eq!(names(&vhs), [format!("80/{A}:80")]);
    let s = build(
        &mut b,
        BuildInput {
            removes: vec![(ResourceType::Route, Arc::from("80"))],
            ..Default::default()
        },
    );
    assert!(s.resources_for(ResourceType::VirtualHost, vhds()).is_empty());
    assert!(s.resources_for(ResourceType::Route, vhds()).is_empty());
}

#[test]
fn names_of_takes_only_that_route_configurations_virtual_hosts() {
    let mut b = SnapshotBuilder::new();
    build(&mut b, upsert(route(&[A])));
    let s = build(&mut b, upsert(http_route(8080, &[B])));
    let vhs = s.resources_for(ResourceType::VirtualHost, vhds());
    assert_eq!(names_of(&vhs, "80"), [Arc::<str>::from(format!("80/{A}:80"))]);
    assert_eq!(
        names_of(&vhs, "8080"),
        [Arc::<str>::from(format!("8080/{B}:8080"))]
    );
    assert!(names_of(&vhs, "8").is_empty());
}
