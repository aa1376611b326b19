//! The file source as the registry runs it: a real directory, real notify events.

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::serviceentry::fixtures::{invalid_service_entries, static_http_entry as se};

/// Short, so a vanished directory is noticed quickly.
const RESCAN: Duration = Duration::from_millis(100);

fn config(dir: &Path) -> ServiceEntryConfig {
    ServiceEntryConfig {
        name: "se".into(),
        cluster_id: "c1".into(),
        directory: Some(dir.to_path_buf()),
        rescan_interval: RESCAN,
        ..ServiceEntryConfig::default()
    }
}

fn ip_of(run: &Run, host: &str) -> Option<String> {
    run.get(host)
        .and_then(|s| s.endpoints.first())
        .map(|e| e.address.clone())
}

#[tokio::test]
async fn edits_additions_and_deletions_are_picked_up_without_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    std::fs::write(d.join("a.yaml"), se("a", "10.0.0.1")).unwrap();
    let mut run = Run::start(config(d));
    run.wait("synced with a", |r| {
        r.synced && r.get("a.example.com").is_some()
    })
    .await;
    assert_eq!(ip_of(&run, "a.example.com").as_deref(), Some("10.0.0.1"));

    std::fs::write(d.join("a.yaml"), se("a", "10.0.0.2")).unwrap();
    run.wait("a edited", |r| {
        ip_of(r, "a.example.com").as_deref() == Some("10.0.0.2")
    })
    .await;
    std::fs::write(d.join("b.yaml"), se("b", "10.0.0.3")).unwrap();
    run.wait("b added", |r| r.get("b.example.com").is_some())
        .await;
    std::fs::remove_file(d.join("a.yaml")).unwrap();
    run.wait("a deleted", |r| r.get("a.example.com").is_none())
        .await;
    assert!(
        run.log
            .contains(&Change::Delete(Hostname::new("a.example.com").unwrap()))
    );

    // REG-14: rewriting the same content changes nothing.
    std::fs::write(d.join("b.yaml"), se("b", "10.0.0.3")).unwrap();
    assert_eq!(run.settle(Duration::from_millis(400)).await, 0);
}

#[tokio::test]
async fn a_half_written_file_is_reported_and_keeps_its_last_good_objects() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let full = format!("{}---\n{}", se("a", "10.0.0.1"), se("b", "10.0.0.2"));
    std::fs::write(d.join("m.yaml"), &full).unwrap();
    let mut run = Run::start(config(d));
    run.wait("synced", |r| r.synced && r.view.len() == 2).await;

    let cut = &full[..full.find("endpoints: [{address: 10.0.0.2").unwrap() + 15];
    std::fs::write(d.join("m.yaml"), cut).unwrap();
    let file = format!("file {}", d.join("m.yaml").display());
    run.wait("the file reported", |r| !r.rejections_of(&file).is_empty())
        .await;
    assert_eq!(run.view.len(), 2, "nothing withdrawn");
    assert_eq!(
        run.status,
        RegistryStatus::Healthy,
        "a bad file is not a platform failure"
    );
    assert!(run.log.iter().all(|c| matches!(c, Change::Upsert(_))));

    std::fs::write(d.join("m.yaml"), full.replace("10.0.0.2", "10.0.0.9")).unwrap();
    run.wait("fixed", |r| {
        r.rejected.is_empty() && ip_of(r, "b.example.com").as_deref() == Some("10.0.0.9")
    })
    .await;
}

#[tokio::test]
async fn invalid_entries_applied_with_a_valid_one_are_each_rejected_with_their_own_error() {
    // REG-11: the table applied together with a valid entry; the valid one is served.
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let cases = invalid_service_entries("shop");
    let mut text = se("valid", "10.0.0.1");
    for c in &cases {
        text.push_str("---\n");
        text.push_str(&c.yaml);
    }
    let path = d.join("all.yaml");
    std::fs::write(&path, &text).unwrap();
    let mut run = Run::start(config(d));
    run.wait("synced", |r| r.synced).await;
    let hosts: Vec<&str> = run.view.keys().map(|h| h.as_str()).collect();
    assert_eq!(
        hosts,
        ["valid.example.com"],
        "only the valid entry is served"
    );
    assert_eq!(run.rejected.len(), cases.len(), "{:#?}", run.rejected);
    for c in &cases {
        let r = run.rejections_of(&format!("ServiceEntry shop/{}", c.name));
        assert_eq!(r.len(), 1, "{}: {r:?}", c.name);
        assert_eq!(r[0].field, c.field, "{}", c.name);
        assert!(
            r[0].message.contains(c.message),
            "{}: {}",
            c.name,
            r[0].message
        );
        assert!(
            r[0].source.starts_with(&format!("{}:", path.display())),
            "{r:?}"
        );
        assert!(!r[0].serving_previous);
    }
}

#[tokio::test]
async fn a_vanished_directory_degrades_and_withdraws_nothing() {
    // REG-2 for files: an unreadable directory is never "no objects".
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("se");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("a.yaml"), se("a", "10.0.0.1")).unwrap();
    let mut run = Run::start(config(&d));
    run.wait("synced", |r| r.synced && r.view.len() == 1).await;
    std::fs::rename(&d, tmp.path().join("away")).unwrap();
    run.wait("degraded", |r| {
        matches!(r.status, RegistryStatus::Degraded { .. })
    })
    .await;
    assert_eq!(run.settle(RESCAN * 4).await, 0, "nothing withdrawn");
    std::fs::write(tmp.path().join("away/b.yaml"), se("b", "10.0.0.2")).unwrap();
    std::fs::rename(tmp.path().join("away"), &d).unwrap();
    run.wait("healthy with b", |r| {
        r.status == RegistryStatus::Healthy && r.get("b.example.com").is_some()
    })
    .await;
    // And the new watch works.
    std::fs::remove_file(d.join("b.yaml")).unwrap();
    run.wait("b removed", |r| r.get("b.example.com").is_none())
        .await;
}

#[tokio::test]
async fn a_missing_directory_at_start_is_a_config_error() {
    let tmp = tempfile::tempdir().unwrap();
    let registry = Box::new(ServiceEntryRegistry::new(config(&tmp.path().join("nope"))));
    let (tx, _rx) = mpsc::channel(8);
    let err = registry
        .run(RegistrySink::new(RegistryId::new("se"), tx))
        .await;
    let err = err.unwrap_err().to_string();
    assert!(err.contains("nope") && err.contains("cannot list"), "{err}");
}
