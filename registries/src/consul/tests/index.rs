//! REG-6 and REG-14 through the running registry: Consul's index rules on the wire, no push
//! without a content change, and a loop that stays within its rate limit.

use std::time::{Duration, Instant};

use super::*;
use crate::consul::fake::{Route, Scripted};

/// The `index` parameters of the requests for `/v1/health/service/<service>`, in order.
fn health_indexes(fake: &FakeConsul, service: &str) -> Vec<u64> {
    let path = format!("/v1/health/service/{service}");
    fake.requests()
        .iter()
        .filter(|r| r.path == path)
        .map(|r| {
            r.query
                .get("index")
                .and_then(|i| i.parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

fn pushes_of(r: &Running, mark: usize, service: &str) -> usize {
    r.log[mark..]
        .iter()
        .filter(|c| **c == Logged::Upsert(host(service)))
        .count()
}

// REG-6: index 100, then 50 (backwards), then 0: the next requests use index=0 then index=1, the
// data is re-read, and one real change during it gives exactly one push.
#[tokio::test]
async fn reg6_backwards_and_zero_indexes_reset_and_reread_with_one_push() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 1, 1);
    let mut r = Running::synced(config(&fake)).await;
    let mark = r.log.len();
    for index in [100, 50, 0] {
        let s = Scripted {
            index: Some(index),
            ..Default::default()
        };
        fake.script(Route::Health("web".into()), s);
    }
    // The real change wakes the blocked query; the scripted answers follow it.
    fake.register(Instance::new("web", "web-2", "10.0.1.2", 8080));
    r.wait_for("web with 2 endpoints", |r| r.endpoints("web").len() == 2)
        .await;
    r.settle(Duration::from_millis(1000)).await;
    let indexes = health_indexes(&fake, "web");
    let at = indexes
        .iter()
        .position(|i| *i == 100)
        .unwrap_or_else(|| panic!("a request with index=100: {indexes:?}"));
    assert_eq!(
        indexes.get(at + 1..at + 3),
        Some(&[0, 1][..]),
        "after 50 (backwards) comes index=0, after 0 comes index=1: {indexes:?}"
    );
    assert_eq!(indexes[at + 3], fake.health_index("web"), "{indexes:?}");
    assert!(indexes[at + 3..].iter().all(|i| *i > 1), "{indexes:?}");
    assert_eq!(pushes_of(&r, mark, "web"), 1, "{:?}", &r.log[mark..]);
    assert_eq!(r.log.len(), mark + 1, "{:?}", &r.log[mark..]);
}

// REG-6: the same index and body returned 100 times in a row: zero pushes, and the loop is held
// to its token bucket (burst 2, then one per min_query_interval) instead of spinning.
#[tokio::test]
async fn reg6_the_same_answer_100_times_pushes_nothing_within_the_rate_limit() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 1, 1);
    let mut c = config(&fake);
    c.min_query_interval = Duration::from_millis(20);
    let mut r = Running::synced(c).await;
    let mark = r.log.len();
    let index = fake.health_index("web");
    for _ in 0..100 {
        let s = Scripted {
            index: Some(index),
            ..Default::default()
        };
        fake.script(Route::Health("web".into()), s);
    }
    let before = fake.request_counts().health;
    // The blocked query returns at its wait (2 s) with the same index; then the scripts answer.
    let start = Instant::now();
    let mut done = None;
    while start.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if fake.request_counts().health >= before + 101 {
            done = Some(start.elapsed());
            break;
        }
    }
    let took = done.expect("the 100 scripted answers were consumed");
    let sent = fake.request_counts().health - before;
    r.settle(Duration::from_millis(300)).await;
    assert_eq!(r.log.len(), mark, "zero pushes: {:?}", &r.log[mark..]);
    // 100 immediate answers at one request per 20 ms (after a burst of 2) take ≥ ~2 s; without
    // the limit they would take a few milliseconds.
    assert!(
        took >= Duration::from_millis(1900),
        "{sent} requests in {took:?}: the loop is not rate limited"
    );
}

