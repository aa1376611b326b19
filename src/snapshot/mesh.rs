//! From merged services to snapshots: regenerate only what a push request touched.
//!
//! Every Envoy resource has an owner: a hostname owns its clusters and load assignments, a port
//! owns its listener and route configuration. A push request names hostnames; their resources are
//! regenerated, and only when a service's attributes changed (not just its endpoints) are the
//! listener and routes of its old and new ports regenerated too. Resources an owner no longer
//! produces are removed. Config issues are tracked per owner the same way, so an issue disappears
//! exactly when its input is fixed.
//!
//! The builder runs on a blocking thread (encoding a large mesh is CPU work) and publishes each
//! snapshot to the [`SnapshotStore`] before telling the aggregate it may send the next request.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, watch};
use tracing::{info, warn};
use tributary_registries::rules::{Rule, RuleSet};
use tributary_registries::{Hostname, ServicePort};

use super::listeners::{L4Index, ListenerInputs, PortIndex};
use super::{BuildInput, Snapshot, SnapshotBuilder, SnapshotStore};
use crate::aggregate::{MergedService, PushRequest};
use crate::envoy::rules::{self, RouteContext, RuleIndex, TrafficOptions};
use crate::envoy::{self, ConfigIssue, EncodedResource, GenerateOptions, ResourceType};
use crate::mcp::{self, McpSettings};

/// The default listener bind address; other addresses are per-node variants.
const DEFAULT_BIND: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

/// What generated a resource or an issue.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Owner {
    /// Clusters and load assignments of one service, and its MCP resources.
    Host(Hostname),
    /// The listener and route configuration of one port.
    Port(u16),
    /// The API listeners (proxyless gRPC) of one service.
    Api(Hostname),
}

/// Turns merged services into snapshots, incrementally.
pub struct MeshBuilder {
    snapshots: SnapshotBuilder,
    options: GenerateOptions,
    services: HashMap<Hostname, Arc<MergedService>>,
    ports: PortIndex,
    produced: HashMap<Owner, Vec<(ResourceType, Arc<str>)>>,
    issues: BTreeMap<Owner, Vec<ConfigIssue>>,
    /// The traffic rules in force, indexed by host.
    rules: RuleIndex,
    traffic: TrafficOptions,
    /// The L4 routes of the TCP ports that have some (kept for listeners of other bind addresses).
    l4: L4Index,
    /// The MCP collections to build for istiod; `None` when not served.
    mcp: Option<McpSettings>,
}

impl MeshBuilder {
    /// A builder with an empty mesh.
    pub fn new(options: GenerateOptions) -> Self {
        Self {
            snapshots: SnapshotBuilder::new(),
            options,
            services: HashMap::new(),
            ports: PortIndex::new(),
            produced: HashMap::new(),
            issues: BTreeMap::new(),
            rules: RuleIndex::default(),
            traffic: TrafficOptions::default(),
            l4: L4Index::new(),
            mcp: None,
        }
    }

    /// Also builds each service's MCP resources (ServiceEntry, WorkloadEntries) for istiod, when
    /// `settings.enabled`.
    pub fn with_mcp(mut self, settings: McpSettings) -> Self {
        self.mcp = settings.enabled.then_some(settings);
        self
    }

    /// Sets what rules generate that they do not say themselves (istiod's default retries).
    pub fn with_traffic_options(mut self, traffic: TrafficOptions) -> Self {
        self.traffic = traffic;
        self
    }

    /// Applies one push request's hostnames; returns the new snapshot, or `None` if the resources,
    /// services and issues all came out identical (nothing to push).
    pub fn apply(
        &mut self,
        hosts: Vec<(Hostname, Option<Arc<MergedService>>)>,
        triggered_at: Instant,
    ) -> Option<Arc<Snapshot>> {
        let mut input = BuildInput {
            triggered_at: Some(triggered_at),
            ..Default::default()
        };
        let mut dirty_ports = BTreeSet::new();
        let mut issues_changed = false;
        for (host, new) in hosts {
            // A name a VirtualService routes as external becomes (or stops being) a service: the
            // ports its external virtual host is on, before and after, change.
            let presence_changes = self.services.contains_key(&host) != new.is_some();
            if presence_changes {
                dirty_ports.extend(self.external_ports(&self.rules, host.as_str()));
            }
            let old = match &new {
                Some(n) => self.services.insert(host.clone(), Arc::clone(n)),
                None => self.services.remove(&host),
            };
            self.index_ports(&host, old.as_deref(), new.as_ref(), &mut dirty_ports);
            if presence_changes {
                dirty_ports.extend(self.external_ports(&self.rules, host.as_str()));
            }
            issues_changed |= self.regenerate_host(&host, new.as_ref(), &mut input);
            input.services.push((host, new));
        }
        self.finish(input, dirty_ports, issues_changed)
    }

