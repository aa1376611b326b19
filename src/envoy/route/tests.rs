use super::*;
use crate::envoy::fixtures::{decode, merged, port};
use std::net::Ipv6Addr;
use tributary_registries::{ClusterId, Protocol};

fn routes(port_: u16, services: &[&MergedService]) -> (RouteConfiguration, Vec<ConfigIssue>) {
    let mut issues = Vec::new();
    let r = route_config_for_port(port_, services, &mut issues).expect("an HTTP port");
    assert_eq!(&*r.name, port_.to_string());
    (decode(&r), issues)
}

fn vhost<'a>(rc: &'a RouteConfiguration, host: &str) -> &'a VirtualHost {
    rc.virtual_hosts
        .iter()
        .find(|v| v.name.starts_with(&format!("{host}:")))
        .unwrap_or_else(|| panic!("no vhost for {host}"))
}

#[test]
fn one_vhost_with_hostname_short_names_and_vips() {
    let mut svc = merged(
        "echo.demo.svc.cluster.local",
        vec![port("http", 80, Protocol::Http)],
        vec![],
    );
    svc.service
        .vips
        .insert(ClusterId::new("c1"), vec!["10.0.0.1".parse().unwrap()]);
    svc.service.vips.insert(
        ClusterId::new("c2"),
        vec![IpAddr::V6(Ipv6Addr::LOCALHOST), "10.0.0.1".parse().unwrap()],
    );
    let (rc, issues) = routes(80, &[&svc]);
    assert!(issues.is_empty());
    let v = &rc.virtual_hosts[0];
    assert_eq!(v.name, "echo.demo.svc.cluster.local:80");
    assert_eq!(
        v.domains,
        [
            "echo.demo.svc.cluster.local",
            "echo.demo.svc.cluster.local:80",
            "echo.demo.svc.cluster",
            "echo.demo.svc.cluster:80",
            "echo.demo.svc",
            "echo.demo.svc:80",
            "echo.demo",
            "echo.demo:80",
            "echo",
            "echo:80",
            "10.0.0.1",
            "10.0.0.1:80",
            "[::1]",
            "[::1]:80",
        ]
    );
}

#[test]
fn route_goes_to_the_cluster_with_timeout_disabled() {
    let svc = merged("g.demo", vec![port("grpc", 9090, Protocol::Grpc)], vec![]);
    let (rc, _) = routes(9090, &[&svc]);
    let r = &rc.virtual_hosts[0].routes[0];
    assert_eq!(
        r.r#match.as_ref().unwrap().path_specifier,
        Some(route_match::PathSpecifier::Prefix("/".to_string()))
    );
    let Some(route::Action::Route(action)) = &r.action else {
        panic!("expected a route action")
    };
    assert_eq!(
        action.cluster_specifier,
        Some(route_action::ClusterSpecifier::Cluster(
            "outbound|9090||g.demo".to_string()
        ))
    );
    let t = action.timeout.as_ref().unwrap();
    assert_eq!((t.seconds, t.nanos), (0, 0));
}

#[test]
fn a_contested_short_name_goes_to_nobody_and_both_are_told() {
    // REG-10, BUG-14, istio #4845: `echo` is wanted by both.
    let a = merged(
        "echo.demo.svc.cluster.local",
        vec![port("http", 80, Protocol::Http)],
        vec![],
    );
    let b = merged(
        "echo.other.svc.cluster.local",
        vec![port("web", 80, Protocol::Http)],
        vec![],
    );
    let (rc, issues) = routes(80, &[&a, &b]);
    for v in &rc.virtual_hosts {
        assert!(!v.domains.iter().any(|d| d == "echo" || d == "echo:80"));
    }
    assert!(
        vhost(&rc, "echo.other.svc.cluster.local")
            .domains
            .contains(&"echo.other".to_string())
    );
    let told: Vec<(&str, &str)> = issues
        .iter()
        .map(|i| (i.object.as_str(), i.field.as_str()))
        .collect();
    assert_eq!(
        told,
        [
            ("echo.demo.svc.cluster.local", "ports[http]"),
            ("echo.other.svc.cluster.local", "ports[web]")
        ]
    );
    assert!(issues[0].message.contains("echo.other.svc.cluster.local"));
}

