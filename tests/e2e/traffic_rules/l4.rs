//! `tcp` routes, a VirtualService for a name no registry knows, and a rule edited on disk, through
//! a real Envoy (docs/traffic-rules.md).

use super::envoy_harness::{loopback, no_rejections};
use super::scenario::{HOST, Mesh, TCP_HOST, destination_rule, rule_doc, settle_at, tally_at};

/// Connections per settled answer: enough that a 100/0 split cannot pass by chance.
const SETTLE: usize = 20;

/// A DestinationRule with subsets v1/v2 for the TCP service, and a VirtualService sending `w1` %
/// of its connections to v1 and the rest to v2.
pub fn tcp_rules(w1: u32) -> Vec<String> {
    let w2 = 100 - w1;
    vec![
        rule_doc(
            "DestinationRule",
            "db",
            &format!(
                "  host: {TCP_HOST}
  trafficPolicy: {{connectionPool: {{tcp: {{idleTimeout: 30s}}}}}}
  subsets:
  - {{name: v1, labels: {{version: v1}}}}
  - {{name: v2, labels: {{version: v2}}}}
"
            ),
        ),
        rule_doc(
            "VirtualService",
            "db",
            &format!(
                "  hosts: [{TCP_HOST}]
  tcp:
  - route:
    - {{destination: {{host: {TCP_HOST}, subset: v1}}, weight: {w1}}}
    - {{destination: {{host: {TCP_HOST}, subset: v2}}, weight: {w2}}}
"
            ),
        ),
    ]
}

/// A VirtualService for `api.partner.test`, a name no registry knows, sending it to v2.
pub fn external_name() -> String {
    rule_doc(
        "VirtualService",
        "partner",
        &format!(
            "  hosts: [api.partner.test]
  http:
  - route:
    - destination: {{host: {HOST}, subset: v2}}
"
        ),
    )
}

/// Every connection to the TCP port goes where the weights say: 100/0 → v1, and after the rule
/// file is edited on disk (no restart), 0/100 → v2.
pub async fn tcp_split_moves_when_the_file_changes(mesh: &Mesh) {
    let tcp = loopback(mesh.tcp_port);
    // The TCP proxy carries the HTTP request as bytes; the Host header is not looked at.
    settle_at(tcp, "any", &[], "v1", SETTLE).await;
    let mut rules = vec![destination_rule("")];
    rules.extend(tcp_rules(0));
    mesh.set_rules(&rules);
    settle_at(tcp, "any", &[], "v2", SETTLE).await;
    let t = tally_at(tcp, "any", 100, &[]).await;
    assert_eq!(t.get("v2"), Some(&100), "0/100 → v2 only: {t:?}");
    no_rejections(&mesh.envoy).await;
}

/// `Host: api.partner.test` reaches the mesh service its VirtualService names; the service's own
/// name still routes as before.
pub async fn an_external_name_reaches_the_mesh_service(mesh: &Mesh) {
    settle_at(mesh.listener(), "api.partner.test", &[], "v2", SETTLE).await;
    let own = tally_at(mesh.listener(), HOST, 100, &[]).await;
    assert_eq!(own.values().sum::<usize>(), 100);
    assert!(!own.contains_key("status:404"), "{own:?}");
    no_rejections(&mesh.envoy).await;
}
