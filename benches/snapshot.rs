//! What one registry change costs inside tributary, on the load tool's `large` mesh
//! (10,000 services × 2 ports × 10 endpoints): building the snapshot from scratch and after one
//! endpoint change, encoding one service's resources, merging one hostname across two registries,
//! and finding what one delta stream must send after that change. On the `medium` mesh (1,000
//! services): the build after one service is added, with and without a VHDS client.
//!
//! `cargo bench --bench snapshot`; numbers and their reading are in BENCHMARKS.md.

// A bench binary has no API; `criterion_group!` defines an undocumented `pub fn`.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use tributary::aggregate::{MergedService, merge};
use tributary::envoy::{GenerateOptions, ResourceType, clusters_for, load_assignments_for};
use tributary::snapshot::{MeshBuilder, View};
use tributary_registries::mock::{EndpointSpec, PortSpec, ServiceSpec};
use tributary_registries::{ClusterId, Hostname, Origin, Protocol, RegistryId, ServiceState};

const SERVICES: usize = 10_000;
/// The load tool's `medium` mesh, where a route configuration is ~360 KB.
const MEDIUM_SERVICES: usize = 1_000;
const PORTS: usize = 2;
const ENDPOINTS: usize = 10;

fn origin(registry: &str) -> Origin {
    Origin {
        registry: RegistryId::new(registry),
        cluster: ClusterId::new("bench"),
    }
}

fn state(i: usize, generation: u16, registry: &str) -> ServiceState {
    let spec = ServiceSpec {
        hostname: format!("svc-{i:05}.bench.svc.cluster.local"),
        ports: (0..PORTS)
            .map(|p| PortSpec {
                name: format!("http-{p}"),
                port: 20000 + p as u16,
                protocol: Protocol::Http,
            })
            .collect(),
        resolution: Default::default(),
        location: Default::default(),
        vips: vec![],
        labels: BTreeMap::new(),
        service_accounts: vec![],
        endpoints: (0..ENDPOINTS)
            .map(|e| {
                let n = i * ENDPOINTS + e;
                EndpointSpec {
                    address: format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255),
                    ports: (0..PORTS)
                        .map(|p| (format!("http-{p}"), 8000 + p as u16 + generation))
                        .collect(),
                    labels: BTreeMap::new(),
                    locality: "region/zone".into(),
                    health: Default::default(),
                    weight: 1,
                    network: String::new(),
                    service_account: String::new(),
                }
            })
            .collect(),
    };
    spec.to_state(&origin(registry))
        .expect("generated specs are valid")
}

fn merged(i: usize, generation: u16) -> (Hostname, Option<Arc<MergedService>>) {
    let s = state(i, generation, "mock");
    let host = s.service.hostname.clone();
    (host, merge([&s]).map(Arc::new))
}

fn mesh(services: usize) -> Vec<(Hostname, Option<Arc<MergedService>>)> {
    (0..services).map(|i| merged(i, 0)).collect()
}

/// The build that adds one service to the `medium` mesh (the service is deleted again, untimed,
/// before each add). With `vhds`, a VHDS client has read the snapshot first, so the builder keeps
/// the route configurations' VHDS form in step.
fn service_add(c: &mut Criterion, vhds: bool) {
    let mut builder = MeshBuilder::new(GenerateOptions::default());
    let base = builder
        .apply(mesh(MEDIUM_SERVICES), Instant::now())
        .expect("first build");
    if vhds {
        let view = View::Vhds {
            bind: None,
            locality: None,
        };
        black_box(base.resources_for(ResourceType::VirtualHost, view));
    }
    let (host, added) = merged(MEDIUM_SERVICES, 0);
    let name = format!(
        "snapshot build after one service add (medium, {} VHDS client)",
        if vhds { "a" } else { "no" }
    );
    c.bench_function(&name, |b| {
        b.iter_custom(|iters| {
            let mut took = Duration::ZERO;
            for _ in 0..iters {
                let change = vec![(host.clone(), added.clone())];
                let started = Instant::now();
                black_box(builder.apply(change, Instant::now()));
                took += started.elapsed();
                builder.apply(vec![(host.clone(), None)], Instant::now());
            }
            took
        })
    });
}

fn benches(c: &mut Criterion) {
    service_add(c, false);
    service_add(c, true);
    let all = mesh(SERVICES);
    let mut g = c.benchmark_group("large mesh (10,000×2×10)");
    g.sample_size(10);
    g.bench_function("snapshot build from scratch", |b| {
        b.iter_batched(
            || all.clone(),
            |hosts| {
                let mut m = MeshBuilder::new(GenerateOptions::default());
                black_box(m.apply(hosts, Instant::now()))
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();

    let mut builder = MeshBuilder::new(GenerateOptions::default());
    let base = builder
        .apply(all.clone(), Instant::now())
        .expect("first build");
    let mut generation = 0;
    c.bench_function("snapshot build after one endpoint change (large)", |b| {
        b.iter_batched(
            || {
                generation += 1;
                vec![merged(
                    generation as usize % SERVICES,
                    generation % 1000 + 1,
                )]
            },
            |change| black_box(builder.apply(change, Instant::now())),
            BatchSize::SmallInput,
        )
    });

    let one = merged(42, 0).1.expect("a service");
    c.bench_function("encode one service (2 clusters + 2 CLAs)", |b| {
        let options = GenerateOptions::default();
        b.iter(|| {
            let mut issues = Vec::new();
            let mut r = clusters_for(&one, &options, &mut issues);
            r.extend(load_assignments_for(&one, &options, &mut issues));
            black_box(r)
        })
    });

    let (a, b2) = (state(7, 0, "kubernetes"), state(7, 1, "consul"));
    c.bench_function("aggregate merge of one hostname from two registries", |b| {
        b.iter(|| black_box(merge([&a, &b2])))
    });

    // The delta stream's work after one endpoint change: diff the map it last sent from against
    // the new one (shared structure is skipped), for EDS and for CDS (which did not change).
    let mut builder = MeshBuilder::new(GenerateOptions::default());
    let before = builder.apply(all, Instant::now()).expect("first build");
    let after = builder
        .apply(vec![merged(5_000, 7)], Instant::now())
        .expect("a change");
    c.bench_function("delta diff for one stream after one endpoint change", |b| {
        b.iter(|| {
            let mut n = 0;
            for ty in [ResourceType::Cluster, ResourceType::Endpoint] {
                n += before
                    .resources(ty)
                    .entries
                    .diff(&after.resources(ty).entries)
                    .count();
            }
            black_box(n)
        })
    });
    drop(base);
}

criterion_group!(snapshot, benches);
criterion_main!(snapshot);
