//! VHDS on a delta ADS stream, in process (DELTA-22): a node that opts in gets route
//! configurations without virtual hosts and each virtual host as a `VirtualHost` resource; a
//! service add or delete sends one virtual host, never the route configuration; a route
//! configuration the client subscribes to later is followed by its virtual hosts again.

use envoy_types::pb::envoy::config::route::v3::RouteConfiguration;
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use prost::Message;
use tributary::envoy::ResourceType;
use tributary::envoy::fixtures::http_route as route;
use tributary::xds::VHDS_KEY;

use crate::support::delta::DeltaClient;
use crate::support::{RDS, TestServer};

const VHDS: ResourceType = ResourceType::VirtualHost;

async fn vhds_client(s: &TestServer, opt_in: bool) -> DeltaClient {
    let mut c = s.delta_ads("vhds").await;
    let mut md = Struct::default();
    md.fields.insert(
        VHDS_KEY.into(),
        Value {
            kind: Some(Kind::BoolValue(opt_in)),
        },
    );
    c.node.metadata = Some(md);
    c
}

// DELTA-22
#[tokio::test]
async fn a_vhds_client_gets_one_virtual_host_per_change_and_never_the_route_configuration() {
    let s = TestServer::start(vec![route(80, &["a.x", "b.x"])]).await;
    let mut c = vhds_client(&s, true).await;
    c.subscribe(RDS, &["80"]).await;
    let r = c.expect(RDS, &["80"], &[]).await;
    let rc = RouteConfiguration::decode(&*r.resources[0].resource.as_ref().unwrap().value).unwrap();
    assert!(rc.virtual_hosts.is_empty(), "{rc:?}");
    assert!(rc.vhds.is_some(), "{rc:?}");
    c.ack(&r).await;
    // Envoy's first VirtualHost request names nothing: a wildcard.
    c.subscribe(VHDS, &[]).await;
    let r = c.expect(VHDS, &["80/a.x:80", "80/b.x:80"], &[]).await;
    c.ack(&r).await;
    c.expect_no_response().await;

    // A service added: its virtual host only.
    s.publish(vec![route(80, &["a.x", "b.x", "c.x"])], vec![]);
    let r = c.expect(VHDS, &["80/c.x:80"], &[]).await;
    c.ack(&r).await;
    c.expect_no_response().await;

    // A service deleted: one removal only.
    s.publish(vec![route(80, &["a.x", "c.x"])], vec![]);
    let r = c.expect(VHDS, &[], &["80/b.x:80"]).await;
    c.ack(&r).await;
    c.expect_no_response().await;

    // A new port: its virtual host reaches the wildcard at once (Envoy ignores it, it has no such
    // route configuration yet), then again right after the route configuration, which Envoy needs
    // to finish warming the listener.
    s.publish(vec![route(8080, &["d.x"])], vec![]);
    let r = c.expect(VHDS, &["8080/d.x:8080"], &[]).await;
    c.ack(&r).await;
    c.request(RDS, &["8080"], &[], "").await;
    let r = c.expect(RDS, &["8080"], &[]).await;
    c.ack(&r).await;
    let r = c.expect(VHDS, &["8080/d.x:8080"], &[]).await;
    c.ack(&r).await;
    c.expect_no_response().await;
}

// DELTA-21, DELTA-22: without the opt-in, a delta client keeps inline virtual hosts and sees no
// virtual host resources.
#[tokio::test]
async fn without_the_opt_in_route_configurations_keep_their_virtual_hosts() {
    let inline = route(80, &["a.x"]);
    let s = TestServer::start(vec![inline.clone()]).await;
    let mut c = vhds_client(&s, false).await;
    c.subscribe(RDS, &["80"]).await;
    let r = c.expect(RDS, &["80"], &[]).await;
    assert_eq!(r.resources[0].version, *inline.version);
    c.ack(&r).await;
    c.subscribe(VHDS, &[]).await;
    let r = c.expect(VHDS, &[], &[]).await;
    c.ack(&r).await;
    s.publish(vec![route(80, &["a.x", "b.x"])], vec![]);
    c.expect(RDS, &["80"], &[]).await;
}

// DELTA-22: route configurations are split for VHDS only from the first VHDS read on
// (`src/snapshot/vhds.rs`); a client that connects after several builds (a port gone, services
// added and deleted) gets exactly the current virtual hosts, and from then on each change as one.
#[tokio::test]
async fn a_vhds_client_arriving_after_many_builds_gets_the_current_virtual_hosts() {
    let s = TestServer::start(vec![route(80, &["a.x"]), route(8080, &["z.x"])]).await;
    s.publish(vec![route(80, &["a.x", "b.x", "c.x"])], vec![]);
    s.publish(vec![route(80, &["a.x", "c.x"])], vec![(RDS, "8080")]);
    let mut c = vhds_client(&s, true).await;
    c.subscribe(RDS, &["80", "8080"]).await;
    let routes = c.expect(RDS, &["80"], &["8080"]).await;
    c.ack(&routes).await;
    c.subscribe(VHDS, &[]).await;
    let hosts = c.expect(VHDS, &["80/a.x:80", "80/c.x:80"], &[]).await;
    c.ack(&hosts).await;
    s.publish(vec![route(80, &["c.x"])], vec![]);
    let removed = c.expect(VHDS, &[], &["80/a.x:80"]).await;
    c.ack(&removed).await;
    c.expect_no_response().await;
}
