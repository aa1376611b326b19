//! Scale: the steady-state request rate of a large catalog. A measurement, not a timed
//! assertion; run it on purpose:
//!
//! ```sh
//! CONSUL_SCALE_SERVICES=1000 CONSUL_SCALE_WAIT=30s CONSUL_SCALE_SECONDS=90 \
//!   cargo test -p tributary-registries --release consul_request_rate -- --ignored --nocapture
//! ```
//!
//! It syncs N services from the fake Consul, then counts the requests the registry sends over the
//! measurement window while nothing changes, and prints requests per second next to the
//! `N / wait` the design predicts.

use std::time::{Duration, Instant};

use super::*;

#[allow(
    clippy::disallowed_methods,
    reason = "a manual measurement's knobs, read by the test itself"
)]
fn env<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement (minutes long); see the module docs"]
async fn consul_request_rate() {
    let services: usize = env("CONSUL_SCALE_SERVICES", 1000);
    let wait = humantime::parse_duration(&env("CONSUL_SCALE_WAIT", "30s".to_string()))
        .expect("CONSUL_SCALE_WAIT like 30s or 5m");
    let window = Duration::from_secs(env("CONSUL_SCALE_SECONDS", 90));
    let slots: usize = env("CONSUL_SCALE_WATCHES", 128);
    let fake = FakeConsul::start().await;
    for s in 0..services {
        let name = format!("svc-{s:04}");
        for i in 0..2 {
            let addr = format!("10.{}.{}.{}", s / 250, s % 250, i + 1);
            fake.register(Instance::new(&name, &format!("{name}-{i}"), &addr, 8080));
        }
    }
    let mut c = config(&fake);
    c.wait = wait;
    c.max_concurrent_watches = slots;
    c.min_query_interval = crate::consul::ConsulConfig::default().min_query_interval;
    c.backoff = crate::consul::BackoffConfig::default();
    let t = Instant::now();
    let mut r = Running::start(c);
    r.wait_for("Synced", |r| r.synced).await;
    let sync = t.elapsed();
    assert_eq!(r.view.len(), services);
    let sync_requests = fake.request_counts().reads();
    // Let the blocking queries settle into their steady rhythm before measuring.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = fake.request_counts().reads();
    let t = Instant::now();
    r.settle(window).await;
    let measured = t.elapsed();
    let sent = fake.request_counts().reads() - before;
    let rate = sent as f64 / measured.as_secs_f64();
    let predicted = services as f64 / wait.as_secs_f64();
    println!(
        "consul scale: {services} services, wait {wait:?}, max_concurrent_watches {slots}: \
         synced in {sync:?} with {sync_requests} requests; steady state {sent} requests in \
         {measured:?} = {rate:.2} req/s (services / wait = {predicted:.2}); pushes during the \
         window: {}",
        r.log.len() - services
    );
    assert_eq!(r.status, RegistryStatus::Healthy);
    assert!(
        rate < services as f64 / 10.0,
        "{rate:.1} req/s for {services} services"
    );
}