    /// Replaces the traffic rules; regenerates what the rules that changed touch: the clusters
    /// and load assignments of the hosts whose DestinationRule changed, the routes of the ports
    /// of hosts whose VirtualService changed (and, when a DestinationRule changed, of every port
    /// with a VirtualService, whose routes may hash by it), and the ports a VirtualService for a
    /// name no registry knows routes on. A port's listener is regenerated with its routes (TCP
    /// routes and idle timeouts live there). `None` when nothing came out
    /// different, or when nothing has been built yet (the first push carries the rules).
    pub fn set_rules(
        &mut self,
        rules: Arc<RuleSet>,
        triggered_at: Instant,
    ) -> Option<Arc<Snapshot>> {
        let index = RuleIndex::new(&rules);
        let old = std::mem::replace(&mut self.rules, index);
        let mut hosts = Vec::new();
        let mut dirty_ports = BTreeSet::new();
        let mut any_dr_changed = false;
        for (host, svc) in &self.services {
            let ports = svc.service.ports.iter().map(|p| p.port);
            if !same(
                old.destination_rule(host),
                self.rules.destination_rule(host),
            ) {
                hosts.push((host.clone(), Arc::clone(svc)));
                dirty_ports.extend(ports.clone());
                any_dr_changed = true;
            }
            if !same(old.virtual_service(host), self.rules.virtual_service(host)) {
                dirty_ports.extend(ports);
            }
        }
        // VirtualServices for names no registry knows: the ports they route on, before and after.
        let names: BTreeSet<&str> = old
            .virtual_service_names()
            .chain(self.rules.virtual_service_names())
            .map(|(n, _)| n)
            .collect();
        for name in names {
            let (was, is) = (
                old.virtual_service_exact(name),
                self.rules.virtual_service_exact(name),
            );
            if !same(was, is) || any_dr_changed {
                dirty_ports.extend(self.external_ports(&old, name));
                dirty_ports.extend(self.external_ports(&self.rules, name));
            }
        }
        if any_dr_changed {
            for (host, svc) in &self.services {
                if self.rules.virtual_service(host).is_some() {
                    dirty_ports.extend(svc.service.ports.iter().map(|p| p.port));
                }
            }
        }
        // Nothing built yet: the first push carries the rules.
        self.snapshots.current()?;
        let mut input = BuildInput {
            triggered_at: Some(triggered_at),
            ..Default::default()
        };
        let mut issues_changed = false;
        for (host, svc) in hosts {
            issues_changed |= self.regenerate_host(&host, Some(&svc), &mut input);
        }
        self.finish(input, dirty_ports, issues_changed)
    }

    /// The ports of the external virtual hosts of `name` under `rules` (see
    /// [`rules::external_ports`]).
    fn external_ports(&self, rules: &RuleIndex, name: &str) -> BTreeSet<u16> {
        let ctx = RouteContext {
            port: 0,
            services: &self.services,
            rules,
            options: &self.traffic,
        };
        rules::external_ports(&ctx, name)
    }

