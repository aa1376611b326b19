//! Events, faults and sync control, under a paused clock.

use std::time::Duration;

use super::*;
use crate::mock::{Fault, MockError};
use crate::registry::RegistryStatus;

fn two_services() -> MockConfig {
    MockConfig {
        name: "m1".into(),
        cluster: "c1".into(),
        services: vec![
            spec("a.demo", &["10.0.0.1", "10.0.0.2"]),
            spec("b.demo", &["10.0.0.3"]),
        ],
        ..MockConfig::default()
    }
}

/// The two services running, their initial events consumed.
async fn started() -> Running {
    let mut r = start(two_services());
    r.settle().await;
    r
}

/// Clears the faults and pictures what the registry then sends.
async fn cleared(r: &mut Running) -> Vec<String> {
    r.handle.clear_faults().await.unwrap();
    summary(&r.drain())
}

/// Adds c.demo with one endpoint, 10.0.0.5.
async fn add_c(r: &Running) {
    r.handle
        .upsert_service(spec("c.demo", &["10.0.0.5"]))
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn whole_state_then_synced_then_only_real_changes() {
    let mut r = start(two_services());
    let events = r.settle().await;
    assert_eq!(summary(&events), ["+a.demo/2 +b.demo/1", "synced"]);
    let RegistryEvent::Changes(changes) = &events[0] else {
        panic!("{events:?}")
    };
    for c in changes {
        let Change::Upsert(s) = c else { panic!() };
        assert_eq!(s.service.origin.registry.as_str(), "m1");
        assert_eq!(s.service.origin.cluster.as_str(), "c1");
        assert!(s.endpoints.iter().all(|e| e.origin == s.service.origin));
    }

    // REG-14: the same state again is no event.
    r.handle
        .upsert_service(spec("a.demo", &["10.0.0.2", "10.0.0.1"]))
        .await
        .unwrap();
    assert_eq!(r.drain(), []);

    r.handle
        .set_endpoints("a.demo", vec![endpoint("10.0.0.9")])
        .await
        .unwrap();
    assert_eq!(summary(&r.drain()), ["+a.demo/1"]);
    r.handle.delete_service("b.demo").await.unwrap();
    assert_eq!(summary(&r.drain()), ["-b.demo"]);
    assert_eq!(
        r.handle.delete_service("b.demo").await,
        Err(MockError::UnknownService("b.demo".into()))
    );
    assert!(matches!(
        r.handle.set_endpoints("nope.demo", vec![]).await,
        Err(MockError::UnknownService(_))
    ));
    let state = r.handle.state().await.unwrap();
    assert!(state.synced);
    assert_eq!(state.services.len(), 1);
    assert_eq!(r.drain(), []);
}

#[tokio::test(start_paused = true)]
async fn invalid_requests_name_the_field_and_change_nothing() {
    let mut r = started().await;
    let mut bad = spec("a.demo", &["10.0.0.1"]);
    bad.endpoints[0].ports.insert("grpc".into(), 9000);
    let err = r.handle.upsert_service(bad).await.unwrap_err().to_string();
    assert!(err.contains("endpoints[0].ports.grpc"), "{err}");
    let err = r
        .handle
        .upsert_service(spec("bad..host", &[]))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("hostname"), "{err}");
    let mut zero = endpoint("10.0.0.1");
    zero.weight = 0;
    let err = r
        .handle
        .set_endpoints("a.demo", vec![zero])
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("endpoints[0].weight"), "{err}");
    assert_eq!(r.drain(), []);
}

#[tokio::test(start_paused = true)]
async fn hold_sync_delivers_nothing_until_released() {
    // TRANS-11: nothing is served before sync.
    let mut r = start(MockConfig {
        hold_sync: true,
        ..two_services()
    });
    assert_eq!(r.settle().await, []);
    add_c(&r).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(r.settle().await, []);
    let state = r.handle.state().await.unwrap();
    assert!(state.sync_held && !state.synced);
    r.handle.release_sync().await.unwrap();
    assert_eq!(
        summary(&r.drain()),
        ["+a.demo/2 +b.demo/1 +c.demo/1", "synced"]
    );
    assert!(!r.handle.state().await.unwrap().sync_held);
}

