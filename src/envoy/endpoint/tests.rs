use super::*;
use crate::envoy::fixtures::{decode, ep, merged, port};
use envoy_types::pb::envoy::config::core::v3::address;
use tributary_registries::{Endpoint, Protocol};

fn cla(
    endpoints: Vec<Endpoint>,
    opts: &GenerateOptions,
) -> (ClusterLoadAssignment, Vec<ConfigIssue>) {
    let svc = merged(
        "echo.demo.svc.cluster.local",
        vec![port("http", 80, Protocol::Http)],
        endpoints,
    );
    let mut issues = Vec::new();
    let out = load_assignments_for(&svc, opts, &mut issues);
    assert_eq!(out.len(), 1);
    assert_eq!(&*out[0].name, "outbound|80||echo.demo.svc.cluster.local");
    (decode(&out[0]), issues)
}

/// `ip:port` (or the pipe path) of each endpoint, per locality group.
fn addresses(cla: &ClusterLoadAssignment) -> Vec<Vec<String>> {
    cla.endpoints
        .iter()
        .map(|l| {
            l.lb_endpoints
                .iter()
                .map(|lb| {
                    let Some(HostIdentifier::Endpoint(e)) = &lb.host_identifier else {
                        panic!()
                    };
                    match e.address.as_ref().unwrap().address.as_ref().unwrap() {
                        address::Address::SocketAddress(sa) => {
                            let Some(
                                envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier::PortValue(p),
                            ) = sa.port_specifier
                            else {
                                panic!()
                            };
                            format!("{}:{p}", sa.address)
                        }
                        address::Address::Pipe(p) => format!("pipe:{}", p.path),
                        address::Address::EnvoyInternalAddress(_) => panic!(),
                    }
                })
                .collect()
        })
        .collect()
}

fn at(address: &str, locality: &str) -> Endpoint {
    let mut e = ep(address);
    e.locality = Locality::parse(locality);
    e
}

#[test]
fn endpoints_are_grouped_by_sorted_locality_and_sorted_within() {
    let (cla, issues) = cla(
        vec![
            at("10.0.0.3", "us-west/b/"),
            at("10.0.0.2", "us-east/a/"),
            at("10.0.0.1", "us-west/b/"),
            at("10.0.0.9", ""),
        ],
        &GenerateOptions::default(),
    );
    assert!(issues.is_empty());
    assert_eq!(
        addresses(&cla),
        [
            vec!["10.0.0.9:80"],
            vec!["10.0.0.2:80"],
            vec!["10.0.0.1:80", "10.0.0.3:80"]
        ]
    );
    assert_eq!(cla.endpoints[0].locality, None);
    let west = cla.endpoints[2].locality.as_ref().unwrap();
    assert_eq!((west.region.as_str(), west.zone.as_str()), ("us-west", "b"));
}

#[test]
fn output_does_not_depend_on_input_order() {
    // SOTW-7, REG-14: a reordering resync is the same bytes, hence no push.
    let eps = vec![
        at("10.0.0.3", "r/z/"),
        at("10.0.0.2", "r/y/"),
        at("10.0.0.1", "r/z/"),
    ];
    let mut reversed = eps.clone();
    reversed.reverse();
    let svc = |eps| merged("a.demo", vec![port("http", 80, Protocol::Http)], eps);
    let opts = GenerateOptions::default();
    let a = load_assignments_for(&svc(eps), &opts, &mut Vec::new());
    let b = load_assignments_for(&svc(reversed), &opts, &mut Vec::new());
    assert_eq!(a, b);
    assert_eq!(a[0].version, b[0].version);
}

#[test]
fn endpoint_port_mapping_is_used() {
    let mut e = ep("10.0.0.1");
    e.ports.insert("http".to_string(), 8080);
    let (cla, _) = cla(vec![e], &GenerateOptions::default());
    assert_eq!(addresses(&cla), [vec!["10.0.0.1:8080"]]);
}

#[test]
fn health_maps_and_unhealthy_is_sent_only_when_asked() {
    let mut draining = ep("10.0.0.2");
    draining.health = Health::Draining;
    let mut sick = ep("10.0.0.3");
    sick.health = Health::Unhealthy;
    let eps = vec![ep("10.0.0.1"), draining, sick];
    let statuses = |cla: &ClusterLoadAssignment| -> Vec<i32> {
        cla.endpoints[0]
            .lb_endpoints
            .iter()
            .map(|l| l.health_status)
            .collect()
    };
    let (default, _) = cla(eps.clone(), &GenerateOptions::default());
    assert_eq!(
        statuses(&default),
        [HealthStatus::Healthy as i32, HealthStatus::Draining as i32]
    );
    let opts = GenerateOptions {
        send_unhealthy_endpoints: true,
        ..Default::default()
    };
    let (all, _) = cla(eps, &opts);
    assert_eq!(
        statuses(&all),
        [
            HealthStatus::Healthy as i32,
            HealthStatus::Draining as i32,
            HealthStatus::Unhealthy as i32
        ]
    );
}

