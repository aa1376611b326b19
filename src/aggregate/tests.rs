//! The aggregate task driven end to end on tokio's paused clock: the test plays the registries and
//! the snapshot builder, and checks when pushes happen and what they carry.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep};
use tributary_registries::{
    Change, ClusterId, Endpoint, Hostname, Origin, Protocol, RegistryEvent, RegistryId,
    RegistryMessage, RegistryStatus, Service, ServicePort, ServiceState,
};

use super::*;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `host` from `registry` (its cluster named alike): one HTTP port, endpoints at `ips`.
pub(super) fn state(registry: &str, host: &str, port: u16, ips: &[&str]) -> ServiceState {
    let origin = Origin {
        registry: RegistryId::new(registry),
        cluster: ClusterId::new(registry),
    };
    ServiceState {
        service: Service {
            ports: vec![ServicePort {
                name: "http".into(),
                port,
                protocol: Protocol::Http,
                target_port: None,
            }],
            ..Service::new(Hostname::new(host).unwrap(), origin.clone())
        },
        endpoints: ips
            .iter()
            .map(|ip| Endpoint::new(ip.to_string(), origin.clone()))
            .collect(),
    }
}

/// A push as the fake builder saw it.
#[derive(Debug)]
struct Seen {
    at: Duration,
    hosts: BTreeSet<String>,
    service_change: bool,
}

struct Harness {
    events: mpsc::Sender<RegistryMessage>,
    commands: CommandSender,
    seen: mpsc::UnboundedReceiver<Seen>,
    view: RegistriesView,
    t0: Instant,
}

impl Harness {
    /// Starts an aggregate over `registries`; the fake builder takes `build_time` per push.
    fn start(registries: &[&str], debounce: DebounceSettings, build_time: Duration) -> Self {
        let (events, events_rx) = mpsc::channel(64);
        let (push_tx, mut push_rx) = mpsc::channel::<PushRequest>(1);
        let (seen_tx, seen) = mpsc::unbounded_channel();
        let view = RegistriesView::default();
        let settings = AggregateSettings {
            registries: registries.iter().map(|r| RegistryId::new(r)).collect(),
            debounce,
            sync_timeout: Duration::from_secs(30),
        };
        let (commands, commands_rx) = CommandSender::channel(4);
        let aggregate = Aggregate::new(settings, view.clone()).with_commands(commands_rx);
        tokio::spawn(aggregate.run(events_rx, push_tx));
        let t0 = Instant::now();
        tokio::spawn(async move {
            while let Some(req) = push_rx.recv().await {
                let _ = seen_tx.send(Seen {
                    at: t0.elapsed(),
                    hosts: req.hosts.iter().map(|(h, _)| h.to_string()).collect(),
                    service_change: req.service_change,
                });
                sleep(build_time).await;
                let _ = req.done.send(());
            }
        });
        Self {
            events,
            commands,
            seen,
            view,
            t0,
        }
    }

    async fn send(&self, registry: &str, event: RegistryEvent) {
        self.events
            .send(RegistryMessage {
                registry: RegistryId::new(registry),
                event,
            })
            .await
            .unwrap();
    }

    async fn upsert(&self, registry: &str, s: ServiceState) {
        self.send(registry, RegistryEvent::Changes(vec![Change::Upsert(s)]))
            .await;
    }

    /// The next push, waiting at most `within` of (virtual) time.
    async fn next(&mut self, within: Duration) -> Option<Seen> {
        tokio::time::timeout(within, self.seen.recv())
            .await
            .ok()
            .flatten()
    }

    fn now(&self) -> Duration {
        self.t0.elapsed()
    }

    /// Syncs a one-registry mesh holding `a.test` and consumes the initial push.
    async fn synced_with_a(&mut self) {
        self.upsert("mock", state("mock", "a.test", 80, &["10.0.0.1"]))
            .await;
        self.send("mock", RegistryEvent::Synced).await;
        let first = self.next(ms(10)).await.expect("initial push");
        assert!(first.service_change);
        assert_eq!(first.hosts, BTreeSet::from(["a.test".to_string()]));
    }
}

