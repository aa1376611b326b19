//! The watch loop against a scripted source, under a paused clock.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::time::Instant;

use super::*;
use crate::consul::client::QueryMeta;

/// Scripted answers: a body, or the reason of a failure.
type Answers = VecDeque<Result<Answer<u32>, String>>;

/// A source answering from a script, then never again; it logs when each query came.
#[derive(Clone, Default)]
struct Script {
    answers: Arc<Mutex<Answers>>,
    log: Arc<Mutex<Vec<(Instant, Query)>>>,
}

impl Script {
    fn push_ok(&self, index: u64, body: u32) -> &Self {
        self.push_meta(index, body, true)
    }

    fn push_meta(&self, index: u64, body: u32, known_leader: bool) -> &Self {
        let meta = QueryMeta {
            index,
            known_leader,
            last_contact: Duration::ZERO,
        };
        self.answers
            .lock()
            .unwrap()
            .push_back(Ok(Answer { body, meta }));
        self
    }

    fn push_err(&self, reason: &str) -> &Self {
        self.answers.lock().unwrap().push_back(Err(reason.into()));
        self
    }

    fn log(&self) -> Vec<(Instant, Query)> {
        self.log.lock().unwrap().clone()
    }
}

impl Source for Script {
    type Body = u32;
    const ENDPOINT: &'static str = "health";
    const BOUNDED: bool = true;
    fn fetch(&self, q: Query) -> impl Future<Output = Result<Answer<u32>, ClientError>> + Send {
        self.log.lock().unwrap().push((Instant::now(), q));
        let next = self.answers.lock().unwrap().pop_front();
        async move {
            match next {
                Some(Ok(a)) => Ok(a),
                Some(Err(reason)) => Err(ClientError::Setup(reason)),
                None => std::future::pending().await,
            }
        }
    }
}

fn shared(yaml: &str) -> Arc<Shared> {
    let config: ConsulConfig = serde_yaml::from_str(yaml).unwrap();
    config.validate().unwrap();
    Arc::new(Shared::new(&config))
}

/// Runs the watch until the script is used up and returns what it reported.
async fn run_script(script: &Script, shared: Arc<Shared>) -> Vec<Outcome<u32>> {
    let (tx, mut rx) = mpsc::channel(1024);
    let task = tokio::spawn(run(script.clone(), shared, tx, |o| Event::Service {
        name: Arc::from("s"),
        generation: 0,
        outcome: o.map_body(),
    }));
    // Long enough for every backoff and token wait of the scripts below.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    task.abort();
    let mut out = Vec::new();
    while let Ok(Event::Service { outcome, .. }) = rx.try_recv() {
        out.push(outcome.unmap_body());
    }
    out
}

/// The tests carry a `u32` through the `Vec<HealthEntry>`-typed event as that many entries.
trait Carry {
    fn map_body(self) -> Outcome<Vec<HealthEntry>>;
}
impl Carry for Outcome<u32> {
    fn map_body(self) -> Outcome<Vec<HealthEntry>> {
        match self {
            Outcome::Data(n) => Outcome::Data(vec![HealthEntry::default(); n as usize]),
            Outcome::Recovered => Outcome::Recovered,
            Outcome::Failed(r) => Outcome::Failed(r),
        }
    }
}
trait Uncarry {
    fn unmap_body(self) -> Outcome<u32>;
}
impl Uncarry for Outcome<Vec<HealthEntry>> {
    fn unmap_body(self) -> Outcome<u32> {
        match self {
            Outcome::Data(v) => Outcome::Data(v.len() as u32),
            Outcome::Recovered => Outcome::Recovered,
            Outcome::Failed(r) => Outcome::Failed(r),
        }
    }
}

fn failed(reason: &str) -> Outcome<u32> {
    Outcome::Failed(format!("consul client setup: {reason}"))
}

// REG-6: index 100, then 50 (backwards), then 0: the next requests use index 0 then 1, the data
// is re-read, and answers with the same index report nothing.
#[tokio::test(start_paused = true)]
async fn index_rules_drive_the_requests() {
    let s = Script::default();
    s.push_ok(100, 1)
        .push_ok(50, 2)
        .push_ok(0, 2)
        .push_ok(0, 2)
        .push_ok(0, 2);
    let out = run_script(&s, shared("{}")).await;
    let indexes: Vec<u64> = s.log().iter().map(|(_, q)| q.index).collect();
    assert_eq!(indexes, [0, 100, 0, 1, 1, 1]);
    assert_eq!(
        out,
        [Outcome::Data(1), Outcome::Data(2), Outcome::Data(2)],
        "unchanged answers report nothing"
    );
    let waits: Vec<Duration> = s.log().iter().map(|(_, q)| q.wait).collect();
    assert!(
        waits.iter().all(|w| *w == Duration::from_secs(300)),
        "{waits:?}"
    );
}

