use super::*;
use crate::consul::wire::{AgentService, Node, Weights};

fn mapping(yaml: &str) -> Mapping {
    let config: ConsulConfig = serde_yaml::from_str(yaml).unwrap();
    config.validate().unwrap();
    Mapping::new(&config)
}

fn host(name: &str) -> Hostname {
    Hostname::new(&format!("{name}.service.consul")).unwrap()
}

fn check(id: &str, status: &str) -> Check {
    Check {
        check_id: id.into(),
        status: status.into(),
        service_id: String::new(),
    }
}

/// An instance `id` of `web` at `addr:port` on node `n-<id>` (10.0.0.1, dc1, zone a), with a
/// passing node check.
fn entry(id: &str, addr: &str, port: u32) -> HealthEntry {
    HealthEntry {
        node: Node {
            name: format!("n-{id}"),
            address: "10.0.0.1".into(),
            datacenter: "dc1".into(),
            meta: BTreeMap::from([("zone".to_string(), "a".to_string())]),
        },
        service: AgentService {
            id: id.into(),
            service: "web".into(),
            address: addr.into(),
            port,
            ..Default::default()
        },
        checks: vec![check("serfHealth", "passing")],
    }
}

fn convert(m: &Mapping, entries: &[HealthEntry]) -> ServiceState {
    m.convert(&host("web"), entries, None).state.unwrap()
}

#[test]
fn a_typical_instance_maps_every_field() {
    let m = mapping("name: c1\ndatacenter: dc1");
    let mut e = entry("web-1", "10.1.1.1", 8080);
    e.service.tags = vec![
        "version=v1".into(),
        "team|payments".into(),
        "primary".into(),
        "canary".into(),
    ];
    e.service.meta.insert("protocol".into(), "HTTP".into());
    e.service.weights = Some(Weights {
        passing: 10,
        warning: 1,
    });
    let s = convert(&m, &[e]);
    assert_eq!(s.service.hostname.as_str(), "web.service.consul");
    assert_eq!(
        s.service.ports,
        [ServicePort {
            name: "http".into(),
            port: 8080,
            protocol: Protocol::Http
        }]
    );
    assert_eq!(s.service.resolution, Resolution::Static);
    assert_eq!(s.service.location, MeshLocation::MeshInternal);
    assert_eq!(s.service.origin.registry.as_str(), "c1");
    assert_eq!(s.service.origin.cluster.as_str(), "dc1");
    let ep = &s.endpoints[0];
    assert_eq!(ep.address, "10.1.1.1");
    assert_eq!(ep.ports["http"], 8080);
    assert_eq!(ep.labels["version"], "v1");
    assert_eq!(ep.labels["team"], "payments");
    assert_eq!(ep.labels[TAGS_LABEL], "canary,primary");
    assert_eq!(ep.locality.to_string(), "dc1/a/");
    assert_eq!(ep.health, Health::Healthy);
    assert_eq!(ep.weight, 10);
    assert_eq!(ep.origin, s.service.origin);
}

#[test]
fn node_address_is_the_fallback_and_the_lowest_port_is_the_service_port() {
    let m = mapping("{}");
    let s = convert(&m, &[entry("b", "", 9090), entry("a", "10.2.2.2", 8080)]);
    assert_eq!(s.service.ports[0].port, 8080);
    assert_eq!(s.service.ports[0].name, "tcp", "default protocol TCP");
    let addrs: Vec<(&str, u16)> = s
        .endpoints
        .iter()
        .map(|e| (e.address.as_str(), e.ports["tcp"]))
        .collect();
    assert_eq!(
        addrs,
        [("10.0.0.1", 9090), ("10.2.2.2", 8080)],
        "each on its own port"
    );
}

#[test]
fn the_service_port_sticks_while_an_instance_uses_it() {
    let m = mapping("{}");
    let first = convert(&m, &[entry("a", "10.0.0.5", 9000)]);
    let both = [entry("a", "10.0.0.5", 9000), entry("b", "10.0.0.6", 8000)];
    let next = m.convert(&host("web"), &both, Some(&first)).state.unwrap();
    assert_eq!(
        next.service.ports[0].port, 9000,
        "a lower port joining does not move it"
    );
    let only_b = [entry("b", "10.0.0.6", 8000)];
    let last = m.convert(&host("web"), &only_b, Some(&next)).state.unwrap();
    assert_eq!(
        last.service.ports[0].port, 8000,
        "no instance on 9000 any more"
    );
}

#[test]
fn order_of_consul_answers_does_not_matter() {
    let m = mapping("{}");
    let a = entry("a", "10.0.0.5", 80);
    let b = entry("b", "10.0.0.6", 80);
    assert_eq!(convert(&m, &[a.clone(), b.clone()]), convert(&m, &[b, a]));
}

