use super::*;
use crate::serviceentry::fixtures::{service_entry, workload_entry};
use crate::serviceentry::tests::{ctx, entry};

fn h(s: &str) -> Hostname {
    Hostname::new(s).unwrap()
}

fn with_time(yaml: String, t: &str) -> String {
    yaml.replacen(
        "  namespace:",
        &format!("  creationTimestamp: '{t}'\n  namespace:"),
        1,
    )
}

fn addresses(c: &Catalog, host: &str) -> Vec<String> {
    c.services[&h(host)]
        .endpoints
        .iter()
        .map(|e| format!("{}:{:?}", e.address, e.ports.values().collect::<Vec<_>>()))
        .collect()
}

const STATIC: &str = "hosts: [api.example.com]\nports: [{number: 80, name: http, protocol: HTTP}]\nresolution: STATIC";

/// The 2024 `shop/old` entry for api.example.com with one endpoint, 10.0.0.1.
fn old_shop_entry() -> String {
    with_time(
        service_entry(
            "old",
            "shop",
            &format!("{STATIC}\nendpoints: [{{address: 10.0.0.1}}]"),
        ),
        "2024-01-01T00:00:00Z",
    )
}

#[test]
fn workload_entries_in_the_same_namespace_are_selected() {
    let se = service_entry(
        "api",
        "shop",
        "hosts: [api.example.com]\nports: [{number: 80, name: http, protocol: HTTP}]\nlocation: MESH_INTERNAL\nresolution: STATIC\nworkloadSelector: {labels: {app: api}}",
    );
    let entries = [
        entry(&se, "a.yaml"),
        entry(
            &workload_entry("vm-1", "shop", &[("app", "api")], "address: 10.0.0.1"),
            "a.yaml",
        ),
        entry(
            &workload_entry(
                "vm-2",
                "shop",
                &[("app", "api")],
                "address: 10.0.0.2\nports: {http: 8080}",
            ),
            "a.yaml",
        ),
        entry(
            &workload_entry("vm-3", "other", &[("app", "api")], "address: 10.0.0.3"),
            "a.yaml",
        ),
        entry(
            &workload_entry("vm-4", "shop", &[("app", "web")], "address: 10.0.0.4"),
            "a.yaml",
        ),
    ];
    let mut pods = Pods::new();
    let mut pod = entries[1].valid.as_deref().map(|v| match v {
        Valid::WorkloadEntry(we) => we.workload.clone(),
        _ => unreachable!(),
    });
    if let Some(p) = pod.as_mut() {
        p.address = "10.1.0.9".into();
    }
    pods.insert(("shop".into(), "api-7d9".into()), pod.unwrap());
    let c = build(&entries, &pods, &ctx());
    assert!(c.rejections.is_empty(), "{:?}", c.rejections);
    assert_eq!(
        addresses(&c, "api.example.com"),
        ["10.0.0.1:[]", "10.0.0.2:[8080]", "10.1.0.9:[]"],
        "same namespace, matching labels, WorkloadEntries and Pods"
    );
}

#[test]
fn the_oldest_entry_defines_a_shared_host_and_same_namespace_endpoints_join() {
    // REG-10: the result does not depend on the order objects arrive in.
    let old = old_shop_entry();
    let new = with_time(
        service_entry(
            "new",
            "shop",
            "hosts: [api.example.com]\nports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]\nresolution: STATIC\nendpoints: [{address: 10.0.0.2}]",
        ),
        "2025-01-01T00:00:00Z",
    );
    for order in [[&old, &new], [&new, &old]] {
        let entries: Vec<Entry> = order.iter().map(|y| entry(y, "a.yaml")).collect();
        let c = build(&entries, &Pods::new(), &ctx());
        let svc = &c.services[&h("api.example.com")];
        assert_eq!(
            svc.service.ports[0].target_port, None,
            "the older entry's ports"
        );
        assert_eq!(
            addresses(&c, "api.example.com"),
            ["10.0.0.1:[]", "10.0.0.2:[8080]"]
        );
        assert!(c.rejections.is_empty(), "{:?}", c.rejections);
    }
}