    /// Regenerates the clusters, load assignments, MCP resources and API listeners of `host`;
    /// whether its issues changed.
    fn regenerate_host(
        &mut self,
        host: &Hostname,
        svc: Option<&Arc<MergedService>>,
        input: &mut BuildInput,
    ) -> bool {
        let mut issues = Vec::new();
        let mut resources = Vec::new();
        if let Some(svc) = svc {
            let rule = self.rules.destination_rule(host);
            resources = rules::clusters_with_rule(svc, rule, &self.options, &mut issues);
            resources.extend(rules::load_assignments_with_rule(
                svc,
                rule,
                &self.options,
                &mut issues,
            ));
            if let Some(settings) = &self.mcp {
                resources.extend(mcp::resources_for(svc, settings));
            }
        }
        self.replace(Owner::Host(host.clone()), resources, input);
        let api = svc.map(|s| envoy::api_listeners_for(s));
        self.replace(Owner::Api(host.clone()), api.unwrap_or_default(), input);
        self.set_issues(Owner::Host(host.clone()), issues)
    }

    /// Regenerates the dirty ports' listeners and routes, then builds.
    fn finish(
        &mut self,
        mut input: BuildInput,
        dirty_ports: BTreeSet<u16>,
        mut issues_changed: bool,
    ) -> Option<Arc<Snapshot>> {
        for &port in &dirty_ports {
            let services: Vec<&MergedService> = self
                .ports
                .get(&port)
                .map(|m| m.values().map(|s| &**s).collect())
                .unwrap_or_default();
            let mut issues = Vec::new();
            let mut resources = Vec::new();
            let ctx = RouteContext {
                port,
                services: &self.services,
                rules: &self.rules,
                options: &self.traffic,
            };
            let l4 = rules::l4_routes_for_port(port, &services, &ctx, &mut issues).map(Arc::new);
            if !services.is_empty() {
                resources.extend(envoy::listener_with_l4(
                    port,
                    &services,
                    DEFAULT_BIND,
                    l4.as_deref(),
                    &mut issues,
                ));
                let rule_issues = RefCell::new(Vec::new());
                let source = |svc: &MergedService, p: &ServicePort| {
                    rules::routes_for(svc, p, &ctx, &mut rule_issues.borrow_mut())
                };
                let extra = rules::external_virtual_hosts(&ctx, &mut rule_issues.borrow_mut());
                resources.extend(envoy::route_config_with_extra(
                    port,
                    &services,
                    &source,
                    extra,
                    &mut issues,
                ));
                issues.extend(rule_issues.into_inner());
            }
            match l4 {
                Some(l4) => self.l4.insert(port, l4),
                None => self.l4.remove(&port),
            };
            self.replace(Owner::Port(port), resources, &mut input);
            issues_changed |= self.set_issues(Owner::Port(port), issues);
        }
        if issues_changed {
            input.issues = Some(self.issues.values().flatten().cloned().collect());
        }
        // Every build hands the snapshot the current index, not only builds that dirtied a port:
        // an endpoint-only change still replaced its services' `Arc`s in the index, and a
        // snapshot keeping the index of the last port change would keep every service of that
        // time alive beside the current ones, a whole second copy of the mesh's endpoints after
        // the first endpoint change (MEM-1). The index is persistent, so this copy is O(1).
        input.listener_inputs = Some(Arc::new(ListenerInputs {
            by_port: self.ports.clone(),
            l4: self.l4.clone(),
        }));
        self.snapshots.build(input)
    }

    /// Keeps the port index current. Ports whose set of services or whose services' attributes
    /// changed are marked dirty; an endpoint-only change marks nothing.
    fn index_ports(
        &mut self,
        host: &Hostname,
        old: Option<&MergedService>,
        new: Option<&Arc<MergedService>>,
        dirty: &mut BTreeSet<u16>,
    ) {
        let ports_of = |s: Option<&MergedService>| -> BTreeSet<u16> {
            s.map(|s| s.service.ports.iter().map(|p| p.port).collect())
                .unwrap_or_default()
        };
        let new_ref = new.map(|n| &**n);
        let attrs_changed = match (old, new_ref) {
            (Some(o), Some(n)) => o.service != n.service,
            (None, None) => false,
            _ => true,
        };
        let old_ports = ports_of(old);
        let new_ports = ports_of(new_ref);
        for port in old_ports.difference(&new_ports) {
            if let Some(on_port) = self.ports.get_mut(port) {
                on_port.remove(host);
                if on_port.is_empty() {
                    self.ports.remove(port);
                }
            }
        }
        if let Some(n) = new {
            for &port in &new_ports {
                self.ports
                    .entry(port)
                    .or_default()
                    .insert(host.clone(), Arc::clone(n));
            }
        }
        if attrs_changed {
            dirty.extend(old_ports.union(&new_ports));
        }
    }

