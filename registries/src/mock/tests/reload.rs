//! File reload: debounce under a paused clock with injected file events, then the real notify
//! watch on a temporary directory (real time, short and bounded).

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::mock::{FILE_DEBOUNCE, FILE_DEBOUNCE_MAX};
use crate::registry::RegistryStatus;

fn file_with(hosts: &[(&str, &str)]) -> String {
    let mut out = String::from("services:\n");
    for (host, addr) in hosts {
        out.push_str(&format!(
            "  - hostname: {host}\n    ports: [{{name: http, port: 80, protocol: HTTP}}]\n    endpoints:\n      - address: {addr}\n"
        ));
    }
    out
}

fn file_config(path: &Path) -> MockConfig {
    MockConfig {
        file: Some(path.to_path_buf()),
        ..MockConfig::default()
    }
}

/// Writes a file the way editors do: a temporary file renamed over the old one.
fn replace_by_rename(path: &Path, text: &str) {
    let tmp = path.with_extension("yaml.tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(start_paused = true)]
async fn file_events_are_debounced_and_capped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.yaml");
    std::fs::write(&path, file_with(&[("a.demo", "10.0.0.1")])).unwrap();
    let (events, rx) = mpsc::channel(1);
    let mut r = start_with(file_config(&path), Some(rx));
    assert_eq!(summary(&r.settle().await), ["+a.demo/1", "synced"]);

    // A save in two steps 30 ms apart is one reload, 50 ms after the last step.
    std::fs::write(&path, file_with(&[("a.demo", "10.0.0.2")])).unwrap();
    events.send(()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    std::fs::write(
        &path,
        file_with(&[("a.demo", "10.0.0.3"), ("b.demo", "10.0.0.4")]),
    )
    .unwrap();
    events.send(()).await.unwrap();
    tokio::time::sleep(FILE_DEBOUNCE - Duration::from_millis(1)).await;
    assert_eq!(r.settle().await, [], "still within the debounce");
    tokio::time::sleep(Duration::from_millis(2)).await;
    let got = r.settle().await;
    assert_eq!(summary(&got), ["+a.demo/1 +b.demo/1"]);
    let RegistryEvent::Changes(c) = &got[0] else {
        panic!()
    };
    let Change::Upsert(a) = &c[0] else { panic!() };
    assert_eq!(
        a.endpoints[0].address, "10.0.0.3",
        "the final content, read once"
    );

    // A file touched every 40 ms is still reloaded by the cap.
    std::fs::write(&path, file_with(&[("a.demo", "10.0.0.9")])).unwrap();
    let start = tokio::time::Instant::now();
    let mut reloaded_at = None;
    while start.elapsed() < FILE_DEBOUNCE_MAX * 2 {
        events.send(()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(40)).await;
        if reloaded_at.is_none() && !r.settle().await.is_empty() {
            reloaded_at = Some(start.elapsed());
        }
    }
    let at = reloaded_at.expect("reloaded despite continuous events");
    assert!(
        at <= FILE_DEBOUNCE_MAX + Duration::from_millis(40),
        "{at:?}"
    );

    // Touching the file without changing it is no event (REG-14).
    events.send(()).await.unwrap();
    tokio::time::sleep(FILE_DEBOUNCE_MAX).await;
    assert_eq!(r.settle().await, []);
}

/// The next event, failing after a bounded real-time wait.
async fn next(r: &mut Running) -> RegistryEvent {
    match tokio::time::timeout(REAL_TIMEOUT, r.rx.recv()).await {
        Ok(Some(msg)) => msg.event,
        other => panic!("no event within {REAL_TIMEOUT:?}: {other:?}"),
    }
}

#[tokio::test]
async fn real_watch_edit_rename_half_written_delete_and_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mesh.yaml");
    std::fs::write(&path, file_with(&[("a.demo", "10.0.0.1")])).unwrap();
    // An unrelated file in the same directory is ignored.
    let mut r = start(file_config(&path));
    assert_eq!(
        summary(&[next(&mut r).await, next(&mut r).await]),
        ["+a.demo/1", "synced"]
    );

    // Edit in place.
    std::fs::write(&path, file_with(&[("a.demo", "10.0.0.2")])).unwrap();
    assert_eq!(summary(&[next(&mut r).await]), ["+a.demo/1"]);

    // Replace by rename, as editors do.
    replace_by_rename(
        &path,
        &file_with(&[("a.demo", "10.0.0.2"), ("b.demo", "10.0.0.3")]),
    );
    assert_eq!(summary(&[next(&mut r).await]), ["+b.demo/1"]);

    std::fs::write(dir.path().join("other.yaml"), "garbage: [").unwrap();

    // Half-written: Degraded naming file and line, last good state kept.
    let good = file_with(&[("a.demo", "10.0.0.2"), ("b.demo", "10.0.0.3")]);
    let half = &good[..good.find("protocol: HTTP").unwrap() + 12];
    std::fs::write(&path, half).unwrap();
    match next(&mut r).await {
        RegistryEvent::Status(RegistryStatus::Degraded { reason }) => {
            assert!(reason.contains(&format!("{}:", path.display())), "{reason}");
        }
        other => panic!("expected Degraded, got {other:?}"),
    }
    assert_eq!(
        r.handle.state().await.unwrap().services.len(),
        2,
        "last good state kept"
    );

    // Fixed: Healthy, and only the real change.
    replace_by_rename(
        &path,
        &file_with(&[("a.demo", "10.0.0.2"), ("b.demo", "10.0.0.4")]),
    );
    assert_eq!(
        summary(&[next(&mut r).await, next(&mut r).await]),
        ["healthy", "+b.demo/1"]
    );

    // Deleted: Degraded, nothing deleted; recreated: Healthy.
    std::fs::remove_file(&path).unwrap();
    match next(&mut r).await {
        RegistryEvent::Status(RegistryStatus::Degraded { reason }) => {
            assert!(reason.contains(&path.display().to_string()), "{reason}");
        }
        other => panic!("expected Degraded, got {other:?}"),
    }
    replace_by_rename(&path, &file_with(&[("a.demo", "10.0.0.2")]));
    assert_eq!(
        summary(&[next(&mut r).await, next(&mut r).await]),
        ["healthy", "-b.demo"]
    );
    assert!(
        r.handle
            .state()
            .await
            .unwrap()
            .services
            .iter()
            .all(|s| s.service.hostname == host("a.demo"))
    );
    // Nothing else is pending.
    tokio::time::sleep(FILE_DEBOUNCE * 4).await;
    assert_eq!(r.drain(), []);
}

#[tokio::test]
async fn a_missing_file_at_startup_is_an_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("absent.yaml");
    let mut r = start(file_config(&path));
    let err = tokio::time::timeout(REAL_TIMEOUT, &mut r.task)
        .await
        .expect("run returns at once")
        .expect("task not aborted")
        .expect_err("a missing file is an error");
    assert!(matches!(err, RegistryError::Config(_)));
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}
