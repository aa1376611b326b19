//! Serves the fake Consul the tests use, for trying the Consul registry without Consul.
//!
//! ```sh
//! cargo run -p tributary-registries --example fake-consul --features test-util -- \
//!     [--addr 127.0.0.1:8500] [--datacenter dc1] [--services N]
//! ```
//!
//! It answers Consul's read API (`/v1/catalog/services`, `/v1/health/service/<name>`, blocking
//! queries included) and the agent write API a script uses against `consul agent -dev`
//! (`PUT /v1/agent/service/register`, `/v1/agent/service/deregister/<id>`,
//! `/v1/agent/check/{pass,warn,fail}/<check id>`, `/v1/agent/service/maintenance/<id>`).
//! `--services N` registers N synthetic services (two instances each) to watch the registry's
//! request rate at scale. Every 10 seconds it prints how many reads it answered.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tributary_registries::consul::fake::{FakeConsul, Instance};

/// How often the request rate is printed.
const REPORT_EVERY: Duration = Duration::from_secs(10);

struct Args {
    addr: SocketAddr,
    datacenter: String,
    services: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        addr: "127.0.0.1:8500".parse().map_err(|e| format!("{e}"))?,
        datacenter: "dc1".to_string(),
        services: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--addr" => args.addr = value()?.parse().map_err(|e| format!("--addr: {e}"))?,
            "--datacenter" => args.datacenter = value()?,
            "--services" => {
                args.services = value()?.parse().map_err(|e| format!("--services: {e}"))?
            }
            "-h" | "--help" => {
                return Err(
                    "usage: fake-consul [--addr 127.0.0.1:8500] [--datacenter dc1] [--services N]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let fake = match FakeConsul::start_on(args.addr, &args.datacenter).await {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "fake-consul: cannot listen on {}: {e}; is Consul already running?",
                args.addr
            );
            std::process::exit(1);
        }
    };
    for s in 0..args.services {
        let name = format!("svc-{s:04}");
        for i in 0..2 {
            let addr = format!("10.{}.{}.{}", s / 250, s % 250, i + 1);
            fake.register(Instance::new(&name, &format!("{name}-{i}"), &addr, 8080));
        }
    }
    println!(
        "fake Consul (datacenter {}) listening on {} with {} synthetic services; Ctrl-C stops it",
        args.datacenter,
        fake.url(),
        args.services
    );
    let mut last = (Instant::now(), 0);
    let mut ticks = tokio::time::interval(REPORT_EVERY);
    ticks.tick().await;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = ticks.tick() => {
                let counts = fake.request_counts();
                let reads = counts.reads();
                let rate = (reads - last.1) as f64 / last.0.elapsed().as_secs_f64();
                println!(
                    "reads: {reads} total ({} services list, {} health), {rate:.2}/s over the last {:?}; writes: {}",
                    counts.services, counts.health, REPORT_EVERY, counts.writes
                );
                last = (Instant::now(), reads);
            }
        }
    }
}