// REG-6: the same index returned 100 times in a row: nothing reported, and the loop is held to
// the token bucket (burst 2, then one per min_query_interval) instead of spinning.
#[tokio::test(start_paused = true)]
async fn a_fast_answering_consul_is_rate_limited() {
    let s = Script::default();
    s.push_ok(7, 1);
    for _ in 0..100 {
        s.push_ok(7, 1);
    }
    let out = run_script(&s, shared("min_query_interval: 1s")).await;
    assert_eq!(out, [Outcome::Data(1)]);
    let log = s.log();
    assert_eq!(
        log.len(),
        102,
        "101 answers, then the request that never returns"
    );
    let start = log[0].0;
    assert_eq!(
        log[1].0, start,
        "the burst: the second request goes at once"
    );
    let took = log[101].0 - start;
    assert_eq!(took, Duration::from_secs(100), "then one per second");
}

// REG-5: failures back off exponentially with jitter; a repeated error is reported once; the
// first good answer clears it.
#[tokio::test(start_paused = true)]
async fn failures_back_off_exponentially_with_jitter() {
    let s = Script::default();
    s.push_ok(10, 1);
    for _ in 0..6 {
        s.push_err("refused");
    }
    s.push_ok(10, 1);
    let out = run_script(
        &s,
        shared("backoff: {initial: 1s, max: 8s}\nmin_query_interval: 1ms"),
    )
    .await;
    assert_eq!(
        out,
        [Outcome::Data(1), failed("refused"), Outcome::Recovered],
        "one Failed for a repeated error, Recovered when the index did not move"
    );
    let times: Vec<Instant> = s.log().iter().map(|(t, _)| *t).collect();
    let gaps: Vec<Duration> = times.windows(2).skip(1).map(|w| w[1] - w[0]).collect();
    let nominal = [1, 2, 4, 8, 8, 8];
    for (gap, n) in gaps.iter().zip(nominal) {
        let n = Duration::from_secs(n);
        assert!(
            *gap >= n / 2 && *gap <= n + Duration::from_millis(2),
            "gap {gap:?} within [{:?}, {n:?}]: {gaps:?}",
            n / 2
        );
    }
    let indexes: Vec<u64> = s.log().iter().map(|(_, q)| q.index).collect();
    assert_eq!(
        indexes,
        [0, 10, 0, 0, 0, 0, 0, 0, 10],
        "retries read without blocking, and the index is kept for after"
    );
}

// REG-8: an answer without a known leader is a failure: not applied, index unchanged.
#[tokio::test(start_paused = true)]
async fn answers_without_a_leader_are_not_applied() {
    let s = Script::default();
    s.push_ok(10, 3).push_meta(11, 1, false).push_ok(12, 2);
    let out = run_script(&s, shared("{}")).await;
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!(out[0], Outcome::Data(3));
    assert!(
        matches!(&out[1], Outcome::Failed(r) if r.contains("KnownLeader")),
        "{out:?}"
    );
    assert_eq!(out[2], Outcome::Data(2));
    let indexes: Vec<u64> = s.log().iter().map(|(_, q)| q.index).collect();
    assert_eq!(
        indexes,
        [0, 10, 0, 12],
        "the leaderless answer did not move the index (the retry reads without blocking)"
    );
}

// REG-8: too old a LastContact on a stale read is a failure too.
#[tokio::test(start_paused = true)]
async fn stale_answers_beyond_max_last_contact_are_not_applied() {
    let sh = shared("stale: true\nmax_last_contact: 2s");
    let meta = |ms| QueryMeta {
        index: 5,
        known_leader: true,
        last_contact: Duration::from_millis(ms),
    };
    assert!(
        sh.trust(Answer {
            body: (),
            meta: meta(1999)
        })
        .is_ok()
    );
    let e = sh
        .trust(Answer {
            body: (),
            meta: meta(2500),
        })
        .unwrap_err();
    assert!(e.contains("LastContact"), "{e}");
}

// Scale: with more services than blocking slots, waits shrink so services take turns, keeping the
// request rate near services / wait.
#[test]
fn waits_shrink_when_services_outnumber_slots() {
    let sh = shared("max_concurrent_watches: 100\nwait: 5m");
    sh.set_service_watches(100);
    assert_eq!(sh.service_wait(), Duration::from_secs(300));
    sh.set_service_watches(1000);
    assert_eq!(sh.service_wait(), Duration::from_secs(30));
    sh.set_service_watches(1_000_000);
    assert_eq!(sh.service_wait(), MIN_SHARED_WAIT);
}
