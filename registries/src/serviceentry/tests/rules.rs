//! Traffic rules through the config store's readers: DestinationRules and VirtualServices from a
//! directory and from CRDs reach the [`ConfigStore`] with where they came from; an invalid one is
//! reported and keeps its last valid version; other kinds are ignored without a report.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::crd::Cluster;
use super::*;
use crate::config_store::ConfigStore;
use crate::rules::RuleSet;

const RESCAN: Duration = Duration::from_millis(100);

const DR: &str = "apiVersion: networking.istio.io/v1beta1
kind: DestinationRule
metadata: {name: reviews, namespace: shop}
spec:
  host: reviews
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
";

const VS: &str = "apiVersion: networking.istio.io/v1alpha3
kind: VirtualService
metadata: {name: reviews, namespace: shop}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews, subset: v1}
      weight: 90
    - destination: {host: reviews, subset: v2}
      weight: 10
";

const OTHER_KINDS: &str = "apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: gw}
spec: {}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
";

const SE: &str = "apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: api, namespace: shop}
spec:
  hosts: [api.example.com]
  ports: [{number: 80, name: http, protocol: HTTP}]
  resolution: STATIC
  endpoints: [{address: 10.0.0.1}]
";

fn start(config: ServiceEntryConfig) -> (Run, watch::Receiver<Arc<RuleSet>>) {
    let (store, rx) = ConfigStore::new();
    let publisher = store.publisher(RegistryId::new(&config.name));
    let run = Run::start_registry(ServiceEntryRegistry::new(config).with_rules(publisher));
    (run, rx)
}

fn dir_config(dir: &Path) -> ServiceEntryConfig {
    ServiceEntryConfig {
        name: "fs:///istio".into(),
        directory: Some(dir.to_path_buf()),
        rescan_interval: RESCAN,
        ..ServiceEntryConfig::default()
    }
}

async fn rules_until(
    rx: &mut watch::Receiver<Arc<RuleSet>>,
    what: &str,
    done: impl Fn(&RuleSet) -> bool,
) -> Arc<RuleSet> {
    let found = match tokio::time::timeout(LIMIT, rx.wait_for(|r| done(r))).await {
        Ok(Ok(r)) => Some(r.clone()),
        _ => None,
    };
    found.unwrap_or_else(|| {
        panic!(
            "timed out waiting for rules: {what}; now {:?}",
            *rx.borrow()
        )
    })
}

#[tokio::test]
async fn rules_from_a_directory_reach_the_store_beside_the_services() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("a.yaml"), format!("{SE}---\n{DR}---\n{OTHER_KINDS}")).unwrap();
    std::fs::write(d.join("b.yaml"), VS).unwrap();
    let (mut run, mut rx) = start(dir_config(d));
    run.wait("synced", |r| r.synced && r.get("api.example.com").is_some())
        .await;
    let rules = rules_until(&mut rx, "one of each", |r| {
        r.destination_rules.len() == 1 && r.virtual_services.len() == 1
    })
    .await;
    let dr = &rules.destination_rules[0];
    assert_eq!(
        (dr.meta.namespace.as_str(), dr.meta.name.as_str()),
        ("shop", "reviews")
    );
    assert_eq!(dr.meta.source, format!("{}:10", d.join("a.yaml").display()));
    assert_eq!(dr.spec.subsets.len(), 2);
    assert_eq!(
        rules.virtual_services[0].meta.source,
        format!("{}:1", d.join("b.yaml").display())
    );
    // Other kinds are ignored without a report (v1, v1beta1 and v1alpha3 are all read).
    assert!(run.rejected.is_empty(), "{:?}", run.rejected);

    // REG-11: a VirtualService that becomes invalid is reported with its field and line and
    // keeps its last valid version; the rest is still served.
    std::fs::write(
        d.join("b.yaml"),
        VS.replace("hosts: [reviews]", "hosts: []"),
    )
    .unwrap();
    run.wait("the VS rejected", |r| !r.rejected.is_empty())
        .await;
    let r = run.rejections_of("VirtualService shop/reviews");
    assert_eq!(r.len(), 1, "{:?}", run.rejected);
    assert_eq!(r[0].field, "spec.hosts");
    assert_eq!(r[0].source, format!("{}:5", d.join("b.yaml").display()));
    assert!(
        r[0].message.contains("at least one host"),
        "{}",
        r[0].message
    );
    assert!(r[0].serving_previous);
    assert_eq!(
        rx.borrow().virtual_services.len(),
        1,
        "last valid version kept"
    );
    assert_eq!(rx.borrow().virtual_services[0].spec.hosts, ["reviews"]);

    // Deleting the file takes the rule away.
    std::fs::remove_file(d.join("b.yaml")).unwrap();
    rules_until(&mut rx, "VS gone", |r| r.virtual_services.is_empty()).await;
    assert_eq!(rx.borrow().destination_rules.len(), 1);
}

#[tokio::test]
async fn a_rule_that_was_never_valid_is_reported_and_not_served() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let bad = DR.replace("host: reviews", "host: \"\"");
    std::fs::write(d.join("a.yaml"), format!("{bad}---\n{VS}")).unwrap();
    let (mut run, mut rx) = start(dir_config(d));
    run.wait("synced with a rejection", |r| {
        r.synced && !r.rejected.is_empty()
    })
    .await;
    let r = run.rejections_of("DestinationRule shop/reviews");
    assert!(!r.is_empty(), "{:?}", run.rejected);
    assert!(r.iter().all(|r| !r.serving_previous));
    let rules = rules_until(&mut rx, "the VS", |r| r.virtual_services.len() == 1).await;
    assert!(rules.destination_rules.is_empty());
}

#[tokio::test]
async fn rules_from_crds_reach_the_store_with_their_api() {
    let c = Cluster::start("v1").await;
    c.apply(DR);
    c.apply(VS);
    let (mut run, mut rx) = start(c.config());
    run.wait("synced", |r| r.synced).await;
    let rules = rules_until(&mut rx, "one of each", |r| {
        r.destination_rules.len() == 1 && r.virtual_services.len() == 1
    })
    .await;
    assert_eq!(
        rules.destination_rules[0].meta.source,
        "networking.istio.io/v1 in cluster c1"
    );
    // A change through the API reaches the store.
    c.apply(
        &VS.replace("weight: 90", "weight: 50")
            .replace("weight: 10", "weight: 50"),
    );
    rules_until(&mut rx, "the new weights", |r| {
        r.virtual_services
            .first()
            .is_some_and(|v| v.spec.http[0].route[0].weight == Some(50))
    })
    .await;
    assert!(run.rejected.is_empty(), "{:?}", run.rejected);
}