fn settings() -> DebounceSettings {
    DebounceSettings {
        debounce_after: ms(100),
        debounce_max: ms(1000),
        endpoint_debounce_after: Duration::ZERO,
    }
}

// REG-13 case 1: endpoint-only (partial) pushes are not debounced.
#[tokio::test(start_paused = true)]
async fn partial_pushes_are_not_debounced() {
    let mut h = Harness::start(&["mock"], settings(), Duration::ZERO);
    h.synced_with_a().await;
    for (i, ip) in ["10.0.0.2", "10.0.0.3", "10.0.0.4"].into_iter().enumerate() {
        let sent_at = h.now();
        h.upsert("mock", state("mock", "a.test", 80, &[ip])).await;
        let push = h.next(ms(5)).await.unwrap_or_else(|| panic!("push {i}"));
        assert!(!push.service_change, "endpoint-only");
        assert_eq!(push.at, sent_at, "pushed without waiting");
        sleep(ms(10)).await;
    }
}

// REG-13 case 2: a service change waits for debounce_after of quiet.
#[tokio::test(start_paused = true)]
async fn full_push_is_debounced() {
    let mut h = Harness::start(&["mock"], settings(), Duration::ZERO);
    h.synced_with_a().await;
    let sent_at = h.now();
    h.upsert("mock", state("mock", "b.test", 80, &["10.0.0.9"]))
        .await;
    assert!(h.next(ms(99)).await.is_none(), "held for the quiet period");
    let push = h.next(ms(10)).await.expect("pushed after 100ms of quiet");
    assert_eq!(push.at - sent_at, ms(100));
    assert!(push.service_change);
}

// REG-13 case 3: service changes inside the window are batched into one push.
#[tokio::test(start_paused = true)]
async fn full_pushes_are_batched() {
    let mut h = Harness::start(&["mock"], settings(), Duration::ZERO);
    h.synced_with_a().await;
    let start = h.now();
    for host in ["b.test", "c.test", "d.test"] {
        h.upsert("mock", state("mock", host, 80, &["10.0.0.9"]))
            .await;
        sleep(ms(50)).await;
    }
    let push = h.next(ms(200)).await.expect("one batched push");
    assert_eq!(
        push.at - start,
        ms(200),
        "100ms after the last change at +100ms"
    );
    assert_eq!(push.hosts.len(), 3);
    assert!(h.next(ms(500)).await.is_none(), "exactly one push");
}

// REG-13 case 4: endpoint changes go out at once while service changes are still batching.
#[tokio::test(start_paused = true)]
async fn partial_pushes_go_out_alongside_batched_full_pushes() {
    let mut h = Harness::start(&["mock"], settings(), Duration::ZERO);
    h.synced_with_a().await;
    let start = h.now();
    h.upsert("mock", state("mock", "b.test", 80, &["10.0.0.9"]))
        .await;
    sleep(ms(10)).await;
    h.upsert("mock", state("mock", "a.test", 80, &["10.0.0.7"]))
        .await;
    let partial = h.next(ms(1)).await.expect("endpoint push at once");
    assert_eq!(partial.at - start, ms(10));
    assert_eq!(partial.hosts, BTreeSet::from(["a.test".to_string()]));
    assert!(!partial.service_change);
    let full = h.next(ms(200)).await.expect("service push after quiet");
    assert_eq!(full.at - start, ms(100));
    assert_eq!(full.hosts, BTreeSet::from(["b.test".to_string()]));
}

// REG-13 case 5: continuous churn still pushes at debounce_max.
#[tokio::test(start_paused = true)]
async fn push_is_forced_after_debounce_max() {
    let mut h = Harness::start(&["mock"], settings(), Duration::ZERO);
    h.synced_with_a().await;
    let start = h.now();
    let churn = {
        let events = h.events.clone();
        tokio::spawn(async move {
            for i in 0..40u8 {
                let s = state("mock", "b.test", 80 + u16::from(i), &["10.0.0.9"]);
                let msg = RegistryMessage {
                    registry: RegistryId::new("mock"),
                    event: RegistryEvent::Changes(vec![Change::Upsert(s)]),
                };
                events.send(msg).await.unwrap();
                sleep(ms(50)).await;
            }
        })
    };
    let push = h.next(ms(1500)).await.expect("forced push");
    assert_eq!(
        push.at - start,
        ms(1000),
        "at debounce_max after the first change"
    );
    churn.abort();
}

