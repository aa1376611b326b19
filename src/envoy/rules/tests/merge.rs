//! Several DestinationRules of one host, merged as istiod merges them.

use super::*;

fn dated(name: &str, created: &str, yaml: &str) -> Arc<Rule<DestinationRule>> {
    let mut m = meta(name);
    m.creation_timestamp = Some(created.to_string());
    Arc::new(Rule {
        meta: m,
        spec: serde_yaml::from_str(yaml).expect("destination rule"),
    })
}

fn merged_rule(drs: Vec<Arc<Rule<DestinationRule>>>) -> Rule<DestinationRule> {
    let index = RuleIndex::new(&RuleSet {
        destination_rules: drs,
        virtual_services: vec![],
    });
    let host = Hostname::new("reviews.default.svc.cluster.local").unwrap();
    (**index.destination_rule(&host).expect("a rule")).clone()
}

const NEWER: &str = r#"
host: reviews.default.svc.cluster.local
trafficPolicy: {loadBalancer: {simple: RANDOM}}
subsets:
- {name: v1, labels: {version: other}}
- {name: v2, labels: {version: v2}}
"#;

#[test]
fn subsets_are_appended_oldest_first_and_the_oldest_policy_wins() {
    let older = dated(
        "older",
        "2024-01-01T00:00:00Z",
        "host: reviews\ntrafficPolicy: {loadBalancer: {simple: LEAST_REQUEST}}\n\
         subsets: [{name: v1, labels: {version: v1}}]\n",
    );
    let newer = dated("a-newer", "2024-06-01T00:00:00Z", NEWER);
    // Given in either order, the creation time decides.
    for drs in [
        vec![Arc::clone(&older), Arc::clone(&newer)],
        vec![Arc::clone(&newer), Arc::clone(&older)],
    ] {
        let rule = merged_rule(drs);
        assert_eq!(
            rule.meta.name, "older",
            "the merged rule keeps the oldest's identity"
        );
        let subsets: Vec<(&str, &str)> = rule
            .spec
            .subsets
            .iter()
            .map(|s| (s.name.as_str(), s.labels["version"].as_str()))
            .collect();
        assert_eq!(
            subsets,
            [("v1", "v1"), ("v2", "v2")],
            "v1 of the older rule kept"
        );
        let lb = rule.spec.traffic_policy.and_then(|p| p.load_balancer);
        assert_eq!(
            lb.and_then(|l| l.simple)
                .map(|s| format!("{s:?}"))
                .as_deref(),
            Some("LeastRequest")
        );
    }
}

#[test]
fn a_newer_policy_applies_when_the_older_rule_has_none() {
    let older = dated(
        "older",
        "2024-01-01T00:00:00Z",
        "host: reviews\nsubsets: [{name: v1, labels: {version: v1}}]\n",
    );
    let rule = merged_rule(vec![older, dated("newer", "2024-06-01T00:00:00Z", NEWER)]);
    let lb = rule
        .spec
        .traffic_policy
        .clone()
        .and_then(|p| p.load_balancer);
    assert_eq!(
        lb.and_then(|l| l.simple)
            .map(|s| format!("{s:?}"))
            .as_deref(),
        Some("Random")
    );
    // Both rules' subsets become clusters.
    let names: Vec<String> = clusters(&reviews(), &Arc::new(rule)).into_keys().collect();
    assert!(names.contains(&"outbound|9080|v1|reviews.default.svc.cluster.local".to_string()));
    assert!(names.contains(&"outbound|9080|v2|reviews.default.svc.cluster.local".to_string()));
}