#[tokio::test(start_paused = true)]
async fn delay_delivers_each_change_after_the_delay() {
    let mut r = started().await;
    r.handle
        .inject_fault(Fault::Delay(Duration::from_millis(100)))
        .await
        .unwrap();
    add_c(&r).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    r.handle.delete_service("b.demo").await.unwrap();
    assert_eq!(r.drain(), [], "nothing before the delay");
    // The list already shows both changes.
    assert_eq!(r.handle.state().await.unwrap().services.len(), 2);

    tokio::time::sleep(Duration::from_millis(51)).await; // t = 101 ms
    assert_eq!(summary(&r.settle().await), ["+c.demo/1"]);
    tokio::time::sleep(Duration::from_millis(50)).await; // t = 151 ms
    assert_eq!(summary(&r.settle().await), ["-b.demo"]);

    // Clearing delivers anything still delayed at once.
    r.handle.delete_service("c.demo").await.unwrap();
    assert_eq!(cleared(&mut r).await, ["-c.demo"]);
    assert_eq!(r.handle.state().await.unwrap().faults, []);
}

#[tokio::test(start_paused = true)]
async fn error_reports_degraded_holds_changes_and_heals_with_the_net_diff() {
    let mut r = started().await;
    r.handle
        .inject_fault(Fault::Error {
            message: "consul says 500".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        r.drain(),
        [RegistryEvent::Status(RegistryStatus::Degraded {
            reason: "consul says 500".into()
        })]
    );
    // Made and partly undone while failing: held, never a deletion on the wire.
    add_c(&r).await;
    r.handle.delete_service("b.demo").await.unwrap();
    r.handle.delete_service("c.demo").await.unwrap();
    r.handle
        .upsert_service(spec("b.demo", &["10.0.0.3"]))
        .await
        .unwrap();
    r.handle
        .set_endpoints("a.demo", vec![endpoint("10.0.0.7")])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(r.settle().await, []);
    let state = r.handle.state().await.unwrap();
    assert!(matches!(state.status, RegistryStatus::Degraded { .. }));
    assert_eq!(state.faults.len(), 1);

    assert_eq!(cleared(&mut r).await, ["healthy", "+a.demo/1"]);
}

#[tokio::test(start_paused = true)]
async fn stall_is_total_silence_until_cleared() {
    let mut r = started().await;
    r.handle.inject_fault(Fault::Stall).await.unwrap();
    add_c(&r).await;
    r.handle
        .inject_fault(Fault::Error {
            message: "also failing".into(),
        })
        .await
        .unwrap();
    r.handle.pause_sync().await.unwrap();
    r.handle.resume_sync().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(r.settle().await, [], "not even a status while stalled");
    assert_eq!(cleared(&mut r).await, ["+c.demo/1"]);
}

#[tokio::test(start_paused = true)]
async fn stall_before_sync_withholds_the_initial_state() {
    let mut r = start(MockConfig {
        hold_sync: true,
        ..two_services()
    });
    r.handle.inject_fault(Fault::Stall).await.unwrap();
    r.handle.release_sync().await.unwrap();
    assert_eq!(r.settle().await, []);
    assert_eq!(cleared(&mut r).await, ["+a.demo/2 +b.demo/1", "synced"]);
}

#[tokio::test(start_paused = true)]
async fn pause_then_resume_delivers_the_coalesced_net_changes() {
    let mut r = started().await;
    r.handle.pause_sync().await.unwrap();
    assert!(r.handle.state().await.unwrap().paused);
    // Flip-flop (REG-14): a.demo ends where it started, so it is not sent.
    r.handle
        .set_endpoints("a.demo", vec![endpoint("10.9.9.9")])
        .await
        .unwrap();
    r.handle
        .set_endpoints("a.demo", vec![endpoint("10.0.0.1"), endpoint("10.0.0.2")])
        .await
        .unwrap();
    add_c(&r).await;
    r.handle
        .upsert_service(spec("c.demo", &["10.0.0.5", "10.0.0.6"]))
        .await
        .unwrap();
    r.handle.delete_service("b.demo").await.unwrap();
    // Status still flows while paused.
    r.handle
        .inject_fault(Fault::Error {
            message: "x".into(),
        })
        .await
        .unwrap();
    assert_eq!(summary(&r.drain()), ["degraded"]);
    assert_eq!(cleared(&mut r).await, ["healthy"]);
    r.handle.resume_sync().await.unwrap();
    assert_eq!(summary(&r.drain()), ["-b.demo +c.demo/2"]);
}