#[test]
fn another_namespace_or_another_shape_is_reported_not_served() {
    let old = old_shop_entry();
    let elsewhere = with_time(
        service_entry(
            "same-host",
            "payments",
            &format!("{STATIC}\nendpoints: [{{address: 10.0.0.9}}]"),
        ),
        "2025-01-01T00:00:00Z",
    );
    let dns = service_entry(
        "dns",
        "shop",
        "hosts: [api.example.com, other.example.com]\nports: [{number: 80, name: http, protocol: HTTP}]\nresolution: DNS",
    )
    .replace("  namespace:", "  creationTimestamp: '2025-06-01T00:00:00Z'\n  namespace:");
    let entries = [
        entry(&old, "a.yaml"),
        entry(&elsewhere, "b.yaml"),
        entry(&dns, "c.yaml"),
    ];
    let c = build(&entries, &Pods::new(), &ctx());
    assert_eq!(addresses(&c, "api.example.com"), ["10.0.0.1:[]"]);
    assert!(
        c.services.contains_key(&h("other.example.com")),
        "its other host is served"
    );
    let objects: Vec<(&str, &str)> = c
        .rejections
        .iter()
        .map(|r| (r.object.as_str(), r.field.as_str()))
        .collect();
    assert_eq!(
        objects,
        [
            ("ServiceEntry payments/same-host", "spec.hosts[0]"),
            ("ServiceEntry shop/dns", "spec.hosts[0]"),
        ]
    );
    assert!(
        c.rejections[0].message.contains("ServiceEntry shop/old"),
        "{:?}",
        c.rejections[0]
    );
    assert_eq!(c.rejections[1].source, "c.yaml:1");
}

#[test]
fn an_object_defined_twice_is_served_from_the_first_place() {
    let a = service_entry(
        "api",
        "shop",
        &format!("{STATIC}\nendpoints: [{{address: 10.0.0.1}}]"),
    );
    let b = service_entry(
        "api",
        "shop",
        &format!("{STATIC}\nendpoints: [{{address: 10.0.0.2}}]"),
    );
    let c = build(
        &[entry(&a, "a.yaml"), entry(&b, "b.yaml")],
        &Pods::new(),
        &ctx(),
    );
    assert_eq!(addresses(&c, "api.example.com"), ["10.0.0.1:[]"]);
    assert_eq!(c.rejections.len(), 1);
    assert_eq!(c.rejections[0].source, "b.yaml:1");
    assert!(
        c.rejections[0].message.contains("a.yaml:1"),
        "{:?}",
        c.rejections
    );
}

#[test]
fn an_entry_exported_to_no_one_defines_no_outbound_service() {
    let hidden = service_entry("api", "shop", &format!("{STATIC}\nexportTo: ['~']"));
    let c = build(&[entry(&hidden, "a.yaml")], &Pods::new(), &ctx());
    assert!(c.services.is_empty() && c.rejections.is_empty());
}

#[test]
fn round_robin_entries_keep_one_endpoint() {
    let rr = |name: &str, addr: &str, t: &str| {
        with_time(
            service_entry(
                name,
                "shop",
                &format!(
                    "hosts: [api.example.com]\nports: [{{number: 80, name: http, protocol: HTTP}}]\nresolution: DNS_ROUND_ROBIN\nendpoints: [{{address: {addr}}}]"
                ),
            ),
            t,
        )
    };
    let entries = [
        entry(&rr("b", "b.example.com", "2025-01-01T00:00:00Z"), "x.yaml"),
        entry(&rr("a", "a.example.com", "2024-01-01T00:00:00Z"), "x.yaml"),
    ];
    let c = build(&entries, &Pods::new(), &ctx());
    assert_eq!(addresses(&c, "api.example.com"), ["a.example.com:[]"]);
    assert_eq!(c.rejections.len(), 1, "{:?}", c.rejections);
}
