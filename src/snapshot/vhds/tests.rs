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
        s.resources(ResourceType::Route)
            .get("80")
            .unwrap()
            .resource
            .hash,
        "the VHDS form differs from the inline one"
    );
    let vhs = s.resources_for(ResourceType::VirtualHost, vhds());
    assert_eq!(names(&vhs), [format!("80/{A}:80"), format!("80/{B}:80")]);
    // Other views keep inline virtual hosts and see no VirtualHost resources.
    assert!(
        s.resources_for(ResourceType::VirtualHost, View::Envoy)
            .is_empty()
    );
    assert_eq!(
        s.resources_for(ResourceType::Route, View::Envoy)
            .get("80")
            .unwrap()
            .resource
            .hash,
        s.resources(ResourceType::Route)
            .get("80")
            .unwrap()
            .resource
            .hash
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
    demand(&first);
    let second = build(&mut b, upsert(route(&[A, B])));
    let before = first.resources_for(ResourceType::Route, vhds());
    let after = second.resources_for(ResourceType::Route, vhds());
    assert_eq!(before.entries.diff(&after.entries).count(), 0);
    let vhs = second.resources_for(ResourceType::VirtualHost, vhds());
    let a = vhs.get(&format!("80/{A}:80")).unwrap();
    let b_ = vhs.get(&format!("80/{B}:80")).unwrap();
    assert_eq!(
        a.changed_seq, first.seq,
        "unchanged virtual host keeps its entry"
    );
    assert_eq!(b_.changed_seq, second.seq);
    let changes = second
        .changes_since(ResourceType::VirtualHost, first.seq)
        .unwrap();
    assert_eq!(
        changes
            .changed
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>(),
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
    assert!(
        s.resources_for(ResourceType::VirtualHost, vhds())
            .is_empty()
    );
    assert!(s.resources_for(ResourceType::Route, vhds()).is_empty());
}

#[test]
fn names_of_takes_only_that_route_configurations_virtual_hosts() {
    let mut b = SnapshotBuilder::new();
    build(&mut b, upsert(route(&[A])));
    let s = build(&mut b, upsert(http_route(8080, &[B])));
    let vhs = s.resources_for(ResourceType::VirtualHost, vhds());
    assert_eq!(
        names_of(&vhs, "80"),
        [Arc::<str>::from(format!("80/{A}:80"))]
    );
    assert_eq!(
        names_of(&vhs, "8080"),
        [Arc::<str>::from(format!("8080/{B}:8080"))]
    );
    assert!(names_of(&vhs, "8").is_empty());
}

/// Reads `s` as a VHDS client does: from then on its builder keeps the VHDS form in step.
fn demand(s: &Snapshot) {
    s.resources_for(ResourceType::VirtualHost, vhds());
}

/// Two ports' route configurations, then one changed, one service added to it, the other port
/// removed: the builds a VHDS client may connect after.
fn history() -> Vec<BuildInput> {
    vec![
        upsert(route(&[A])),
        upsert(http_route(8080, &[A, B])),
        upsert(route(&[A, B])),
        BuildInput {
            removes: vec![(ResourceType::Route, Arc::from("8080"))],
            ..Default::default()
        },
    ]
}

#[test]
fn without_a_vhds_client_no_build_splits_the_route_configurations() {
    let mut b = SnapshotBuilder::new();
    for input in history() {
        let s = build(&mut b, input);
        assert!(s.vhds.get().is_none(), "build {} split", s.seq);
        // Other views read routes and see no virtual hosts, and split nothing either.
        for view in [View::Envoy, View::Proxyless] {
            s.resources_for(ResourceType::Route, view);
            assert!(s.resources_for(ResourceType::VirtualHost, view).is_empty());
        }
        assert!(s.vhds.get().is_none());
        assert!(
            s.changes_since(ResourceType::VirtualHost, s.seq - 1)
                .is_none()
        );
    }
}

/// Name and version (the content hash, DELTA-13) of each resource.
fn versions(res: &TypeResources) -> Vec<(String, String)> {
    res.entries
        .iter()
        .map(|(n, e)| (n.to_string(), e.resource.version.to_string()))
        .collect()
}

/// What a VHDS client sees of `s`: its route configurations and virtual hosts, with versions.
fn seen(s: &Snapshot) -> [(Vec<(String, String)>, String); 2] {
    [ResourceType::Route, ResourceType::VirtualHost].map(|ty| {
        let res = s.resources_for(ty, vhds());
        (versions(&res), res.version.to_string())
    })
}

#[test]
fn a_vhds_client_arriving_late_sees_what_one_there_from_the_start_sees() {
    let (mut early, mut late) = (SnapshotBuilder::new(), SnapshotBuilder::new());
    let mut last = None;
    for input in history() {
        let again = BuildInput {
            upserts: input.upserts.clone(),
            removes: input.removes.clone(),
            ..Default::default()
        };
        let s = build(&mut early, input);
        demand(&s);
        last = Some((s, build(&mut late, again)));
    }
    let (e, l) = last.expect("builds");
    assert!(
        l.vhds.get().is_none(),
        "no split before the first VHDS read"
    );
    assert_eq!(seen(&l), seen(&e), "same virtual hosts, same versions");
    let vhs = l.resources_for(ResourceType::VirtualHost, vhds());
    assert_eq!(names(&vhs), [format!("80/{A}:80"), format!("80/{B}:80")]);
    // The late builder's VirtualHost history starts at its first split: asking for earlier changes
    // falls back to `changed_seq`, which puts every virtual host after it.
    assert!(
        l.changes_since(ResourceType::VirtualHost, l.seq - 1)
            .is_none()
    );
    assert!(vhs.entries.values().all(|e| e.changed_seq == l.seq));
    // From the read on, both builders follow the route configurations alike.
    let change = || BuildInput {
        upserts: vec![route(&[B])],
        ..Default::default()
    };
    let (e, l) = (build(&mut early, change()), build(&mut late, change()));
    assert!(l.vhds.get().is_some(), "built with the snapshot");
    assert_eq!(seen(&l), seen(&e));
    let removed = [Arc::<str>::from(format!("80/{A}:80"))];
    for s in [&e, &l] {
        let c = s
            .changes_since(ResourceType::VirtualHost, s.seq - 1)
            .expect("history");
        assert!(c.changed.is_empty(), "{c:?}");
        assert_eq!(c.removed.iter().cloned().collect::<Vec<_>>(), removed);
    }
}

#[test]
fn a_vhds_read_of_an_older_snapshot_makes_the_next_build_split() {
    // The race of a stream reading a snapshot while the next one is built: the next build then has
    // no form to follow, and splits whole.
    let mut b = SnapshotBuilder::new();
    let old = build(&mut b, upsert(route(&[A])));
    let newer = build(&mut b, upsert(route(&[A, B])));
    demand(&old);
    assert!(newer.vhds.get().is_none());
    let next = build(&mut b, upsert(http_route(8080, &[B])));
    let form = next.vhds.get().expect("split by the build");
    assert_eq!(form.split_at, next.seq);
    assert_eq!(
        names(&form.virtual_hosts),
        [
            format!("80/{A}:80"),
            format!("80/{B}:80"),
            format!("8080/{B}:8080")
        ]
    );
    assert!(
        next.changes_since(ResourceType::VirtualHost, newer.seq)
            .is_none()
    );
}
