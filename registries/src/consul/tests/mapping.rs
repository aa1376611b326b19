//! REG-7 and the mapping, through the wire: health, instance removal, kinds, tags, meta, weights,
//! locality, ACL token and datacenter.

use std::time::Duration;

use super::*;
use crate::consul::TAGS_LABEL;
use crate::consul::fake::CheckStatus;
use crate::model::{Health, Protocol};

// REG-7: all instances stop passing → an upsert with every endpoint UNHEALTHY (so EDS has no
// healthy endpoint); nothing stale lingers; back to passing → healthy again.
#[tokio::test]
async fn reg7_all_instances_failing_leaves_no_healthy_endpoint() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 2, 1);
    let mut r = Running::synced(config(&fake)).await;
    fake.set_service_check("web-1", CheckStatus::Critical);
    fake.set_service_check("web-2", CheckStatus::Critical);
    r.wait_for("both unhealthy", |r| {
        let e = r.endpoints("web");
        e.len() == 2 && e.iter().all(|(_, healthy)| !healthy)
    })
    .await;
    fake.set_service_check("web-1", CheckStatus::Passing);
    fake.set_service_check("web-2", CheckStatus::Passing);
    r.wait_for("healthy again", |r| r.endpoints("web").iter().all(|e| e.1))
        .await;
    // A node check failing takes down every instance on the node.
    fake.set_node_health("fake-agent", CheckStatus::Critical);
    r.wait_for("node failure", |r| r.endpoints("web").iter().all(|e| !e.1))
        .await;
}

// Removal: an instance deregistered or in maintenance leaves; the last instance gone leaves an
// empty service, then the service is deleted.
#[tokio::test]
async fn deregistration_maintenance_and_service_removal() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 2, 1);
    let mut r = Running::synced(config(&fake)).await;
    fake.deregister("web-2");
    r.wait_for("one endpoint", |r| r.endpoints("web").len() == 1)
        .await;
    fake.set_maintenance("web-1", true);
    r.wait_for("maintenance is unhealthy", |r| {
        r.endpoints("web") == [("10.0.1.1".to_string(), false)]
    })
    .await;
    fake.deregister("web-1");
    r.wait_for("web deleted", |r| !r.view.contains_key(&host("web")))
        .await;
}

// Skipped by default: Consul's own service and non-typical kinds; include_kinds opts in.
#[tokio::test]
async fn consul_itself_and_sidecars_are_skipped() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 1, 1);
    fake.register(
        Instance::new(
            "web-sidecar-proxy",
            "web-1-sidecar-proxy",
            "10.0.1.1",
            21000,
        )
        .kind("connect-proxy"),
    );
    fake.register(Instance::new("gw", "gw-1", "10.0.5.1", 8443).kind("terminating-gateway"));
    let r = Running::synced(config(&fake)).await;
    let hosts: Vec<&str> = r.view.keys().map(Hostname::as_str).collect();
    assert_eq!(hosts, ["web.service.consul"]);
    let mut c = config(&fake);
    c.include_kinds = vec!["terminating-gateway".into()];
    c.skip_services = vec![];
    let r = Running::synced(c).await;
    let hosts: Vec<&str> = r.view.keys().map(Hostname::as_str).collect();
    assert_eq!(
        hosts,
        [
            "consul.service.consul",
            "gw.service.consul",
            "web.service.consul"
        ]
    );
}

#[tokio::test]
async fn tags_meta_weights_and_locality_arrive() {
    let fake = FakeConsul::start().await;
    fake.set_node("vm-7", "192.168.7.7", &[("zone", "rack-3")]);
    fake.register(
        Instance::new("billing", "billing-1", "", 9000)
            .on_node("vm-7")
            .tag("version=v2")
            .tag("primary")
            .meta("protocol", "http")
            .weights(7, 2),
    );
    let mut c = config(&fake);
    c.datacenter = Some("dc1".into());
    c.hostname_template = "{service}.{dc}.consul".into();
    let r = Running::synced(c).await;
    let s = &r.view[&Hostname::new("billing.dc1.consul").unwrap()];
    assert_eq!(s.service.ports[0].protocol, Protocol::Http);
    assert_eq!(s.service.ports[0].port, 9000);
    assert_eq!(s.service.origin.cluster.as_str(), "dc1");
    let e = &s.endpoints[0];
    assert_eq!(e.address, "192.168.7.7", "node address fallback");
    assert_eq!(e.ports["http"], 9000);
    assert_eq!(e.labels["version"], "v2");
    assert_eq!(e.labels[TAGS_LABEL], "primary");
    assert_eq!(e.locality.to_string(), "dc1/rack-3/");
    assert_eq!((e.weight, e.health), (7, Health::Healthy));
    // A warning check: healthy at the warning weight (default policy).
    fake.set_service_check("billing-1", CheckStatus::Warning);
    let mut r = r;
    r.wait_for("warning weight", |r| {
        r.view[&Hostname::new("billing.dc1.consul").unwrap()].endpoints[0].weight == 2
    })
    .await;
}

#[tokio::test]
async fn token_and_datacenter_are_sent_and_enterprise_parameters_are_not() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 1, 1);
    fake.require_token(Some("s3cr3t"));
    let mut c = config(&fake);
    c.token = Some("s3cr3t".into());
    c.datacenter = Some("dc1".into());
    let r = Running::synced(c).await;
    assert_eq!(r.endpoints("web").len(), 1);
    let reqs = fake.requests();
    assert!(reqs.len() >= 3, "{reqs:?}");
    for q in &reqs {
        assert_eq!(q.token.as_deref(), Some("s3cr3t"), "{q:?}");
        assert_eq!(q.query.get("dc").map(String::as_str), Some("dc1"), "{q:?}");
        assert!(
            !q.query.contains_key("ns") && !q.query.contains_key("partition"),
            "{q:?}"
        );
        assert!(!q.query.contains_key("stale"), "{q:?}");
    }
    let blocking = reqs
        .iter()
        .find(|q| q.query.contains_key("index"))
        .expect("a blocking query");
    assert_eq!(blocking.query["wait"], "2000ms");
}

// A service whose name makes no hostname is skipped (logged); the others are served.
#[tokio::test]
async fn unusable_service_names_are_skipped() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 1, 1);
    fake.register(Instance::new("bad name!", "b-1", "10.0.3.1", 80));
    let mut r = Running::synced(config(&fake)).await;
    r.settle(Duration::from_millis(300)).await;
    let hosts: Vec<&str> = r.view.keys().map(Hostname::as_str).collect();
    assert_eq!(hosts, ["web.service.consul"]);
}