    /// Replaces what `owner` produces with `resources`, removing what it no longer produces.
    fn replace(&mut self, owner: Owner, resources: Vec<EncodedResource>, input: &mut BuildInput) {
        let names: Vec<(ResourceType, Arc<str>)> = resources
            .iter()
            .map(|r| (r.ty, Arc::clone(&r.name)))
            .collect();
        let api = matches!(owner, Owner::Api(_));
        let old = match names.is_empty() {
            true => self.produced.remove(&owner),
            false => self.produced.insert(owner, names.clone()),
        };
        for gone in old.into_iter().flatten() {
            if !names.contains(&gone) {
                match api {
                    true => input.api_removes.push(gone.1),
                    false => input.removes.push(gone),
                }
            }
        }
        match api {
            true => input.api_upserts.extend(resources),
            false => input.upserts.extend(resources),
        }
    }

    /// Records `owner`'s issues; whether they differ from before.
    fn set_issues(&mut self, owner: Owner, issues: Vec<ConfigIssue>) -> bool {
        for issue in issues
            .iter()
            .filter(|i| !self.issues.get(&owner).is_some_and(|old| old.contains(i)))
        {
            warn!(object = %issue.object, field = %issue.field, message = %issue.message, "config issue");
        }
        let old = match issues.is_empty() {
            true => self.issues.remove(&owner),
            false => self.issues.insert(owner, issues.clone()),
        };
        old.unwrap_or_default() != issues
    }
}

/// Whether two lookups found the same rule (by content: a source may rebuild unchanged rules).
fn same<T: PartialEq>(a: Option<&Arc<Rule<T>>>, b: Option<&Arc<Rule<T>>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b) || **a == **b,
        (None, None) => true,
        _ => false,
    }
}

/// What the builder task works on next.
enum Work {
    Push(PushRequest),
    Rules(Arc<RuleSet>),
}