#[test]
fn weight_is_at_least_one() {
    let mut zero = ep("10.0.0.1");
    zero.weight = 0;
    let mut five = ep("10.0.0.2");
    five.weight = 5;
    let (cla, _) = cla(vec![zero, five], &GenerateOptions::default());
    let weights: Vec<u32> = cla.endpoints[0]
        .lb_endpoints
        .iter()
        .map(|l| l.load_balancing_weight.as_ref().unwrap().value)
        .collect();
    assert_eq!(weights, [1, 5]);
}

#[test]
fn weights_too_large_for_envoy_are_scaled_and_reported() {
    let mut a = ep("10.0.0.1");
    a.weight = u32::MAX;
    let mut b = ep("10.0.0.2");
    b.weight = u32::MAX / 2;
    let (cla, issues) = cla(vec![a, b], &GenerateOptions::default());
    let sum: u64 = cla.endpoints[0]
        .lb_endpoints
        .iter()
        .map(|l| u64::from(l.load_balancing_weight.as_ref().unwrap().value))
        .sum();
    assert!(sum <= u64::from(u32::MAX));
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0].field, "ports[http]");
}

#[test]
fn non_ip_addresses_are_dropped_with_an_issue_but_unix_paths_stay() {
    // REG-17.
    let (cla, issues) = cla(
        vec![
            ep("10.0.0.1"),
            ep("db.example.com"),
            ep("unix:///var/run/app.sock"),
        ],
        &GenerateOptions::default(),
    );
    assert_eq!(
        addresses(&cla),
        [vec!["10.0.0.1:80", "pipe:/var/run/app.sock"]]
    );
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0].object, "echo.demo.svc.cluster.local");
    assert_eq!(issues[0].field, "endpoints[1].address");
}

#[test]
fn bad_addresses_are_reported_once_not_once_per_port() {
    let svc = merged(
        "a.demo",
        vec![
            port("http", 80, Protocol::Http),
            port("tcp", 81, Protocol::Tcp),
        ],
        vec![ep("not-an-ip")],
    );
    let mut issues = Vec::new();
    let out = load_assignments_for(&svc, &GenerateOptions::default(), &mut issues);
    assert_eq!(out.len(), 2);
    assert_eq!(issues.len(), 1);
}

#[test]
fn duplicate_address_from_two_registries_appears_once_first_wins() {
    let first = ep("10.0.0.1");
    let mut second = ep("10.0.0.1");
    second.weight = 7;
    second.origin.registry = tributary_registries::RegistryId::new("consul");
    let (cla, _) = cla(vec![first, second], &GenerateOptions::default());
    assert_eq!(addresses(&cla), [vec!["10.0.0.1:80"]]);
    let w = cla.endpoints[0].lb_endpoints[0]
        .load_balancing_weight
        .as_ref()
        .unwrap();
    assert_eq!(w.value, 1);
}

#[test]
fn ipv6_spellings_are_one_address() {
    let (cla, _) = cla(
        vec![ep("fd00::1"), ep("fd00:0:0::0001")],
        &GenerateOptions::default(),
    );
    assert_eq!(addresses(&cla), [vec!["fd00::1:80"]]);
}

#[test]
fn no_endpoints_still_yields_an_empty_cla() {
    // SOTW-26: scale to zero sends an empty CLA, never silence.
    let (empty, _) = cla(vec![], &GenerateOptions::default());
    assert!(empty.endpoints.is_empty());
    let mut sick = ep("10.0.0.1");
    sick.health = Health::Unhealthy;
    let (all_filtered, _) = cla(vec![sick], &GenerateOptions::default());
    assert!(all_filtered.endpoints.is_empty());
}

#[test]
fn only_static_services_have_load_assignments() {
    for r in [
        Resolution::Dns,
        Resolution::DnsRoundRobin,
        Resolution::Passthrough,
    ] {
        let mut svc = merged("a.demo", vec![port("http", 80, Protocol::Http)], vec![]);
        svc.service.resolution = r;
        assert!(
            load_assignments_for(&svc, &GenerateOptions::default(), &mut Vec::new()).is_empty()
        );
    }
}
