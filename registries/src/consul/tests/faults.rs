//! REG-5, REG-8, REG-15: faults keep the last good state, degrade the registry, never delete, and
//! recovery pushes only the real differences, once.

use std::time::Duration;

use super::*;
use crate::consul::fake::{CheckStatus, Fault};

/// The changes logged since `mark`.
fn since(r: &Running, mark: usize) -> Vec<Logged> {
    r.log[mark..].to_vec()
}

// REG-5: 500, 503, a refused connection, then a hang. Each time: Degraded, nothing sent (no
// deletion, no "zero instances"), last good state kept; after healing: Healthy and the change made
// during the outage, pushed once.
#[tokio::test]
async fn reg5_faults_keep_the_last_good_state_and_recovery_pushes_real_changes_once() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 2, 1);
    register(&fake, "db", 1, 2);
    let mut r = Running::synced(config(&fake)).await;
    assert_eq!(r.endpoints("web").len(), 2);
    let faults = [
        Fault::Status(500),
        Fault::Status(503),
        Fault::Refuse,
        Fault::Hang,
    ];
    for (round, fault) in faults.into_iter().enumerate() {
        let before = r.view.clone();
        let mark = r.log.len();
        fake.fail(fault.clone());
        let reason = r.wait_degraded().await;
        assert!(reason.contains("Consul"), "{fault:?}: {reason}");
        // A change made during the outage: web gains an instance.
        let id = format!("web-new-{round}");
        fake.register(Instance::new("web", &id, &format!("10.0.9.{round}"), 8080));
        r.settle(Duration::from_millis(800)).await;
        assert_eq!(
            since(&r, mark),
            [],
            "{fault:?}: nothing is sent while failing"
        );
        assert_eq!(r.view, before, "{fault:?}: the last good state is kept");

        fake.heal();
        let want = before[&host("web")].endpoints.len() + 1;
        r.wait_for("Healthy and the new instance", |r| {
            r.status == RegistryStatus::Healthy && r.endpoints("web").len() == want
        })
        .await;
        r.settle(Duration::from_millis(800)).await;
        assert_eq!(
            since(&r, mark),
            [Logged::Upsert(host("web"))],
            "{fault:?}: only the real change, once"
        );
        assert_eq!(r.view[&host("db")], before[&host("db")]);
    }
}

// REG-5: recovery is noticed at once even when nothing changed (no wait-long blocking query on
// the old index), and pushes nothing.
#[tokio::test]
async fn recovery_without_changes_is_seen_at_once_and_pushes_nothing() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 2, 1);
    let mut c = config(&fake);
    c.wait = Duration::from_secs(300);
    let mut r = Running::synced(c).await;
    let mark = r.log.len();
    fake.fail(Fault::Status(500));
    r.wait_degraded().await;
    fake.heal();
    let t = std::time::Instant::now();
    r.wait_for("Healthy", |r| r.status == RegistryStatus::Healthy)
        .await;
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    r.settle(Duration::from_millis(500)).await;
    assert_eq!(since(&r, mark), [], "nothing changed, nothing pushed");
}

// REG-5: a service removed during an outage is deleted only after recovery.
#[tokio::test]
async fn reg5_removals_during_an_outage_are_deleted_after_recovery() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 1, 1);
    register(&fake, "db", 1, 2);
    let mut r = Running::synced(config(&fake)).await;
    let mark = r.log.len();
    fake.fail(Fault::Status(500));
    r.wait_degraded().await;
    fake.deregister("db-1");
    r.settle(Duration::from_millis(800)).await;
    assert!(
        r.view.contains_key(&host("db")),
        "never a deletion while failing"
    );
    fake.heal();
    r.wait_for("db deleted after healing", |r| {
        !r.view.contains_key(&host("db"))
    })
    .await;
    r.settle(Duration::from_millis(500)).await;
    let log = since(&r, mark);
    assert!(log.contains(&Logged::Delete(host("db"))), "{log:?}");
    assert!(
        log.iter().all(|c| *c != Logged::Upsert(host("web"))),
        "{log:?}"
    );
}

// REG-15: Consul unreachable at startup: Degraded, no Synced and no data (never "zero services");
// the aggregate's sync timeout serves the other registries meanwhile. Once Consul answers, the
// registry syncs.
#[tokio::test]
async fn reg15_unreachable_at_startup_degrades_and_syncs_when_consul_answers() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 2, 1);
    fake.fail(Fault::Refuse);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut r = Running::start(config(&fake));
    let reason = r.wait_degraded().await;
    assert!(
        reason.contains("cannot connect") && reason.contains(&fake.url()),
        "{reason}"
    );
    r.settle(Duration::from_millis(800)).await;
    assert!(
        !r.synced && r.log.is_empty(),
        "no data, no Synced: {:?}",
        r.log
    );
    fake.heal();
    r.wait_for("Synced once Consul answers", |r| r.synced).await;
    assert_eq!(r.status, RegistryStatus::Healthy);
    assert_eq!(r.endpoints("web").len(), 2);
}

// REG-8: stale reads without a known leader are not applied: a reduced instance list does not
// delete anything, the registry is Degraded; once the leader is back, the change is applied.
#[tokio::test]
async fn reg8_leader_loss_applies_no_deletions() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 2, 1);
    let mut c = config(&fake);
    c.stale = true;
    let mut r = Running::synced(c).await;
    assert!(
        fake.requests()
            .iter()
            .all(|q| q.query.contains_key("stale"))
    );
    let mark = r.log.len();
    fake.fail(Fault::NoLeader);
    fake.deregister("web-2");
    let reason = r.wait_degraded().await;
    assert!(reason.contains("KnownLeader"), "{reason}");
    r.settle(Duration::from_millis(800)).await;
    assert_eq!(since(&r, mark), [], "the leaderless answer is not applied");
    assert_eq!(r.endpoints("web").len(), 2);
    fake.heal();
    r.wait_for("the removal, once the leader is back", |r| {
        r.status == RegistryStatus::Healthy && r.endpoints("web").len() == 1
    })
    .await;
}

// REG-8: the same without `stale`: Consul answers 500 "No cluster leader"; and a stale read whose
// server lost the leader too long ago is not trusted either.
#[tokio::test]
async fn reg8_no_leader_in_default_mode_and_old_last_contact_degrade() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 1, 1);
    let mut r = Running::synced(config(&fake)).await;
    fake.fail(Fault::NoLeader);
    let reason = r.wait_degraded().await;
    assert!(reason.contains("No cluster leader"), "{reason}");
    fake.heal();
    r.wait_for("Healthy", |r| r.status == RegistryStatus::Healthy)
        .await;

    let mut c = config(&fake);
    c.name = "consul-stale".into();
    c.stale = true;
    c.max_last_contact = Duration::from_secs(1);
    let mut r = Running::synced(c).await;
    fake.fail(Fault::LastContact(Duration::from_secs(30)));
    fake.set_service_check("web-1", CheckStatus::Critical);
    let reason = r.wait_degraded().await;
    assert!(reason.contains("LastContact"), "{reason}");
    assert_eq!(r.endpoints("web"), [("10.0.1.1".to_string(), true)]);
}

// A wrong or missing ACL token is a degraded registry whose reason says what to check.
#[tokio::test]
async fn acl_denial_names_the_token() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 1, 1);
    fake.require_token(Some("right"));
    let mut c = config(&fake);
    c.token = Some("wrong".into());
    let mut r = Running::start(c);
    let reason = r.wait_degraded().await;
    assert!(
        reason.contains("403") && reason.contains("ACL token"),
        "{reason}"
    );
    assert!(!r.synced);
}
