use std::sync::Arc;

use super::*;
use crate::rules::{DestinationRule, Rule, RuleMeta, VirtualService};

fn dr(name: &str, host: &str, source: &str) -> Arc<Rule<DestinationRule>> {
    Arc::new(Rule {
        meta: RuleMeta {
            namespace: "default".into(),
            name: name.into(),
            source: source.into(),
            ..RuleMeta::default()
        },
        spec: DestinationRule {
            host: host.into(),
            ..DestinationRule::default()
        },
    })
}

fn vs(name: &str) -> Arc<Rule<VirtualService>> {
    Arc::new(Rule {
        meta: RuleMeta {
            namespace: "default".into(),
            name: name.into(),
            ..RuleMeta::default()
        },
        spec: VirtualService::default(),
    })
}

fn set(drs: Vec<Arc<Rule<DestinationRule>>>, vss: Vec<Arc<Rule<VirtualService>>>) -> RuleSet {
    RuleSet {
        destination_rules: drs,
        virtual_services: vss,
    }
}

/// The hosts of the destination rules served, in order.
fn dr_hosts(rules: &RuleSet) -> Vec<&str> {
    rules
        .destination_rules
        .iter()
        .map(|d| d.spec.host.as_str())
        .collect()
}

#[test]
fn sources_merge_in_config_order_and_the_first_definition_wins() {
    let (store, mut rx) = ConfigStore::new();
    store.set_order(vec![RegistryId::new("fs:///a"), RegistryId::new("k8s://")]);
    let a = store.publisher(RegistryId::new("fs:///a"));
    let k = store.publisher(RegistryId::new("k8s://"));
    k.publish(set(
        vec![
            dr("reviews", "k8s.example", "api"),
            dr("ratings", "r", "api"),
        ],
        vec![vs("x")],
    ));
    assert!(rx.has_changed().unwrap());
    a.publish(set(vec![dr("reviews", "file.example", "a.yaml:1")], vec![]));
    let now = rx.borrow_and_update().clone();
    let hosts = dr_hosts(&now);
    assert_eq!(
        hosts,
        ["file.example", "r"],
        "the first listed source defines reviews"
    );
    assert_eq!(now.virtual_services.len(), 1);

    // Publishing the same again wakes nobody.
    a.publish(set(vec![dr("reviews", "file.example", "a.yaml:1")], vec![]));
    assert!(!rx.has_changed().unwrap());

    // A removed source takes its rules with it; the other copy is served again.
    store.remove(&RegistryId::new("fs:///a"));
    let now = rx.borrow_and_update().clone();
    let hosts = dr_hosts(&now);
    assert_eq!(hosts, ["k8s.example", "r"]);
    assert_eq!(store.current(), now);
}

#[test]
fn an_empty_source_publishes_nothing_new() {
    let (store, mut rx) = ConfigStore::new();
    store
        .publisher(RegistryId::new("se"))
        .publish(RuleSet::default());
    assert!(!rx.has_changed().unwrap());
    assert!(rx.borrow_and_update().is_empty());
}