/// The builder task: applies push requests and rule changes one at a time and publishes the
/// snapshots. `rules` holds the traffic rules of every config source (a sender that is dropped
/// leaves the last rules in force).
pub async fn run_builder(
    mut requests: mpsc::Receiver<PushRequest>,
    mut rules: watch::Receiver<Arc<RuleSet>>,
    store: SnapshotStore,
    mut mesh: MeshBuilder,
) {
    let initial = Arc::clone(&rules.borrow_and_update());
    mesh.set_rules(initial, Instant::now());
    let mut rules_open = true;
    loop {
        let work = tokio::select! {
            request = requests.recv() => match request {
                Some(r) => Work::Push(r),
                None => return,
            },
            changed = rules.changed(), if rules_open => match changed {
                Ok(()) => Work::Rules(Arc::clone(&rules.borrow_and_update())),
                Err(_) => {
                    rules_open = false;
                    continue;
                }
            },
        };
        let (host_count, triggered_at) = match &work {
            Work::Push(r) => (r.hosts.len(), r.triggered_at),
            Work::Rules(_) => (0, Instant::now()),
        };
        let started = Instant::now();
        let Ok((back, snapshot, done)) = tokio::task::spawn_blocking(move || match work {
            Work::Push(request) => {
                let PushRequest { hosts, done, .. } = request;
                let snapshot = mesh.apply(hosts, triggered_at);
                (mesh, snapshot, Some(done))
            }
            Work::Rules(set) => {
                let snapshot = mesh.set_rules(set, triggered_at);
                (mesh, snapshot, None)
            }
        })
        .await
        else {
            warn!("snapshot build panicked; stopping the builder");
            return;
        };
        mesh = back;
        let took = started.elapsed();
        super::metrics::built(took);
        match snapshot {
            Some(snapshot) => {
                let first = !store.is_ready();
                store.publish(Arc::clone(&snapshot));
                let counts = ResourceType::PUSH_ORDER.map(|t| snapshot.resources(t).len());
                if first {
                    info!(
                        clusters = counts[0],
                        endpoints = counts[1],
                        listeners = counts[2],
                        routes = counts[3],
                        build_ms = took.as_millis() as u64,
                        "first snapshot published; serving xDS"
                    );
                }
                tracing::debug!(
                    seq = snapshot.seq,
                    hosts = host_count,
                    build_ms = took.as_millis() as u64,
                    "snapshot published"
                );
            }
            None => tracing::debug!(hosts = host_count, "push produced no change"),
        }
        if let Some(done) = done {
            let _ = done.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use tributary_registries::Protocol;

    use super::*;
    use crate::envoy::fixtures::{ep, merged, port};
    use crate::snapshot::View;

    fn host(h: &str) -> Hostname {
        Hostname::new(h).unwrap()
    }

    fn svc(h: &str, p: u16, ips: &[&str]) -> Arc<MergedService> {
        Arc::new(merged(
            h,
            vec![port("http", p, Protocol::Http)],
            ips.iter().map(|ip| ep(ip)).collect(),
        ))
    }

    fn names(s: &Snapshot, ty: ResourceType) -> Vec<String> {
        s.resources(ty)
            .entries
            .keys()
            .map(|k| k.to_string())
            .collect()
    }

    fn touched(s: &Snapshot, ty: ResourceType) -> usize {
        let c = s.changes_since(ty, s.seq - 1).unwrap();
        c.changed.len() + c.removed.len()
    }

    #[test]
    fn a_service_becomes_cluster_endpoints_listener_and_route() {
        let mut m = MeshBuilder::new(GenerateOptions::default());
        let s = m
            .apply(
                vec![(host("a.test"), Some(svc("a.test", 80, &["10.0.0.1"])))],
                Instant::now(),
            )
            .unwrap();
        assert_eq!(names(&s, ResourceType::Cluster), ["outbound|80||a.test"]);
        assert_eq!(names(&s, ResourceType::Endpoint), ["outbound|80||a.test"]);
        assert_eq!(names(&s, ResourceType::Listener), ["0.0.0.0_80"]);
        assert_eq!(names(&s, ResourceType::Route), ["80"]);
        assert!(s.issues.is_empty());
    }

    #[test]
    fn endpoint_only_change_touches_only_eds() {
        // DELTA-8 / push cost follows the change: an endpoint change regenerates nothing else.
        let mut m = MeshBuilder::new(GenerateOptions::default());
        m.apply(
            vec![(host("a.test"), Some(svc("a.test", 80, &["10.0.0.1"])))],
            Instant::now(),
        );
        m.apply(
            vec![(host("b.test"), Some(svc("b.test", 80, &["10.0.1.1"])))],
            Instant::now(),
        );
        let s = m
            .apply(
                vec![(host("a.test"), Some(svc("a.test", 80, &["10.0.0.2"])))],
                Instant::now(),
            )
            .unwrap();
        assert_eq!(touched(&s, ResourceType::Endpoint), 1);
        assert_eq!(touched(&s, ResourceType::Cluster), 0);
        assert_eq!(touched(&s, ResourceType::Listener), 0);
        assert_eq!(touched(&s, ResourceType::Route), 0);
        assert!(
            m.apply(
                vec![(host("a.test"), Some(svc("a.test", 80, &["10.0.0.2"])))],
                Instant::now()
            )
            .is_none(),
            "identical input, no snapshot"
        );
    }

    #[test]
    fn an_endpoint_change_leaves_no_old_service_alive() {
        // MEM-1: the builder and the snapshot hold the current services only; the service an
        // endpoint change replaced is freed, not kept by the last port change's listener inputs.
        let mut m = MeshBuilder::new(GenerateOptions::default());
        let first = svc("a.test", 80, &["10.0.0.1"]);
        m.apply(
            vec![(host("a.test"), Some(Arc::clone(&first)))],
            Instant::now(),
        );
        let s = m
            .apply(
                vec![(host("a.test"), Some(svc("a.test", 80, &["10.0.0.2"])))],
                Instant::now(),
            )
            .unwrap();
        assert_eq!(
            Arc::strong_count(&first),
            1,
            "only this test still holds the replaced service"
        );
        drop(s);
    }

    #[test]
    fn moving_and_removing_services_removes_what_they_owned() {
        let mut m = MeshBuilder::new(GenerateOptions::default());
        m.apply(
            vec![(host("a.test"), Some(svc("a.test", 80, &["10.0.0.1"])))],
            Instant::now(),
        );
        let s = m
            .apply(
                vec![(host("a.test"), Some(svc("a.test", 81, &["10.0.0.1"])))],
                Instant::now(),
            )
            .unwrap();
        assert_eq!(names(&s, ResourceType::Cluster), ["outbound|81||a.test"]);
        assert_eq!(names(&s, ResourceType::Listener), ["0.0.0.0_81"]);
        assert_eq!(names(&s, ResourceType::Route), ["81"]);
        let s = m
            .apply(vec![(host("a.test"), None)], Instant::now())
            .unwrap();
        for ty in ResourceType::PUSH_ORDER {
            assert!(s.resources(ty).is_empty(), "{ty} left behind");
        }
        assert!(s.services.is_empty());
    }

    #[test]
    fn issues_appear_and_clear_with_their_input() {
        let mut m = MeshBuilder::new(GenerateOptions::default());
        let s = m
            .apply(
                vec![(host("a.test"), Some(svc("a.test", 80, &["not-an-ip"])))],
                Instant::now(),
            )
            .unwrap();
        assert_eq!(s.issues.len(), 1, "{:?}", s.issues);
        assert_eq!(s.issues[0].object, "a.test");
        let s = m
            .apply(
                vec![(host("a.test"), Some(svc("a.test", 80, &["10.0.0.1"])))],
                Instant::now(),
            )
            .unwrap();
        assert!(s.issues.is_empty());
    }

    #[test]
    fn listeners_for_another_bind_address_share_names_and_change_tracking() {
        let mut m = MeshBuilder::new(GenerateOptions::default());
        let s = m
            .apply(
                vec![(host("a.test"), Some(svc("a.test", 80, &["10.0.0.1"])))],
                Instant::now(),
            )
            .unwrap();
        let ip: IpAddr = "127.0.0.2".parse().unwrap();
        let bound = s.resources_for(ResourceType::Listener, View::Bound(ip));
        let default = s.resources(ResourceType::Listener);
        assert_eq!(
            bound.entries.keys().collect::<Vec<_>>(),
            default.entries.keys().collect::<Vec<_>>()
        );
        let (b, d) = (&bound.entries["0.0.0.0_80"], &default.entries["0.0.0.0_80"]);
        assert_eq!(b.changed_seq, d.changed_seq);
        assert_ne!(
            b.resource.hash, d.resource.hash,
            "the socket address differs"
        );
        assert_ne!(bound.version, default.version);
        assert!(
            Arc::ptr_eq(
                &bound,
                &s.resources_for(ResourceType::Listener, View::Bound(ip))
            ),
            "built once"
        );
    }

    #[test]
    fn api_listeners_are_a_set_of_their_own_tracked_with_listeners() {
        // PG-1, PG-4: named API listeners appear and go with their service; Envoy's view never
        // holds them; their changes are in the Listener history.
        let mut m = MeshBuilder::new(GenerateOptions::default());
        let s = m
            .apply(
                vec![(host("g.test"), Some(svc("g.test", 9000, &["10.0.0.1"])))],
                Instant::now(),
            )
            .unwrap();
        let api = s.resources_for(ResourceType::Listener, View::Proxyless);
        let api_names: Vec<&str> = api.entries.keys().map(|k| &**k).collect();
        assert_eq!(api_names, ["g.test", "g.test:9000"]);
        assert_eq!(names(&s, ResourceType::Listener), ["0.0.0.0_9000"]);
        assert_ne!(api.version, s.resources(ResourceType::Listener).version);
        let s = m
            .apply(vec![(host("g.test"), None)], Instant::now())
            .unwrap();
        assert!(s.api_listeners().is_empty());
        let c = s.changes_since(ResourceType::Listener, s.seq - 1).unwrap();
        let removed: Vec<&str> = c.removed.iter().map(|k| &**k).collect();
        assert_eq!(removed, ["0.0.0.0_9000", "g.test", "g.test:9000"]);
    }
}

#[cfg(test)]
mod rule_tests;