// REG-13 case 6: one push at a time; what arrives during a push goes out together right after it.
#[tokio::test(start_paused = true)]
async fn pushes_are_sequential_and_coalesce_while_busy() {
    let mut h = Harness::start(&["mock"], settings(), ms(300));
    h.upsert("mock", state("mock", "a.test", 80, &["10.0.0.1"]))
        .await;
    h.send("mock", RegistryEvent::Synced).await;
    let first = h.next(ms(1)).await.expect("initial push");
    let busy_until = first.at + ms(300);
    for ip in ["10.0.0.2", "10.0.0.3", "10.0.0.4"] {
        sleep(ms(20)).await;
        h.upsert("mock", state("mock", "a.test", 80, &[ip])).await;
    }
    let next = h.next(ms(400)).await.expect("coalesced push");
    assert_eq!(
        next.at, busy_until,
        "waits for the push in flight, then goes at once"
    );
    assert!(h.next(ms(500)).await.is_none(), "three changes, one push");
}

// TRANS-11 / BUG-9: nothing is pushed until every registry has synced.
#[tokio::test(start_paused = true)]
async fn nothing_is_pushed_before_every_registry_synced() {
    let mut h = Harness::start(&["kube", "consul"], settings(), Duration::ZERO);
    h.upsert("kube", state("kube", "a.test", 80, &["10.0.0.1"]))
        .await;
    h.send("kube", RegistryEvent::Synced).await;
    assert!(h.next(ms(500)).await.is_none(), "consul not synced yet");
    assert!(!h.view.load().serving);
    h.upsert("consul", state("consul", "a.test", 80, &["10.0.1.1"]))
        .await;
    h.send("consul", RegistryEvent::Synced).await;
    let first = h.next(ms(10)).await.expect("initial push once all synced");
    assert_eq!(first.hosts.len(), 1);
    assert!(h.view.load().serving);
}

// REG-15: a registry that never syncs is served without after the sync timeout, loudly.
#[tokio::test(start_paused = true)]
async fn sync_timeout_serves_without_the_silent_registry() {
    let mut h = Harness::start(&["kube", "consul"], settings(), Duration::ZERO);
    h.upsert("kube", state("kube", "a.test", 80, &["10.0.0.1"]))
        .await;
    h.send("kube", RegistryEvent::Synced).await;
    let first = h.next(Duration::from_secs(31)).await.expect("served");
    assert_eq!(first.at, Duration::from_secs(30));
    let view = h.view.load();
    assert!(matches!(
        view.registries[1].sync,
        SyncState::TimedOut { .. }
    ));
}

// REG-14: a relist with nothing changed causes no push; REG-5: degraded keeps state.
#[tokio::test(start_paused = true)]
async fn no_op_resync_and_degraded_registry_push_nothing() {
    let mut h = Harness::start(&["mock"], settings(), Duration::ZERO);
    h.synced_with_a().await;
    for _ in 0..3 {
        h.upsert("mock", state("mock", "a.test", 80, &["10.0.0.1"]))
            .await;
    }
    h.send(
        "mock",
        RegistryEvent::Status(RegistryStatus::Degraded {
            reason: "connection refused".into(),
        }),
    )
    .await;
    assert!(h.next(ms(500)).await.is_none());
    let view = h.view.load();
    assert_eq!(view.registries[0].services, 1, "state kept while degraded");
    assert!(view.registries[0].degraded_since.is_some());
}

// REG-14: flip-flops inside a window end in the final state, in one push.
#[tokio::test(start_paused = true)]
async fn flip_flop_ends_in_final_state() {
    let mut h = Harness::start(
        &["mock"],
        DebounceSettings {
            endpoint_debounce_after: ms(50),
            ..settings()
        },
        Duration::ZERO,
    );
    h.synced_with_a().await;
    for i in 0..50 {
        let ip = if i % 2 == 0 { "10.0.0.2" } else { "10.0.0.1" };
        h.upsert("mock", state("mock", "a.test", 80, &[ip])).await;
    }
    // 50 flips end where they started: the merged state equals what was pushed, but the debouncer
    // already recorded changes; the builder finds identical resources and publishes nothing.
    let push = h.next(ms(100)).await.expect("one push for the burst");
    assert!(!push.service_change);
    assert!(h.next(ms(500)).await.is_none(), "one push for 50 flips");
}

