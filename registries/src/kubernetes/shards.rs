//! One cluster's services as the model sees them, kept up to date from its stores.
//!
//! On every watch event only the services it can affect are converted again: a Service itself,
//! the Service an EndpointSlice belongs to (before and after the event), the Services whose
//! endpoints point at a Pod or run on a Node. After a (re)list every service is converted again.
//! Either way a service is reported only if its converted state differs from the last one
//! reported, so duplicate events, status-only writes and no-change relists report nothing
//! (REG-3, REG-14).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::convert::{self, Context, PodKey};
use super::watch::{Kind, Stores};
use crate::model::{Hostname, ServiceState};

/// `(namespace, name)` of a Service.
type SvcKey = (String, String);

/// A hostname's new state in this cluster, or `None` when the cluster no longer has it.
pub(crate) type ShardChange = (Hostname, Option<ServiceState>);

/// What one service's conversion depended on.
#[derive(Debug, Default)]
struct Deps {
    pods: BTreeSet<PodKey>,
    nodes: BTreeSet<String>,
    pending: usize,
}

/// The converted services of one cluster and the indexes to find what an event affects.
#[derive(Debug)]
pub(crate) struct Shards {
    ctx: Context,
    /// Service → its EndpointSlices' names.
    slices_of: HashMap<SvcKey, BTreeSet<String>>,
    /// EndpointSlice (namespace, name) → its Service's name.
    owner_of: HashMap<(String, String), String>,
    deps: HashMap<SvcKey, Deps>,
    pod_users: HashMap<PodKey, BTreeSet<SvcKey>>,
    node_users: HashMap<String, BTreeSet<SvcKey>>,
    /// The last state reported per service.
    states: BTreeMap<SvcKey, ServiceState>,
}

impl Shards {
    pub(crate) fn new(ctx: Context) -> Self {
        Self {
            ctx,
            slices_of: HashMap::new(),
            owner_of: HashMap::new(),
            deps: HashMap::new(),
            pod_users: HashMap::new(),
            node_users: HashMap::new(),
            states: BTreeMap::new(),
        }
    }

    /// Endpoints held back because their pod is not known yet, over all services.
    pub(crate) fn pending_pods(&self) -> usize {
        self.deps.values().map(|d| d.pending).sum()
    }

    fn index_slice(&mut self, ns: &str, name: &str, owner: Option<String>) {
        let key = (ns.to_string(), name.to_string());
        if let Some(old) = self.owner_of.remove(&key)
            && let Some(set) = self.slices_of.get_mut(&(ns.to_string(), old))
        {
            set.remove(name);
        }
        if let Some(owner) = owner {
            self.slices_of
                .entry((ns.to_string(), owner.clone()))
                .or_default()
                .insert(name.to_string());
            self.owner_of.insert(key, owner);
        }
    }

    /// Converts everything again (after a list or relist of any kind).
    pub(crate) fn rebuild(&mut self, stores: &Stores) -> Vec<ShardChange> {
        self.slices_of.clear();
        self.owner_of.clear();
        for store in &stores.slices {
            for slice in store.state() {
                let ns = slice.metadata.namespace.clone().unwrap_or_default();
                let name = slice.metadata.name.clone().unwrap_or_default();
                let owner = slice
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(convert::SERVICE_NAME_LABEL))
                    .cloned();
                self.index_slice(&ns, &name, owner);
            }
        }
        let mut keys: BTreeSet<SvcKey> = self.states.keys().cloned().collect();
        for store in &stores.services {
            for svc in store.state() {
                keys.insert((
                    svc.metadata.namespace.clone().unwrap_or_default(),
                    svc.metadata.name.clone().unwrap_or_default(),
                ));
            }
        }
        self.recompute(stores, keys)
    }

    /// Converts what one changed object can affect.
    pub(crate) fn touched(
        &mut self,
        stores: &Stores,
        kind: Kind,
        ns: &str,
        name: &str,
        owner: Option<String>,
    ) -> Vec<ShardChange> {
        let mut keys = BTreeSet::new();
        match kind {
            Kind::Services => {
                keys.insert((ns.to_string(), name.to_string()));
            }
            Kind::EndpointSlices => {
                if let Some(old) = self.owner_of.get(&(ns.to_string(), name.to_string())) {
                    keys.insert((ns.to_string(), old.clone()));
                }
                let present = stores.slice(ns, name).is_some();
                let owner = owner.filter(|_| present);
                if let Some(o) = &owner {
                    keys.insert((ns.to_string(), o.clone()));
                }
                self.index_slice(ns, name, owner);
            }
            Kind::Pods => {
                let key = (ns.to_string(), name.to_string());
                keys.extend(self.pod_users.get(&key).into_iter().flatten().cloned());
            }
            Kind::Nodes => {
                keys.extend(self.node_users.get(name).into_iter().flatten().cloned());
            }
        }
        self.recompute(stores, keys)
    }

    fn forget_deps(&mut self, key: &SvcKey) {
        let Some(old) = self.deps.remove(key) else {
            return;
        };
        for p in old.pods {
            if let Some(users) = self.pod_users.get_mut(&p) {
                users.remove(key);
                if users.is_empty() {
                    self.pod_users.remove(&p);
                }
            }
        }
        for n in old.nodes {
            if let Some(users) = self.node_users.get_mut(&n) {
                users.remove(key);
                if users.is_empty() {
                    self.node_users.remove(&n);
                }
            }
        }
    }

    fn recompute(&mut self, stores: &Stores, keys: BTreeSet<SvcKey>) -> Vec<ShardChange> {
        let mut out = Vec::new();
        for key in keys {
            self.forget_deps(&key);
            let converted = stores.service(&key.0, &key.1).and_then(|svc| {
                let slices: Vec<_> = self
                    .slices_of
                    .get(&key)
                    .into_iter()
                    .flatten()
                    .filter_map(|s| stores.slice(&key.0, s))
                    .collect();
                match convert::convert(&svc, &slices, stores, &self.ctx) {
                    Ok(c) => Some(c),
                    Err(e) => {
                        tracing::warn!(namespace = %key.0, service = %key.1, error = %e,
                            "service name does not make a valid hostname; not served");
                        None
                    }
                }
            });
            match converted {
                Some(c) => {
                    for p in &c.pods {
                        self.pod_users
                            .entry(p.clone())
                            .or_default()
                            .insert(key.clone());
                    }
                    for n in &c.nodes {
                        self.node_users
                            .entry(n.clone())
                            .or_default()
                            .insert(key.clone());
                    }
                    self.deps.insert(
                        key.clone(),
                        Deps {
                            pods: c.pods,
                            nodes: c.nodes,
                            pending: c.pending_pods,
                        },
                    );
                    if self.states.get(&key) != Some(&c.state) {
                        out.push((c.state.service.hostname.clone(), Some(c.state.clone())));
                        self.states.insert(key, c.state);
                    }
                }
                None => {
                    if let Some(old) = self.states.remove(&key) {
                        out.push((old.service.hostname, None));
                    }
                }
            }
        }
        out
    }
}
