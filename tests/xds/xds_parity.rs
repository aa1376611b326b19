//! DELTA-21, differential: random sequences of mock-registry operations and subscription changes;
//! after each quiescent point a SotW client and a delta client of the same node hold, resource by
//! resource, exactly the bytes of the newest snapshot. Failures are shrunk by proptest to a minimal
//! trace of operations.
//!
//! The operations are the mock registry's own (`ServiceSpec` converted by `to_state`), merged by the
//! aggregate's `merge` and built by the `MeshBuilder`, so the resources are the ones tributary really
//! generates; only the registry task and the debouncer are skipped, to run thousands of sequences
//! per CI run (`PARITY_CASES` overrides the count).
//!
//! The one documented difference between the protocols: a SotW client subscribed to an EDS or RDS
//! name that does not exist holds nothing or an empty `ClusterLoadAssignment` (SOTW-27) and is never
//! told when one goes away (SotW has no removals for those types), while a delta client is told
//! `removed_resources` (DELTA-9/10). So SotW EDS/RDS holdings are compared on the names that exist.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use proptest::prelude::*;
use prost::Message;
use tributary::aggregate::merge;
use tributary::envoy::{GenerateOptions, ResourceType};
use tributary::snapshot::MeshBuilder;
use tributary_registries::mock::{EndpointSpec, PortSpec, ServiceSpec};
use tributary_registries::{ClusterId, Health, Hostname, Origin, Protocol, RegistryId};

use crate::support::delta::DeltaClient;
use crate::support::resources::name_of;
use crate::support::*;

const HOSTS: [&str; 4] = [
    "a.parity.local",
    "b.parity.local",
    "c.parity.local",
    "d.parity.local",
];
const PORTS: [u16; 3] = [8080, 8081, 9000];
/// How long one quiescent point may take before the case fails. Generous for a loaded CI box;
/// only paid by a failing case.
const CONVERGE_LIMIT: Duration = Duration::from_secs(5);
const DEFAULT_CASES: u32 = 2000;

#[derive(Debug, Clone)]
enum Op {
    /// Creates or replaces a service: which ports (with HTTP or TCP) and which endpoints.
    Upsert {
        host: usize,
        ports: Vec<(usize, bool)>,
        endpoints: Vec<(u8, bool, u32)>,
    },
    Delete {
        host: usize,
    },
    /// Replaces the endpoints of a service, if it exists.
    SetEndpoints {
        host: usize,
        endpoints: Vec<(u8, bool, u32)>,
    },
    /// Subscribes (or unsubscribes) both clients to one EDS or RDS name.
    Toggle {
        eds: bool,
        name: usize,
    },
}

fn endpoints() -> impl Strategy<Value = Vec<(u8, bool, u32)>> {
    prop::collection::vec((1u8..6, prop::bool::weighted(0.8), 1u32..3), 0..4)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..HOSTS.len(), prop::collection::vec((0..PORTS.len(), any::<bool>()), 1..3), endpoints())
            .prop_map(|(host, ports, endpoints)| Op::Upsert { host, ports, endpoints }),
        2 => (0..HOSTS.len()).prop_map(|host| Op::Delete { host }),
        3 => (0..HOSTS.len(), endpoints()).prop_map(|(host, endpoints)| Op::SetEndpoints { host, endpoints }),
        2 => (any::<bool>(), 0..HOSTS.len() * PORTS.len()).prop_map(|(eds, name)| Op::Toggle { eds, name }),
    ]
}

fn eds_name(i: usize) -> String {
    format!(
        "outbound|{}||{}",
        PORTS[i % PORTS.len()],
        HOSTS[i / PORTS.len()]
    )
}

fn rds_name(i: usize) -> String {
    PORTS[i % PORTS.len()].to_string()
}

fn endpoint_specs(list: &[(u8, bool, u32)]) -> Vec<EndpointSpec> {
    let mut seen = std::collections::BTreeSet::new();
    list.iter()
        .filter(|(octet, ..)| seen.insert(*octet))
        .map(|&(octet, healthy, weight)| EndpointSpec {
            address: format!("10.0.0.{octet}"),
            ports: BTreeMap::new(),
            labels: BTreeMap::new(),
            locality: String::new(),
            health: if healthy {
                Health::Healthy
            } else {
                Health::Unhealthy
            },
            weight,
            network: String::new(),
            service_account: String::new(),
        })
        .collect()
}