#[test]
fn a_hostname_beats_another_services_short_name() {
    let long = merged(
        "echo.demo.svc.cluster.local",
        vec![port("http", 80, Protocol::Http)],
        vec![],
    );
    let short = merged("echo.demo", vec![port("http", 80, Protocol::Http)], vec![]);
    let (rc, issues) = routes(80, &[&long, &short]);
    assert_eq!(
        vhost(&rc, "echo.demo").domains,
        ["echo.demo", "echo.demo:80"]
    );
    let long_domains = &vhost(&rc, "echo.demo.svc.cluster.local").domains;
    assert!(!long_domains.contains(&"echo.demo".to_string()));
    // `echo` is a short name of both: nobody's.
    assert!(!long_domains.contains(&"echo".to_string()));
    assert!(
        issues
            .iter()
            .all(|i| i.object == "echo.demo.svc.cluster.local" || i.object == "echo.demo")
    );
    assert!(
        issues
            .iter()
            .any(|i| i.message.contains("is the hostname of echo.demo"))
    );
}

#[test]
fn a_shared_vip_goes_to_nobody() {
    let mut a = merged("a.demo", vec![port("http", 80, Protocol::Http)], vec![]);
    let mut b = merged("b.demo", vec![port("http", 80, Protocol::Http)], vec![]);
    for s in [&mut a, &mut b] {
        s.service
            .vips
            .insert(ClusterId::new("c1"), vec!["10.9.9.9".parse().unwrap()]);
    }
    let (rc, issues) = routes(80, &[&a, &b]);
    for v in &rc.virtual_hosts {
        assert!(!v.domains.iter().any(|d| d.starts_with("10.9.9.9")));
    }
    assert_eq!(issues.len(), 2);
}

#[test]
fn no_domain_appears_twice_and_order_does_not_matter() {
    // REG-12: the invariant Envoy enforces, over a crowd of look-alike names.
    let hosts = [
        "a.b.c.d", "a.b.c", "a.b", "a", "a.x.c.d", "b.a.c.d", "a.b.c.e",
    ];
    let svcs: Vec<MergedService> = hosts
        .iter()
        .map(|h| merged(h, vec![port("http", 80, Protocol::Http)], vec![]))
        .collect();
    let forward: Vec<&MergedService> = svcs.iter().collect();
    let mut backward = forward.clone();
    backward.reverse();
    let mut i1 = Vec::new();
    let mut i2 = Vec::new();
    let r1 = route_config_for_port(80, &forward, &mut i1).unwrap();
    let r2 = route_config_for_port(80, &backward, &mut i2).unwrap();
    assert_eq!(r1, r2);
    assert_eq!(i1, i2);
    let rc: RouteConfiguration = decode(&r1);
    let mut all: Vec<&String> = rc.virtual_hosts.iter().flat_map(|v| &v.domains).collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "a domain appears twice");
    for h in hosts {
        assert!(vhost(&rc, h).domains.contains(&h.to_string()));
    }
}

#[test]
fn tcp_ports_have_no_route_config_and_tcp_losers_are_not_reported_twice() {
    let tcp = merged("db.demo", vec![port("pg", 5432, Protocol::Tcp)], vec![]);
    let mut issues = Vec::new();
    assert!(route_config_for_port(5432, &[&tcp], &mut issues).is_none());
    let web = merged("web.demo", vec![port("http", 5432, Protocol::Http)], vec![]);
    let (rc, issues) = routes(5432, &[&tcp, &web]);
    assert_eq!(rc.virtual_hosts.len(), 1);
    // The TCP loser is reported by listener_for_port, once.
    assert!(issues.is_empty());
}

#[test]
fn a_vip_spelling_one_of_its_own_short_names_is_kept() {
    let mut svc = merged(
        "10.0.0.1.nip.io",
        vec![port("http", 80, Protocol::Http)],
        vec![],
    );
    svc.service
        .vips
        .insert(ClusterId::new("c1"), vec!["10.0.0.1".parse().unwrap()]);
    let (rc, issues) = routes(80, &[&svc]);
    assert!(issues.is_empty(), "{issues:?}");
    let d = &rc.virtual_hosts[0].domains;
    assert_eq!(d.iter().filter(|d| *d == "10.0.0.1").count(), 1);
}