// REG-11: rejected config objects are published per registry (for /debug/configz) and cause no
// push; a later list replaces the earlier one.
#[tokio::test(start_paused = true)]
async fn rejected_objects_are_published_and_push_nothing() {
    let mut h = Harness::start(&["mock"], settings(), Duration::ZERO);
    h.synced_with_a().await;
    let rejection = tributary_registries::Rejection {
        object: "ServiceEntry shop/bad".into(),
        source: "se.yaml:7".into(),
        field: "spec.ports[0].number".into(),
        message: "port number 0 must be in the range 1..65535".into(),
        serving_previous: false,
    };
    h.send("mock", RegistryEvent::Rejected(vec![rejection.clone()]))
        .await;
    assert!(h.next(ms(500)).await.is_none(), "no push for a rejection");
    assert_eq!(h.view.load().registries[0].rejected, [rejection]);
    h.send("mock", RegistryEvent::Rejected(Vec::new())).await;
    assert!(h.next(ms(500)).await.is_none());
    assert!(h.view.load().registries[0].rejected.is_empty());
}

#[tokio::test(start_paused = true)]
async fn reload_restart_keeps_services_until_resync_and_remove_deletes() {
    // Config reload: a restarted registry's hostnames stay until its new instance synced; then
    // only those it did not report again go. A removed registry's hostnames go at once.
    let view = RegistriesView::default();
    let settings = AggregateSettings {
        registries: vec![RegistryId::new("a")],
        debounce: settings(),
        sync_timeout: Duration::from_secs(30),
    };
    let mut agg = Aggregate::new(settings, view.clone());
    let msg = |event| RegistryMessage {
        registry: RegistryId::new("a"),
        event,
    };
    let services = |view: &RegistriesView| view.load().registries[0].services;
    agg.apply(msg(RegistryEvent::Changes(vec![
        Change::Upsert(state("a", "x.test", 80, &["10.0.0.1"])),
        Change::Upsert(state("a", "y.test", 80, &["10.0.0.2"])),
    ])));
    agg.apply(msg(RegistryEvent::Synced));
    assert_eq!(services(&view), 2);

    agg.command(AggregateCommand::Restart(RegistryId::new("a")));
    agg.apply(msg(RegistryEvent::Changes(vec![Change::Upsert(state(
        "a",
        "x.test",
        80,
        &["10.0.0.1"],
    ))])));
    assert_eq!(
        services(&view),
        2,
        "y.test stays until the new instance synced"
    );
    agg.apply(msg(RegistryEvent::Synced));
    assert_eq!(services(&view), 1, "y.test was not reported again");

    agg.command(AggregateCommand::Remove(RegistryId::new("a")));
    assert_eq!(services(&view), 0);
}

// The run loop reads events before commands; a restarted registry's listing, sent as soon as the
// Restart is acknowledged, must still be merged after it (a reload once left the old instance's
// hostnames served forever when the listing overtook the command).
#[tokio::test(start_paused = true)]
async fn restart_is_applied_before_the_new_instance_listing() {
    let mut h = Harness::start(&["mock"], settings(), Duration::ZERO);
    h.synced_with_a().await;
    h.commands
        .apply(AggregateCommand::Restart(RegistryId::new("mock")))
        .await;
    h.upsert("mock", state("mock", "b.test", 80, &["10.0.0.2"]))
        .await;
    h.send("mock", RegistryEvent::Synced).await;
    let push = h.next(ms(500)).await.expect("the restart's push");
    assert_eq!(
        push.hosts,
        BTreeSet::from(["a.test".to_string(), "b.test".to_string()])
    );
    let view = h.view.load();
    assert_eq!(view.registries[0].services, 1, "a.test is gone");
}