/// The mesh under test: the mock-registry model and the builder that turns it into snapshots.
struct Mesh {
    origin: Origin,
    specs: BTreeMap<usize, ServiceSpec>,
    builder: MeshBuilder,
}

impl Mesh {
    fn new() -> Self {
        Self {
            origin: Origin {
                registry: RegistryId::new("parity"),
                cluster: ClusterId::new("local"),
            },
            specs: BTreeMap::new(),
            builder: MeshBuilder::new(GenerateOptions::default()),
        }
    }

    /// Applies a registry operation; returns the snapshot to publish, if anything changed.
    fn apply(&mut self, op: &Op) -> Option<Arc<tributary::snapshot::Snapshot>> {
        let host = match op {
            Op::Upsert {
                host,
                ports,
                endpoints,
            } => {
                let mut ps: Vec<PortSpec> = Vec::new();
                for &(p, http) in ports {
                    if ps.iter().all(|x| x.port != PORTS[p]) {
                        ps.push(PortSpec {
                            name: format!("p{}", PORTS[p]),
                            port: PORTS[p],
                            protocol: if http { Protocol::Http } else { Protocol::Tcp },
                        });
                    }
                }
                let spec = ServiceSpec {
                    hostname: HOSTS[*host].into(),
                    ports: ps,
                    resolution: Default::default(),
                    location: Default::default(),
                    vips: vec![],
                    labels: BTreeMap::new(),
                    service_accounts: vec![],
                    endpoints: endpoint_specs(endpoints),
                };
                self.specs.insert(*host, spec);
                *host
            }
            Op::Delete { host } => {
                self.specs.remove(host)?;
                *host
            }
            Op::SetEndpoints { host, endpoints } => {
                self.specs.get_mut(host)?.endpoints = endpoint_specs(endpoints);
                *host
            }
            Op::Toggle { .. } => return None,
        };
        let hostname = Hostname::new(HOSTS[host]).unwrap();
        let merged = match self.specs.get(&host) {
            Some(spec) => {
                let state = spec
                    .to_state(&self.origin)
                    .expect("generated specs are valid");
                Some(Arc::new(merge([&state]).expect("one registry knows it")))
            }
            None => None,
        };
        self.builder.apply(vec![(hostname, merged)], Instant::now())
    }
}

/// What a SotW client holds, per type: name → `Any` bytes.
#[derive(Default)]
struct SotwHeld([BTreeMap<String, Vec<u8>>; 4]);

impl SotwHeld {
    /// Applies a response; EDS/RDS resources not in `wanted` (a late response to a name just
    /// unsubscribed) are not kept.
    fn apply(&mut self, resp: &DiscoveryResponse, wanted: &[&str]) {
        let ty = ResourceType::from_type_url(&resp.type_url).unwrap();
        let held = &mut self.0[ty.index()];
        if ty.full_state_in_sotw() {
            held.clear();
        }
        for any in &resp.resources {
            let name = name_of(any);
            if ty.full_state_in_sotw() || wanted.contains(&name.as_str()) {
                held.insert(name, any.encode_to_vec());
            }
        }
    }

    /// Forgets what is no longer subscribed, as a client does.
    fn forget_unwanted(&mut self, ty: ResourceType, wanted: &[&str]) {
        self.0[ty.index()].retain(|n, _| wanted.contains(&n.as_str()));
    }
}

/// The two clients of one node and the names they subscribe to.
struct Clients {
    sotw: XdsClient,
    sotw_held: SotwHeld,
    sotw_nonce: [String; 4],
    delta: DeltaClient,
    eds: Vec<String>,
    rds: Vec<String>,
}