// REG-14 / REG-6: idempotent writes, re-registrations of the same instance and wait timeouts
// all answer with no content change: zero pushes, though the watches did see them.
#[tokio::test]
async fn reg14_idempotent_writes_and_wait_timeouts_push_nothing() {
    let fake = FakeConsul::start().await;
    register(&fake, "web", 2, 1);
    register(&fake, "db", 1, 2);
    let mut r = Running::synced(config(&fake)).await;
    let mark = r.log.len();
    let before = fake.request_counts();
    for _ in 0..5 {
        fake.touch("web");
        register(&fake, "db", 1, 2);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Longer than one blocking wait (2 s + jitter): every watch times out at least once.
    r.settle(Duration::from_millis(2600)).await;
    let after = fake.request_counts();
    assert!(
        after.health >= before.health + 5 && after.services > before.services,
        "the watches saw the writes: {before:?} → {after:?}"
    );
    assert_eq!(&r.log[mark..], &[] as &[Logged], "no pushes");
}

// Scale: with more services than `max_concurrent_watches`, at most that many per-service blocking
// queries are in flight (plus the services-list watch), the services take turns with shorter waits,
// and a change to any of them is still seen within about one `wait` of turns.
#[tokio::test]
async fn blocking_queries_in_flight_are_bounded_and_services_take_turns() {
    let fake = FakeConsul::start().await;
    let services: Vec<String> = (0..20).map(|i| format!("svc-{i:02}")).collect();
    for (i, s) in services.iter().enumerate() {
        register(&fake, s, 1, u8::try_from(i + 1).unwrap());
    }
    let mut c = config(&fake);
    c.max_concurrent_watches = 4;
    c.wait = Duration::from_secs(2);
    let mut r = Running::synced(c).await;
    assert_eq!(r.view.len(), 20);
    fake.reset_max_blocking_in_flight();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let max = fake.max_blocking_in_flight();
    assert!(
        max <= 4 + 1,
        "{max} blocking queries in flight; the bound is 4 + the list watch"
    );
    assert!(max >= 4, "the slots are used: {max}");
    // Waits shrink to max(2 s × 4 / 20, 1 s) = 1 s, so every service gets a turn within ~5 s.
    let waits: Vec<String> = fake
        .requests()
        .iter()
        .rev()
        .take(10)
        .filter(|q| q.path.starts_with("/v1/health/service/") && q.query.contains_key("index"))
        .map(|q| q.query["wait"].clone())
        .collect();
    assert!(
        !waits.is_empty() && waits.iter().all(|w| w == "1000ms"),
        "{waits:?}"
    );
    // One change, to a service late in the turn order: seen when its turn comes.
    let start = Instant::now();
    // A check change, which does not move the services list (a deregistration would).
    fake.set_service_check("svc-19-1", crate::consul::fake::CheckStatus::Critical);
    r.wait_for("svc-19 unhealthy", |r| {
        r.endpoints("svc-19") == [("10.0.20.1".to_string(), false)]
    })
    .await;
    let took = start.elapsed();
    println!("20 services over 4 watches: one change seen in {took:?}");
    assert!(took < Duration::from_secs(9), "{took:?}");
    let start = Instant::now();
    for i in 0..19 {
        fake.set_service_check(
            &format!("svc-{i:02}-1"),
            crate::consul::fake::CheckStatus::Critical,
        );
    }
    r.wait_for("every service to see its failing check", |r| {
        r.view.values().all(|s| {
            s.endpoints
                .iter()
                .all(|e| e.health != crate::model::Health::Healthy)
        })
    })
    .await;
    let took = start.elapsed();
    println!("20 services over 4 watches: 20 changes seen in {took:?}");
    assert!(took < Duration::from_secs(9), "{took:?}");
}