// REG-7: every check counts; critical and maintenance are UNHEALTHY; warning follows the policy.
#[test]
fn health_follows_the_worst_check() {
    let m = mapping("{}");
    let with = |checks: Vec<Check>| {
        let mut e = entry("a", "10.0.0.5", 80);
        e.checks = checks;
        e.service.weights = Some(Weights {
            passing: 5,
            warning: 2,
        });
        let s = convert(&m, &[e]);
        (s.endpoints[0].health, s.endpoints[0].weight)
    };
    assert_eq!(with(vec![]), (Health::Healthy, 5), "no checks is passing");
    assert_eq!(
        with(vec![
            check("serfHealth", "passing"),
            check("service:a", "warning")
        ]),
        (Health::Healthy, 2),
        "warning is healthy by default, at the warning weight"
    );
    assert_eq!(
        with(vec![
            check("serfHealth", "critical"),
            check("service:a", "passing")
        ]),
        (Health::Unhealthy, 5),
        "a failing node check counts"
    );
    assert_eq!(
        with(vec![check("_service_maintenance:a", "critical")]),
        (Health::Unhealthy, 5),
        "maintenance is a critical check"
    );
    assert_eq!(with(vec![check("x", "bogus")]).0, Health::Unhealthy);
    let strict = mapping("warning: unhealthy");
    let mut e = entry("a", "10.0.0.5", 80);
    e.checks = vec![check("service:a", "warning")];
    assert_eq!(
        convert(&strict, &[e]).endpoints[0].health,
        Health::Unhealthy
    );
}

#[test]
fn kinds_are_skipped_unless_included() {
    let m = mapping("{}");
    let mut proxy = entry("web-sidecar-proxy", "10.0.0.9", 21000);
    proxy.service.kind = "connect-proxy".into();
    assert_eq!(
        m.convert(&host("web"), std::slice::from_ref(&proxy), None)
            .state,
        None,
        "a service of sidecar proxies only is not served"
    );
    let s = convert(&m, &[proxy.clone(), entry("a", "10.0.0.5", 80)]);
    assert_eq!(s.endpoints.len(), 1);
    let m = mapping("include_kinds: [connect-proxy]");
    assert_eq!(convert(&m, &[proxy]).endpoints.len(), 1);
}

// REG-7: a service whose instances all left keeps its definition with no endpoints.
#[test]
fn no_instances_left_is_an_empty_service_not_a_stale_one() {
    let m = mapping("{}");
    let before = convert(&m, &[entry("a", "10.0.0.5", 80)]);
    let after = m.convert(&host("web"), &[], Some(&before)).state.unwrap();
    assert_eq!(after.service, before.service);
    assert!(after.endpoints.is_empty());
    assert_eq!(m.convert(&host("web"), &[], None).state, None);
}

#[test]
fn problems_are_noted_not_fatal() {
    let m = mapping("default_protocol: HTTP");
    let mut a = entry("a", "10.0.0.5", 80);
    a.service.meta.insert("protocol".into(), "thrift".into());
    let mut b = entry("b", "10.0.0.6", 0);
    b.service.meta.insert("external".into(), "true".into());
    let c = m.convert(&host("web"), &[a, b], None);
    let s = c.state.unwrap();
    assert_eq!(
        s.service.ports[0].protocol,
        Protocol::Http,
        "unknown → default"
    );
    assert_eq!(s.endpoints.len(), 1, "port 0 is left out");
    assert_eq!(s.service.location, MeshLocation::MeshInternal);
    assert_eq!(c.notes.len(), 2, "{:?}", c.notes);
    assert!(c.notes[0].contains("port 0"), "{:?}", c.notes);
    assert!(c.notes[1].contains("thrift"), "{:?}", c.notes);
}

#[test]
fn external_meta_and_disagreeing_protocols() {
    let m = mapping("{}");
    let mut a = entry("a", "10.0.0.5", 80);
    a.service.meta.insert("protocol".into(), "grpc".into());
    a.service.meta.insert("external".into(), "yes".into());
    let mut b = entry("b", "10.0.0.6", 80);
    b.service.meta.insert("protocol".into(), "http".into());
    let c = m.convert(&host("web"), &[b, a], None);
    let s = c.state.unwrap();
    assert_eq!(s.service.location, MeshLocation::MeshExternal);
    assert_eq!(
        s.service.ports[0].protocol,
        Protocol::Grpc,
        "first instance by id"
    );
    assert_eq!(s.service.ports[0].name, "grpc");
    assert!(
        c.notes.iter().any(|n| n.contains("disagree")),
        "{:?}",
        c.notes
    );
}

#[test]
fn tag_parsing() {
    let l = labels(&[
        "a=1".into(),
        "b|2|3".into(),
        "=x".into(),
        "c=".into(),
        "plain".into(),
        "plain".into(),
    ]);
    assert_eq!(l["a"], "1");
    assert_eq!(l["b"], "2|3", "split at the first separator");
    assert_eq!(l["c"], "");
    assert_eq!(l[TAGS_LABEL], "=x,plain");
    let l = labels(&["tags=explicit".into(), "other".into()]);
    assert_eq!(l[TAGS_LABEL], "explicit", "an explicit tags= tag wins");
    assert!(labels(&[]).is_empty());
}