impl Clients {
    async fn open(s: &TestServer, eds: Vec<String>, rds: Vec<String>) -> Self {
        let mut c = Self {
            sotw: s.ads("parity").await,
            sotw_held: SotwHeld::default(),
            sotw_nonce: Default::default(),
            delta: s.delta_ads("parity").await,
            eds,
            rds,
        };
        // Subscriptions change while responses flow (see `late_responses_ok`).
        c.sotw.late_responses_ok = true;
        c.delta.late_responses_ok = true;
        c.sotw.subscribe(CDS, &[]).await;
        c.delta.subscribe(CDS, &[]).await;
        c.sotw.subscribe(LDS, &[]).await;
        c.delta.subscribe(LDS, &[]).await;
        let (eds, rds) = (c.eds.clone(), c.rds.clone());
        for (ty, names) in [(EDS, &eds), (RDS, &rds)] {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            c.sotw.subscribe(ty, &names).await;
            c.delta.subscribe(ty, &names).await;
        }
        c
    }

    fn names(&self, ty: ResourceType) -> Vec<&str> {
        let list = if ty == EDS { &self.eds } else { &self.rds };
        list.iter().map(String::as_str).collect()
    }

    async fn toggle(&mut self, eds: bool, name: String) {
        let ty = if eds { EDS } else { RDS };
        let list = if eds { &mut self.eds } else { &mut self.rds };
        let subscribe = match list.iter().position(|n| *n == name) {
            Some(i) => {
                list.remove(i);
                false
            }
            None => {
                list.push(name.clone());
                true
            }
        };
        let names: Vec<String> = self.names(ty).iter().map(|s| s.to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        self.sotw_held.forget_unwanted(ty, &names);
        let nonce = self.sotw_nonce[ty.index()].clone();
        self.sotw.request(ty, &names, "", &nonce).await;
        if subscribe {
            self.delta.request(ty, &[&name], &[], "").await;
        } else {
            self.delta.request(ty, &[], &[&name], "").await;
        }
    }

    /// Reads and acknowledges responses until both clients hold what `s`'s newest snapshot says
    /// they should; panics with the difference after [`CONVERGE_LIMIT`].
    async fn converge(&mut self, s: &TestServer, trace: &str) {
        let deadline = Instant::now() + CONVERGE_LIMIT;
        loop {
            let want = self.expected(s);
            let delta_ok = ResourceType::PUSH_ORDER.iter().all(|ty| {
                let got: BTreeMap<String, Vec<u8>> = self.delta.held[ty.index()]
                    .iter()
                    .map(|(n, h)| (n.clone(), h.any.clone()))
                    .collect();
                got == want[ty.index()]
            });
            let sotw_ok = ResourceType::PUSH_ORDER.iter().all(|ty| {
                let held = &self.sotw_held.0[ty.index()];
                if ty.full_state_in_sotw() {
                    *held == want[ty.index()]
                } else {
                    // Compared on the names that exist (see the module doc).
                    want[ty.index()]
                        .iter()
                        .all(|(n, bytes)| held.get(n) == Some(bytes))
                }
            });
            if delta_ok && sotw_ok {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "no convergence after {trace}\n delta ok: {delta_ok}, sotw ok: {sotw_ok}\n want: {:?}\n delta: {:?}\n sotw: {:?}",
                    summary(&want),
                    summary(
                        &self
                            .delta
                            .held
                            .clone()
                            .map(|m| m.into_iter().map(|(n, h)| (n, h.any)).collect())
                    ),
                    summary(&self.sotw_held.0),
                );
            }
            let wait = Duration::from_millis(50);
            tokio::select! {
                Some(resp) = self.sotw.next_within(wait) => self.on_sotw(resp).await,
                Some(resp) = self.delta.next_within(wait) => self.delta.ack(&resp).await,
                else => {}
            }
        }
    }

