//! What traffic rules add to the cost of an endpoint change, on the load tool's `medium` mesh
//! (1,000 services × 2 HTTP ports × 10 endpoints, half labelled `version: v1`, half `v2`): one
//! endpoint change without rules, and with a DestinationRule with subsets v1 and v2 on every
//! service (issue 15's bound: at most 2× the cost without).
//!
//! `cargo bench --bench rules`; numbers and their reading are in BENCHMARKS.md.

// A bench binary has no API; `criterion_group!` defines an undocumented `pub fn`.
#![allow(missing_docs)]

use std::fmt::Write;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use tributary::aggregate::{MergedService, merge};
use tributary::envoy::GenerateOptions;
use tributary::snapshot::MeshBuilder;
use tributary_registries::mock::ServiceSpec;
use tributary_registries::rules::{DestinationRule, Rule, RuleMeta, RuleSet};
use tributary_registries::{ClusterId, Hostname, Origin, RegistryId};

const SERVICES: usize = 1_000;
const ENDPOINTS: usize = 10;

fn hostname(i: usize) -> String {
    format!("svc-{i:04}.bench.svc.cluster.local")
}

/// Service `i` as the mock registry would report it; `generation` moves its endpoint ports.
fn service(i: usize, generation: u16) -> (Hostname, Option<Arc<MergedService>>) {
    let mut yaml = format!(
        "hostname: {}\nports: [{{name: http-0, port: 20000, protocol: HTTP}}, \
         {{name: http-1, port: 20001, protocol: HTTP}}]\nendpoints:\n",
        hostname(i)
    );
    for e in 0..ENDPOINTS {
        let n = i * ENDPOINTS + e;
        let _ = writeln!(
            yaml,
            "- {{address: 10.{}.{}.{}, ports: {{http-0: {}, http-1: {}}}, labels: {{version: v{}}}}}",
            (n >> 16) & 255,
            (n >> 8) & 255,
            n & 255,
            8000 + generation,
            9000 + generation,
            1 + e % 2
        );
    }
    let spec: ServiceSpec = serde_yaml::from_str(&yaml).expect("generated services parse");
    let origin = Origin {
        registry: RegistryId::new("mock"),
        cluster: ClusterId::new("bench"),
    };
    let state = spec
        .to_state(&origin)
        .expect("generated services are valid");
    let host = state.service.hostname.clone();
    (host, merge([&state]).map(Arc::new))
}

/// A DestinationRule with subsets v1 and v2 for every service.
fn subsets_everywhere() -> Arc<RuleSet> {
    let destination_rules = (0..SERVICES)
        .map(|i| {
            let spec: DestinationRule = serde_yaml::from_str(&format!(
                "host: {}\nsubsets: [{{name: v1, labels: {{version: v1}}}}, \
                 {{name: v2, labels: {{version: v2}}}}]\n",
                hostname(i)
            ))
            .expect("generated rules parse");
            let meta = RuleMeta {
                namespace: "bench".into(),
                name: format!("dr-{i}"),
                ..RuleMeta::default()
            };
            Arc::new(Rule { meta, spec })
        })
        .collect();
    Arc::new(RuleSet {
        destination_rules,
        virtual_services: Vec::new(),
    })
}

fn benches(c: &mut Criterion) {
    let all: Vec<_> = (0..SERVICES).map(|i| service(i, 0)).collect();
    let mut g = c.benchmark_group("medium mesh (1,000×2×10): one endpoint change");
    for (name, rules) in [
        ("without rules", None),
        (
            "with subsets v1/v2 on every service",
            Some(subsets_everywhere()),
        ),
    ] {
        let mut builder = MeshBuilder::new(GenerateOptions::default());
        builder
            .apply(all.clone(), Instant::now())
            .expect("first build");
        if let Some(rules) = rules {
            builder
                .set_rules(rules, Instant::now())
                .expect("subset clusters added");
        }
        let mut generation: u16 = 0;
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    generation = generation.wrapping_add(1);
                    vec![service(
                        usize::from(generation) % SERVICES,
                        generation % 1000 + 1,
                    )]
                },
                |change| black_box(builder.apply(change, Instant::now())),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(rules, benches);
criterion_main!(rules);
