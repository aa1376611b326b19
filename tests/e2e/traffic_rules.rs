//! Traffic rules end to end (issue 15's proof, H-ENVOY): DestinationRules and VirtualServices
//! from a config source (`fs://` directory, or `k8s://` CRDs of the fake API server) steer real
//! HTTP through a real Envoy, over SotW and delta xDS, to two real upstreams labelled
//! `version: v1` / `v2`. Envoy missing is a failure, never a skip.
//!
//! Counted proofs use enough requests that chance cannot fail them: a 90/10 split over 2,000
//! requests has a standard deviation of 0.67 %, well inside ±3 %; a 50 % abort over 1,000 has
//! 1.6 %, inside ±5 %.

mod l4;
mod mcp;
mod scenario;
mod upstream;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::support::harness as envoy_harness;
use envoy_harness::{eventually, no_rejections};
use scenario::{CONVERGE, HOST, Mesh, Mode, destination_rule, split, virtual_service};
use upstream::{Behaviour, get};

/// Requests of the split proof.
const SPLIT_REQUESTS: usize = 2_000;
/// Requests of the abort proof.
const ABORT_REQUESTS: usize = 1_000;
/// The continuous load of the shift proof: one request every 5 ms.
const LOAD_EVERY: Duration = Duration::from_millis(5);

fn share(t: &std::collections::BTreeMap<String, usize>, key: &str, n: usize) -> f64 {
    *t.get(key).unwrap_or(&0) as f64 * 100.0 / n as f64
}

/// 90/10 over 2,000 requests lands within ±3 %; `x-canary: true` goes to v2 only.
async fn split_and_header_match(mesh: &Mesh) {
    mesh.wait_for_weights((90, 10)).await;
    let t = mesh.tally(SPLIT_REQUESTS, &[]).await;
    let v1 = share(&t, "v1", SPLIT_REQUESTS);
    let v2 = share(&t, "v2", SPLIT_REQUESTS);
    println!("90/10 split over {SPLIT_REQUESTS} requests: v1 {v1:.2} %, v2 {v2:.2} %");
    assert!(
        (v1 - 90.0).abs() <= 3.0 && (v2 - 10.0).abs() <= 3.0,
        "{t:?}"
    );
    assert!((v1 + v2 - 100.0).abs() < f64::EPSILON, "only 200s: {t:?}");

    let header = format!(
        "  - match:
    - headers:
        x-canary: {{exact: \"true\"}}
    route:
    - destination: {{host: {HOST}, subset: v2}}
{}",
        split(100)
    );
    mesh.set_rules(&[destination_rule(""), virtual_service(&header)]);
    mesh.settle(&[("x-canary", "true")], "v2", 50).await;
    mesh.settle(&[], "v1", 50).await;
    let t = mesh.tally(200, &[("x-canary", "true")]).await;
    assert_eq!(t.get("v2"), Some(&200), "x-canary: true → v2 only: {t:?}");
    let t = mesh.tally(200, &[("x-canary", "false")]).await;
    assert_eq!(t.get("v1"), Some(&200), "other requests → v1: {t:?}");
    no_rejections(&mesh.envoy).await;
}

/// A request every 5 ms until stopped ([`LOAD_EVERY`]).
struct Load {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Option<(u16, String)>>>,
}

impl Load {
    fn start(mesh: &Mesh) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let listener = mesh.listener();
        let task = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(LOAD_EVERY);
                let mut inflight = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    tick.tick().await;
                    inflight.push(tokio::spawn(get(listener, HOST, &[])));
                }
                let mut answers = Vec::new();
                for r in inflight {
                    answers.push(r.await.ok().flatten());
                }
                answers
            })
        };
        Load { stop, task }
    }

    /// Stops the load and checks that every answer was a 200 and Envoy rejected nothing; returns
    /// the answers.
    async fn finish(self, mesh: &Mesh, what: &str) -> Vec<Option<(u16, String)>> {
        self.stop.store(true, Ordering::SeqCst);
        let answers = self.task.await.expect("load task");
        let bad: Vec<_> = answers
            .iter()
            .filter(|a| !matches!(a, Some((200, _))))
            .collect();
        println!(
            "{what}: {} requests under load, {} non-200",
            answers.len(),
            bad.len()
        );
        assert!(answers.len() > 200, "load ran: {}", answers.len());
        assert!(
            bad.is_empty(),
            "non-200 during {what}: {bad:?}\n{}",
            mesh.logs()
        );
        no_rejections(&mesh.envoy).await;
        answers
    }
}