    /// Per type, what the client should hold as the snapshot's bytes: everything for CDS/LDS,
    /// the subscribed names that exist for EDS/RDS.
    fn expected(&self, s: &TestServer) -> [BTreeMap<String, Vec<u8>>; 4] {
        let snap = s.store.load().unwrap();
        let mut want: [BTreeMap<String, Vec<u8>>; 4] = Default::default();
        for ty in ResourceType::PUSH_ORDER {
            let res = snap.resources(ty);
            if ty.full_state_in_sotw() {
                for (name, e) in &res.entries {
                    want[ty.index()].insert(name.to_string(), e.resource.any_bytes().to_vec());
                }
            } else {
                for name in self.names(ty) {
                    if let Some(e) = res.get(name) {
                        want[ty.index()].insert(name.to_owned(), e.resource.any_bytes().to_vec());
                    }
                }
            }
        }
        want
    }

    /// Reads responses until none comes for a while, then checks the state again: nothing may
    /// arrive after convergence that spoils it.
    async fn settle(&mut self, s: &TestServer, trace: &str) {
        let quiet = Duration::from_millis(10);
        loop {
            tokio::select! {
                Some(resp) = self.sotw.next_within(quiet) => self.on_sotw(resp).await,
                Some(resp) = self.delta.next_within(quiet) => self.delta.ack(&resp).await,
                else => break,
            }
        }
        self.converge(s, trace).await;
    }

    async fn on_sotw(&mut self, resp: DiscoveryResponse) {
        let ty = ResourceType::from_type_url(&resp.type_url).unwrap();
        let names: Vec<String> = if ty.full_state_in_sotw() {
            vec![]
        } else {
            self.names(ty).iter().map(|s| s.to_string()).collect()
        };
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        self.sotw_held.apply(&resp, &names);
        self.sotw_nonce[ty.index()] = resp.nonce.clone();
        self.sotw.ack(&resp, &names).await;
    }
}

fn summary(m: &[BTreeMap<String, Vec<u8>>]) -> Vec<Vec<(String, u64)>> {
    m.iter()
        .map(|t| {
            t.iter()
                .map(|(n, b)| (n.clone(), xxhash_rust::xxh3::xxh3_64(b)))
                .collect()
        })
        .collect()
}

/// The server's wait for the EDS of added clusters (SOTW-31, `docs/traffic-rules.md`), off: these
/// clients keep EDS subscriptions of their own instead of following CDS as Envoy does, so every
/// cluster addition would hold listeners and routes for the whole wait, in thousands of cases.
/// Ordering is proven in `traffic_rules.rs`; this test is about bytes.
const EDS_WARM_WAIT: Duration = Duration::ZERO;

async fn run_case(initial_eds: Vec<usize>, initial_rds: Vec<usize>, ops: Vec<Op>) {
    let s = TestServer::start_with(tributary::xds::XdsOptions {
        eds_warm_wait: EDS_WARM_WAIT,
        ..Default::default()
    })
    .await;
    let mut mesh = Mesh::new();
    let first = mesh
        .builder
        .apply(vec![], Instant::now())
        .expect("first build");
    s.store.publish(first);
    let mut eds: Vec<String> = initial_eds.into_iter().map(eds_name).collect();
    let mut rds: Vec<String> = initial_rds.into_iter().map(rds_name).collect();
    eds.dedup();
    rds.dedup();
    let mut c = Clients::open(&s, eds, rds).await;
    c.converge(&s, "start").await;
    let mut trace = String::new();
    for op in &ops {
        trace += &format!("{op:?}; ");
        match op {
            Op::Toggle { eds, name } => {
                let n = if *eds {
                    eds_name(*name)
                } else {
                    rds_name(*name)
                };
                c.toggle(*eds, n).await;
            }
            _ => {
                if let Some(snap) = mesh.apply(op) {
                    s.store.publish(snap);
                }
            }
        }
        c.converge(&s, &trace).await;
    }
    c.settle(&s, &trace).await;
}

fn cases() -> u32 {
    std::env::var("PARITY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn delta_21_sotw_and_delta_clients_converge_to_identical_bytes(
        initial_eds in prop::collection::btree_set(0..HOSTS.len() * PORTS.len(), 0..6),
        initial_rds in prop::collection::btree_set(0..PORTS.len(), 0..3),
        ops in prop::collection::vec(op(), 1..12),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run_case(
            initial_eds.into_iter().collect(),
            initial_rds.into_iter().collect(),
            ops,
        ));
    }
}
