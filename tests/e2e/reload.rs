//! Config reload of the real binary: SIGHUP (and a changed file) adds, restarts and removes
//! registries without restarting tributary; a broken file keeps the running config.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::harness::{Tributary, eventually, free_port, loopback, replace_file};

fn mesh(host: &str) -> String {
    format!(
        "services:\n  - hostname: {host}\n    ports: [{{name: http, port: 8080, protocol: HTTP}}]\n    endpoints:\n      - {{address: 127.0.0.1, ports: {{http: 9}}}}\n"
    )
}

fn config(d: &Path, registries: &[(&str, &str)]) -> String {
    let mut y = String::from("registries:\n");
    for (name, file) in registries {
        y += &format!(
            "  - type: mock\n    name: {name}\n    file: {}\n",
            d.join(file).display()
        );
    }
    y
}

fn hup(t: &Tributary) {
    let pid = t.proc_id();
    let ok = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

async fn wait_hosts(t: &Tributary, present: &[&str], absent: &[&str]) {
    eventually(Duration::from_secs(10), "registryz to match", || async {
        let body = t.get("/debug/registryz").await;
        let ok =
            present.iter().all(|h| body.contains(h)) && !absent.iter().any(|h| body.contains(h));
        ok.then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_adds_restarts_and_removes_registries() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (f, h) in [
        ("a.yaml", "a.e2e.local"),
        ("b.yaml", "b.e2e.local"),
        ("c.yaml", "c.e2e.local"),
    ] {
        std::fs::write(d.join(f), mesh(h)).unwrap();
    }
    let path = d.join("tributary.yaml");
    std::fs::write(&path, config(d, &[("one", "a.yaml")])).unwrap();
    let mut t = Tributary::start(
        d,
        loopback(free_port()),
        loopback(free_port()),
        &["--config", path.to_str().unwrap()],
    )
    .await;
    wait_hosts(&t, &["a.e2e.local"], &["b.e2e.local"]).await;

    // Added.
    replace_file(&path, &config(d, &[("one", "a.yaml"), ("two", "b.yaml")]));
    hup(&t);
    wait_hosts(&t, &["a.e2e.local", "b.e2e.local"], &[]).await;

    // Changed: "one" now reads c.yaml; a.e2e.local goes once the new instance synced.
    replace_file(&path, &config(d, &[("one", "c.yaml"), ("two", "b.yaml")]));
    hup(&t);
    wait_hosts(&t, &["c.e2e.local", "b.e2e.local"], &["a.e2e.local"]).await;

    // A broken file is refused; the running registries stay.
    replace_file(&path, "registries: [{type: nope}]\n");
    hup(&t);
    tokio::time::sleep(Duration::from_millis(500)).await;
    wait_hosts(&t, &["c.e2e.local", "b.e2e.local"], &[]).await;

    // Removed, noticed by the file poll alone (no signal).
    replace_file(&path, &config(d, &[("one", "c.yaml")]));
    wait_hosts(&t, &["c.e2e.local"], &["b.e2e.local"]).await;
    assert!(t.proc.alive(), "still the same process");
    let log = std::fs::read_to_string(&t.proc.log).unwrap();
    assert!(log.contains("config reload failed"), "{log}");
}
