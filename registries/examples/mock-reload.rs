//! How long a one-endpoint change to a large mock file takes to come out of the mock registry:
//! from the write to the `Changes` event, with the real file watch (BENCHMARKS.md, "Mock file
//! reload").
//!
//! ```text
//! cargo run --release -p tributary-registries --example mock-reload -- [MEGABYTES] [ROUNDS]
//! ```
//!
//! Prints the file size, the initial read time and p50/p90/max of the change latency.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tributary_registries::mock::{MockConfig, MockRegistry};
use tributary_registries::{Registry, RegistryEvent, RegistrySink};

/// Endpoints per generated service.
const ENDPOINTS_PER_SERVICE: usize = 20;
/// Pause between rounds, so each write is its own debounce burst.
const BETWEEN_ROUNDS: Duration = Duration::from_millis(200);
/// Longest wait for one change before giving up.
const ROUND_LIMIT: Duration = Duration::from_secs(60);

/// A mesh of at least `bytes` bytes; `round` picks the address of the first endpoint.
fn mesh(bytes: usize, round: usize) -> String {
    let mut out = String::from("services:\n");
    let mut s = 0usize;
    while out.len() < bytes {
        out.push_str(&format!(
            "  - hostname: svc-{s}.load.svc.cluster.local\n    ports: [{{name: http, port: 80, protocol: HTTP}}, {{name: grpc, port: 90, protocol: GRPC}}]\n    labels: {{app: svc-{s}, team: load}}\n    endpoints:\n"
        ));
        for e in 0..ENDPOINTS_PER_SERVICE {
            let n = s * ENDPOINTS_PER_SERVICE + e;
            let last = match (s, e) {
                (0, 0) => round % 250,
                _ => n & 255,
            };
            out.push_str(&format!(
                "      - {{address: 10.{}.{}.{last}, labels: {{version: v1, app: svc-{s}}}, locality: us-east/zone-{}}}\n",
                (n >> 16) & 255,
                (n >> 8) & 255,
                e % 3
            ));
        }
        s += 1;
    }
    out
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let megabytes: usize = args.get(1).map_or(6, |a| a.parse().unwrap());
    let rounds: usize = args.get(2).map_or(20, |a| a.parse().unwrap());
    let bytes = megabytes * 1_000_000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mesh.yaml");
    let text = mesh(bytes, 0);
    std::fs::write(&path, &text).unwrap();

    let (registry, _handle) = MockRegistry::new(MockConfig {
        file: Some(path.clone()),
        ..MockConfig::default()
    });
    let (tx, mut rx) = mpsc::channel(1024);
    let sink = RegistrySink::new(registry.id(), tx);
    let started = Instant::now();
    let task = tokio::spawn(Box::new(registry).run(sink));
    loop {
        let msg = rx.recv().await.expect("registry running");
        if msg.event == RegistryEvent::Synced {
            break;
        }
    }
    println!(
        "file: {:.1} MB; initial read and sync: {:?}",
        text.len() as f64 / 1e6,
        started.elapsed()
    );

    let mut took = Vec::with_capacity(rounds);
    for round in 1..=rounds {
        tokio::time::sleep(BETWEEN_ROUNDS).await;
        let next = mesh(bytes, round);
        let t0 = Instant::now();
        std::fs::write(&path, next).unwrap();
        loop {
            let msg = tokio::time::timeout(ROUND_LIMIT, rx.recv())
                .await
                .expect("the change arrived")
                .expect("registry running");
            match msg.event {
                RegistryEvent::Changes(_) => break,
                RegistryEvent::Status(s) => panic!("unexpected status {s:?}"),
                _ => {}
            }
        }
        took.push(t0.elapsed());
    }
    took.sort();
    let pick = |q: f64| took[((took.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "one-endpoint change, {rounds} rounds: p50 {:?}, p90 {:?}, max {:?}",
        pick(0.5),
        pick(0.9),
        took[took.len() - 1]
    );
    task.abort();
}
