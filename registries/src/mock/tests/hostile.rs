//! Hostile and unlucky files on the real watch (docs/hardening.md, "The mock file"): nesting and
//! alias bombs are rejected while the last good state is served, and the watcher does not re-read
//! a file nobody changed (its own reads are not changes).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use notify::event::{AccessKind, EventKind};
use notify::{RecursiveMode, Watcher};

use super::*;
use crate::mock::FILE_DEBOUNCE;
use crate::mock::file_format::limits::OVER_BUDGET;
use crate::registry::RegistryStatus;

/// How long a hostile file may take to be rejected before the test fails: a hang guard for a
/// loaded CI machine, not a performance bound.
const REJECT_LIMIT: Duration = Duration::from_secs(30);

/// How long the watcher is observed for re-reads: 20 of the old 50 ms read loops.
const OBSERVE: Duration = Duration::from_secs(1);

const GOOD: &str = "services:\n  - hostname: a.demo\n    ports: [{name: http, port: 80, protocol: HTTP}]\n    endpoints:\n      - address: 10.0.0.1\n";

fn file_config(path: &Path) -> MockConfig {
    MockConfig {
        file: Some(path.to_path_buf()),
        ..MockConfig::default()
    }
}

/// Counts the opens of `path` (by anyone, this process included) seen by inotify.
fn count_opens(path: &Path) -> (notify::RecommendedWatcher, Arc<AtomicUsize>) {
    let opens = Arc::new(AtomicUsize::new(0));
    let seen = opens.clone();
    let name = path.file_name().unwrap().to_owned();
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(e) = res
            && matches!(e.kind, EventKind::Access(AccessKind::Open(_)))
            && e.paths.iter().any(|p| p.file_name() == Some(&name))
        {
            seen.fetch_add(1, Ordering::SeqCst);
        }
    })
    .unwrap();
    watcher
        .watch(path.parent().unwrap(), RecursiveMode::NonRecursive)
        .unwrap();
    (watcher, opens)
}

async fn next_degraded(r: &mut Running) -> String {
    match tokio::time::timeout(REJECT_LIMIT, r.rx.recv()).await {
        Ok(Some(msg)) => match msg.event {
            RegistryEvent::Status(RegistryStatus::Degraded { reason }) => reason,
            other => panic!("expected Degraded, got {other:?}"),
        },
        other => panic!("not rejected within {REJECT_LIMIT:?}: {other:?}"),
    }
}

#[tokio::test]
async fn the_watcher_does_not_reread_an_unchanged_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.yaml");
    std::fs::write(&path, GOOD).unwrap();
    let mut r = start(file_config(&path));
    assert_eq!(summary(&r.settle().await), ["+a.demo/1", "synced"]);
    let (_watch, opens) = count_opens(&path);
    tokio::time::sleep(OBSERVE).await;
    assert_eq!(
        opens.load(Ordering::SeqCst),
        0,
        "opens of an unchanged file"
    );

    // A real change is read (once), and then the file is left alone again, even while invalid.
    std::fs::write(&path, "services: [").unwrap();
    assert!(next_degraded(&mut r).await.contains("m.yaml"));
    tokio::time::sleep(FILE_DEBOUNCE * 4).await;
    let after_change = opens.load(Ordering::SeqCst);
    assert!(after_change >= 1, "the changed file was read");
    tokio::time::sleep(OBSERVE).await;
    assert_eq!(
        opens.load(Ordering::SeqCst),
        after_change,
        "no re-reads of an unchanged invalid file"
    );
    assert_eq!(r.drain(), [], "one Degraded, not one per re-read");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nesting_and_alias_bombs_are_rejected_and_the_last_good_state_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.yaml");
    std::fs::write(&path, GOOD).unwrap();
    let mut r = start(file_config(&path));
    assert_eq!(summary(&r.settle().await), ["+a.demo/1", "synced"]);

    let nested = format!("services: {}{}", "[".repeat(100_000), "]".repeat(100_000));
    std::fs::write(&path, nested).unwrap();
    let reason = next_degraded(&mut r).await;
    assert!(reason.contains("nested deeper than"), "{reason}");
    // The registry still answers, and serves the last good state.
    let state = r.handle.state().await.unwrap();
    assert_eq!(state.services.len(), 1);
    assert_eq!(state.services[0].service.hostname, host("a.demo"));

    // Back to good, then the alias bomb (1,000 endpoints referenced 10,000 times).
    std::fs::write(&path, GOOD.replace("10.0.0.1", "10.0.0.2")).unwrap();
    let back = [
        r.rx.recv().await.unwrap().event,
        r.rx.recv().await.unwrap().event,
    ];
    assert_eq!(summary(&back), ["healthy", "+a.demo/1"]);
    let bomb = crate::mock::file_format::tests::alias_bomb(1_000, 10_000);
    std::fs::write(&path, bomb).unwrap();
    let reason = next_degraded(&mut r).await;
    assert!(reason.contains(OVER_BUDGET), "{reason}");
    let state = r.handle.state().await.unwrap();
    assert_eq!(state.services.len(), 1);
    assert_eq!(state.services[0].endpoints[0].address, "10.0.0.2");
}