/// 0 → 50 → 100 % to v2 while a request goes out every 5 ms: every answer is a 200 and Envoy
/// rejects nothing (make-before-break, SOTW-31/SOTW-32).
async fn canary_shift_under_load(mesh: &Mesh) {
    mesh.set_rules(&[destination_rule(""), virtual_service(&split(100))]);
    mesh.settle(&[], "v1", 30).await;
    let load = Load::start(mesh);
    for (w1, want) in [(50, (50, 50)), (0, (0, 100))] {
        tokio::time::sleep(Duration::from_millis(500)).await;
        mesh.set_rules(&[destination_rule(""), virtual_service(&split(w1))]);
        if w1 == 50 {
            mesh.wait_for_weights(want).await;
        } else {
            scenario_settle_v2(mesh).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let answers = load.finish(mesh, "canary shift").await;
    let v2 = answers
        .iter()
        .filter(|a| matches!(a, Some((200, b)) if b == "v2"))
        .count();
    assert!(v2 > 0, "the shift reached v2");
}

/// How many times the subsets and their route are added (and removed) in one change.
const SUBSET_ROUNDS: usize = 4;

/// Under a request every 5 ms, one change adds the DestinationRule's subsets AND the
/// VirtualService that routes to one of them; the next removes both. Every answer is a 200: the
/// route reaches Envoy only after the new subset clusters' endpoints (SOTW-31 for clusters added
/// in the same push), and the subset clusters go only after the route left them.
async fn subsets_and_their_route_in_one_change_under_load(mesh: &Mesh) {
    let both = || async {
        let t = mesh.tally(20, &[]).await;
        (t.contains_key("v1") && t.contains_key("v2")).then_some(())
    };
    eventually(CONVERGE, "the service's own cluster answers", both).await;
    let load = Load::start(mesh);
    for _ in 0..SUBSET_ROUNDS {
        tokio::time::sleep(Duration::from_millis(300)).await;
        mesh.set_rules(&[destination_rule(""), virtual_service(&split(0))]);
        scenario_settle_v2(mesh).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        mesh.set_rules(&[]);
        eventually(CONVERGE, "back on the service's own cluster", both).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    load.finish(mesh, "subsets and route in one change").await;
}

async fn scenario_settle_v2(mesh: &Mesh) {
    mesh.settle(&[], "v2", 30).await;
}

/// Retries turn a first-attempt failure into a 200; a 50 % abort answers 503 on 50 % ± 5 %; a
/// 200 ms timeout on a 1 s upstream answers 504.
async fn retries_fault_timeout(mesh: &Mesh) {
    let to_v1 = format!("    - destination: {{host: {HOST}, subset: v1}}\n");
    // v1 fails every other request with a 500, which istiod's default retry policy does not
    // retry: without `retries`, failures reach the client.
    mesh.v1.set(Behaviour {
        fail_every_other: true,
        fail_status: 500,
        ..Behaviour::default()
    });
    mesh.set_rules(&[
        destination_rule(""),
        virtual_service(&format!("  - route:\n{to_v1}")),
    ]);
    eventually_status(mesh, "status:500").await;
    println!("retries: failures reach the client without `retries`");
    let retries = format!(
        "  - route:\n{to_v1}    retries: {{attempts: 3, perTryTimeout: 2s, retryOn: 5xx}}\n"
    );
    mesh.set_rules(&[destination_rule(""), virtual_service(&retries)]);
    mesh.settle(&[], "v1", 40).await;
    let before = mesh.v1.hits();
    let t = mesh.tally(50, &[]).await;
    assert_eq!(
        t.get("v1"),
        Some(&50),
        "retries make every answer a 200: {t:?}"
    );
    assert_eq!(
        mesh.v1.hits() - before,
        100,
        "each request took a failed try and a retry"
    );
    mesh.v1.set(Behaviour::default());
    println!("retries: every answer a 200 with `retries`");

    let fault = format!(
        "  - fault:\n      abort: {{percentage: {{value: 50}}, httpStatus: 503}}\n    route:\n{to_v1}"
    );
    mesh.set_rules(&[destination_rule(""), virtual_service(&fault)]);
    eventually_status(mesh, "status:503").await;
    let t = mesh.tally(ABORT_REQUESTS, &[]).await;
    let aborted = share(&t, "status:503", ABORT_REQUESTS);
    println!("50 % abort over {ABORT_REQUESTS} requests: {aborted:.2} % answered 503");
    assert!((aborted - 50.0).abs() <= 5.0, "{t:?}");
    assert_eq!(
        t.get("status:503").unwrap_or(&0) + t.get("v1").unwrap_or(&0),
        ABORT_REQUESTS,
        "only aborts and v1: {t:?}"
    );

    mesh.v1.set(Behaviour {
        delay: Duration::from_secs(1),
        ..Behaviour::default()
    });
    let timeout = format!("  - timeout: 200ms\n    route:\n{to_v1}");
    mesh.set_rules(&[destination_rule(""), virtual_service(&timeout)]);
    mesh.settle(&[], "status:504", 3).await;
    mesh.v1.set(Behaviour::default());
    no_rejections(&mesh.envoy).await;
}

async fn eventually_status(mesh: &Mesh, want: &str) {
    envoy_harness::eventually(scenario::CONVERGE, want, || async {
        mesh.tally(20, &[]).await.contains_key(want).then_some(())
    })
    .await;
}

fn to_any_version() -> String {
    format!("  - route:\n    - destination: {{host: {HOST}}}\n")
}

/// With `localityLbSetting`, traffic stays in the proxy's zone (v1) and moves to the other zone
/// (v2) when the local endpoint becomes unhealthy.
async fn locality_failover(mesh: &Mesh) {
    let locality = "  trafficPolicy:
    loadBalancer:
      localityLbSetting:
        enabled: true
        failover: [{from: us-east, to: us-west}]
    outlierDetection: {consecutive5xxErrors: 100, interval: 1s, baseEjectionTime: 30s}
";
    mesh.set_rules(&[
        destination_rule(locality),
        virtual_service(&to_any_version()),
    ]);
    mesh.settle(&[], "v1", 50).await;
    // The other zone is there, one priority down (Envoy omits priority 0 from its dump).
    let dump = mesh.envoy.config_dump().await.to_string();
    assert!(dump.contains("\"priority\":1"), "EDS priority 1 in Envoy");
    mesh.set_v1_healthy(false);
    mesh.settle(&[], "v2", 50).await;
    mesh.set_v1_healthy(true);
    mesh.settle(&[], "v1", 50).await;
    no_rejections(&mesh.envoy).await;
}

/// Outlier detection ejects an endpoint that answers 500: after that every request is the
/// other endpoint's.
async fn outlier_detection(mesh: &Mesh) {
    let outlier = "  trafficPolicy:
    outlierDetection:
      consecutive5xxErrors: 2
      interval: 100ms
      baseEjectionTime: 60s
      maxEjectionPercent: 100
";
    mesh.set_rules(&[
        destination_rule(outlier),
        virtual_service(&to_any_version()),
    ]);
    envoy_harness::eventually(scenario::CONVERGE, "outlier detection in Envoy", || async {
        let dump = mesh.envoy.config_dump().await.to_string();
        dump.contains("\"consecutive_5xx\"").then_some(())
    })
    .await;
    // Both versions answer before v1 breaks.
    let t = mesh.tally(20, &[]).await;
    assert!(t.contains_key("v1") && t.contains_key("v2"), "{t:?}");
    mesh.v1.set(Behaviour {
        status: 500,
        ..Behaviour::default()
    });
    mesh.settle(&[], "v2", 50).await;
    let ejected = mesh
        .envoy
        .stat_sum("outlier_detection.ejections_enforced_total")
        .await;
    assert!(ejected >= 1, "v1 ejected ({ejected})");
    mesh.v1.set(Behaviour::default());
    no_rejections(&mesh.envoy).await;
}

fn initial() -> Vec<String> {
    vec![destination_rule(""), virtual_service(&split(90))]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sotw_split_header_match_and_canary_shift() {
    let mesh = Mesh::with_dir(Mode::Sotw, &initial()).await;
    split_and_header_match(&mesh).await;
    canary_shift_under_load(&mesh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_split_header_match_and_canary_shift() {
    let mesh = Mesh::with_dir(Mode::Delta, &initial()).await;
    split_and_header_match(&mesh).await;
    canary_shift_under_load(&mesh).await;
}

fn with_l4_rules() -> Vec<String> {
    let mut rules = initial();
    rules.extend(l4::tcp_rules(100));
    rules.push(l4::external_name());
    rules
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sotw_tcp_split_and_external_name_from_an_edited_file() {
    let mesh = Mesh::with_dir(Mode::Sotw, &with_l4_rules()).await;
    l4::an_external_name_reaches_the_mesh_service(&mesh).await;
    l4::tcp_split_moves_when_the_file_changes(&mesh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_tcp_split_and_external_name_from_an_edited_file() {
    let mesh = Mesh::with_dir(Mode::Delta, &with_l4_rules()).await;
    l4::an_external_name_reaches_the_mesh_service(&mesh).await;
    l4::tcp_split_moves_when_the_file_changes(&mesh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sotw_subsets_and_their_route_in_one_change_give_no_503() {
    let mesh = Mesh::with_dir(Mode::Sotw, &[]).await;
    subsets_and_their_route_in_one_change_under_load(&mesh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_subsets_and_their_route_in_one_change_give_no_503() {
    let mesh = Mesh::with_dir(Mode::Delta, &[]).await;
    subsets_and_their_route_in_one_change_under_load(&mesh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sotw_retries_fault_abort_and_timeout() {
    let mesh = Mesh::with_dir(Mode::Sotw, &initial()).await;
    retries_fault_timeout(&mesh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_retries_fault_abort_and_timeout() {
    let mesh = Mesh::with_dir(Mode::Delta, &initial()).await;
    retries_fault_timeout(&mesh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sotw_outlier_detection_ejects_a_failing_endpoint() {
    let mesh = Mesh::with_dir(Mode::Sotw, &initial()).await;
    outlier_detection(&mesh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delta_outlier_detection_ejects_a_failing_endpoint() {
    let mesh = Mesh::with_dir(Mode::Delta, &initial()).await;
    outlier_detection(&mesh).await;
}

/// `localityLbSetting` failover: EDS priorities relative to the node's locality (the proxy's zone
/// first), over SotW and delta.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locality_failover_moves_traffic_to_the_other_zone() {
    for mode in [Mode::Sotw, Mode::Delta] {
        let mesh = Mesh::with_dir(mode, &initial()).await;
        locality_failover(&mesh).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_split_header_match_and_timeout() {
    let mesh = Mesh::with_crds(Mode::Delta, &initial()).await;
    split_and_header_match(&mesh).await;
    mesh.v1.set(Behaviour {
        delay: Duration::from_secs(1),
        ..Behaviour::default()
    });
    let timeout = format!(
        "  - timeout: 200ms\n    route:\n    - destination: {{host: {HOST}, subset: v1}}\n"
    );
    mesh.set_rules(&[virtual_service(&timeout)]);
    mesh.settle(&[], "status:504", 3).await;
    mesh.v1.set(Behaviour::default());
    no_rejections(&mesh.envoy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_canary_shift_under_load_sotw() {
    let mesh = Mesh::with_crds(Mode::Sotw, &initial()).await;
    mesh.wait_for_weights((90, 10)).await;
    canary_shift_under_load(&mesh).await;
}

/// Config sources show in `/debug/registryz` (sync state, healthy / degraded) and their
/// rejected objects in `/debug/configz` (object, file:line, field, reason) and
/// `tributary_registry_rejected_objects`; the rules served are shown with their source and
/// their `exportTo` (stored, not applied). REG-11.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_sources_show_in_debug_pages_with_their_rejections() {
    use envoy_harness::Tributary;
    use serde_json::Value;

    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    let gone = dir.path().join("gone");
    std::fs::create_dir(&good).unwrap();
    std::fs::create_dir(&gone).unwrap();
    let bad_vs = virtual_service(&split(90)).replace(&format!("hosts: [{HOST}]"), "hosts: []");
    let bad_vs = bad_vs.replace("name: reviews", "name: broken");
    let exported = destination_rule("").replace("spec:\n", "spec:\n  exportTo: [\".\"]\n");
    std::fs::write(good.join("rules.yaml"), format!("{exported}---\n{bad_vs}")).unwrap();
    let (t, _) = Tributary::on_config(
        dir.path(),
        &format!(
            "config_sources:\n  - address: fs://{}\n  - address: fs://{}\n",
            good.display(),
            gone.display()
        ),
    )
    .await;
    let good_id = format!("fs://{}", good.display());
    let gone_id = format!("fs://{}", gone.display());
    let registryz: Value = serde_json::from_str(&t.get("/debug/registryz").await).unwrap();
    let entry = |id: &str| -> Value {
        registryz["registries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("{id} in /debug/registryz: {registryz}"))
    };
    assert_eq!(entry(&good_id)["sync"]["state"], "synced", "{registryz}");
    assert_eq!(entry(&good_id)["status"], "healthy", "{registryz}");

    // A source whose directory goes away is degraded and keeps what it had.
    std::fs::remove_dir(&gone).unwrap();
    eventually(Duration::from_secs(20), "the source degraded", || async {
        let r: Value = serde_json::from_str(&t.get("/debug/registryz").await).ok()?;
        let status = r["registries"]
            .as_array()?
            .iter()
            .find(|r| r["id"] == gone_id.as_str())?["status"]
            .as_str()?
            .to_string();
        status.starts_with("degraded:").then_some(())
    })
    .await;

    let configz: Value = serde_json::from_str(&t.get("/debug/configz").await).unwrap();
    let rejected = configz["rejected"].as_array().unwrap();
    assert_eq!(rejected.len(), 1, "{rejected:#?}");
    let r = &rejected[0];
    assert_eq!(r["registry"], good_id.as_str());
    assert_eq!(r["object"], "VirtualService default/broken");
    assert_eq!(r["field"], "spec.hosts");
    let line = exported.lines().count() + 1 + 5;
    assert_eq!(
        r["source"],
        format!("{}:{line}", good.join("rules.yaml").display()),
        "{r}"
    );
    assert!(
        r["message"].as_str().unwrap().contains("at least one host"),
        "{r}"
    );
    let rules = &configz["rules"];
    assert_eq!(
        rules["destination_rules"].as_array().unwrap().len(),
        1,
        "{rules}"
    );
    let dr = &rules["destination_rules"][0];
    assert_eq!(
        dr["meta"]["source"],
        format!("{}:1", good.join("rules.yaml").display())
    );
    assert_eq!(dr["spec"]["exportTo"], serde_json::json!(["."]), "{dr}");
    assert!(rules["virtual_services"].as_array().unwrap().is_empty());
    let metrics = t.get("/metrics").await;
    let gauge = format!("tributary_registry_rejected_objects{{registry=\"{good_id}\"}} 1");
    assert!(metrics.contains(&gauge), "{gauge} in /metrics");
}

/// Bad addresses stop start-up with a clear message.
#[test]
fn bad_config_source_addresses_stop_start_up() {
    let dir = tempfile::tempdir().unwrap();
    for (address, says) in [
        ("xds://istiod", "host:port"),
        ("fs://relative/dir", "absolute"),
        ("http://x", "unknown address"),
        ("fs:///does/not/exist", "does not exist"),
    ] {
        let config = dir.path().join("tributary.yaml");
        std::fs::write(
            &config,
            format!("config_sources:\n  - address: {address}\n"),
        )
        .unwrap();
        let out = std::process::Command::new(envoy_harness::tributary_bin())
            .args(["--config", config.to_str().unwrap()])
            .arg("--xds-addr")
            .arg(envoy_harness::loopback(envoy_harness::free_port()).to_string())
            .arg("--admin-addr")
            .arg(envoy_harness::loopback(envoy_harness::free_port()).to_string())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{address} refused");
        assert!(err.contains(says), "{address}: {err}");
    }
}
