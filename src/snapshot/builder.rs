//! Builds each snapshot from the previous one plus what changed.
//!
//! Work is proportional to the change: persistent maps make the copy of the previous snapshot O(1),
//! each changed resource is an O(log n) update, and the type version is updated incrementally
//! ([`super::TypeVersion`]). A resource whose new encoding hashes the same as the old one is not a
//! change at all: it keeps its `changed_seq`, and no stream will send it again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use imbl::OrdMap;
use tributary_registries::Hostname;

use super::history::{ChangeSet, History};
use super::listeners::{BoundListeners, ListenerInputs};
use super::locality::LocatedEndpoints;
use super::{Entry, Snapshot, TypeResources};
use crate::aggregate::MergedService;
use crate::envoy::{ConfigIssue, EncodedResource, ResourceType};

/// What one build changes, at the level of encoded resources.
#[derive(Debug, Default)]
pub struct BuildInput {
    /// Resources to add or replace.
    pub upserts: Vec<EncodedResource>,
    /// Resources to remove, by type and name. Removing a name that is absent is a no-op.
    pub removes: Vec<(ResourceType, Arc<str>)>,
    /// API listeners (proxyless gRPC) to add or replace.
    pub api_upserts: Vec<EncodedResource>,
    /// API listeners to remove, by name.
    pub api_removes: Vec<Arc<str>>,
    /// Merged services that changed (for debug views); `None` removes the hostname.
    pub services: Vec<(Hostname, Option<Arc<MergedService>>)>,
    /// The complete list of current config issues, when it changed.
    pub issues: Option<Vec<ConfigIssue>>,
    /// What listener variants for other bind addresses are generated from, when it changed.
    pub listener_inputs: Option<Arc<ListenerInputs>>,
    /// When the first registry event behind this build arrived; `None` means now.
    pub triggered_at: Option<Instant>,
}

/// Produces the next snapshot from the previous one. Owned by the one task that builds snapshots.
#[derive(Default)]
pub struct SnapshotBuilder {
    prev: Option<Arc<Snapshot>>,
    /// Whether a VHDS client read one of our snapshots: shared with each of them, which raise it.
    vhds_demand: Arc<AtomicBool>,
}

impl SnapshotBuilder {
    /// A builder with nothing built yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The last snapshot built.
    pub fn current(&self) -> Option<&Arc<Snapshot>> {
        self.prev.as_ref()
    }

    /// Applies `input` to the previous snapshot. Returns the new snapshot, or `None` when nothing
    /// actually changed (no push must follow, SOTW-28); the very first build always returns one.
    pub fn build(&mut self, input: BuildInput) -> Option<Arc<Snapshot>> {
        let mut located = self
            .prev
            .as_ref()
            .map(|p| p.located.names())
            .unwrap_or_default();
        let (seq, mut types, history, mut services, issues, listener_inputs, mut api) =
            match &self.prev {
                Some(p) => (
                    p.seq + 1,
                    p.types.clone().map(|t| (*t).clone()),
                    p.history.clone(),
                    p.services.clone(),
                    Arc::clone(&p.issues),
                    p.listeners.inputs(),
                    (*p.api_listeners).clone(),
                ),
                None => (
                    1,
                    Default::default(),
                    History::default(),
                    OrdMap::new(),
                    Arc::new(Vec::new()),
                    Arc::new(ListenerInputs::default()),
                    TypeResources::default(),
                ),
            };
        let mut set = ChangeSet {
            seq,
            ..Default::default()
        };
        for (ty, name) in input.removes {
            if ty == ResourceType::Endpoint {
                located.remove(&name);
            }
            remove(&mut types[ty.index()], &mut set, ty, &name);
        }
        for resource in input.upserts {
            match resource.located {
                Some(_) => located.insert(Arc::clone(&resource.name)),
                None => located.remove(&resource.name),
            };
            upsert(&mut types[resource.ty.index()], &mut set, seq, resource);
        }
        let vhds = super::vhds::next(
            self.prev.as_ref().and_then(|p| p.vhds.get()),
            self.vhds_demand.load(Ordering::Relaxed),
            &types[ResourceType::Route.index()],
            &mut set,
            seq,
        );
        // API listeners share the Listener history: their names never collide with Envoy's.
        for name in input.api_removes {
            remove(&mut api, &mut set, ResourceType::Listener, &name);
        }
        for resource in input.api_upserts {
            upsert(&mut api, &mut set, seq, resource);
        }
        let resources_changed = ResourceType::ALL.iter().any(|&ty| !set.is_empty_for(ty));
        let mut other_changed = false;
        for (host, svc) in input.services {
            let changed = match svc {
                Some(s) => services
                    .insert(host, Arc::clone(&s))
                    .is_none_or(|old| *old != *s),
                None => services.remove(&host).is_some(),
            };
            other_changed |= changed;
        }
        let issues = match input.issues {
            Some(new) if *new != *issues => {
                other_changed = true;
                Arc::new(new)
            }
            _ => issues,
        };
        let listener_inputs = input.listener_inputs.unwrap_or(listener_inputs);
        if self.prev.is_some() && !resources_changed && !other_changed {
            return None;
        }
        let snapshot = Arc::new(Snapshot {
            seq,
            triggered_at: input.triggered_at.unwrap_or_else(Instant::now),
            types: types.map(Arc::new),
            history: history.with(set),
            services,
            issues,
            listeners: BoundListeners::new(listener_inputs),
            api_listeners: Arc::new(api),
            vhds: vhds.map_or_else(OnceLock::new, OnceLock::from),
            vhds_demand: Arc::clone(&self.vhds_demand),
            located: LocatedEndpoints::next(
                located,
                self.prev
                    .as_ref()
                    .map(|p| (&p.located, &p.types[ResourceType::Endpoint.index()])),
            ),
        });
        self.prev = Some(Arc::clone(&snapshot));
        Some(snapshot)
    }
}

pub(super) fn upsert(
    t: &mut TypeResources,
    set: &mut ChangeSet,
    seq: u64,
    resource: EncodedResource,
) {
    let ty = resource.ty;
    if let Some(old) = t.entries.get(&*resource.name) {
        if old.resource.hash == resource.hash {
            return;
        }
        t.version.remove(&old.resource.name, old.resource.hash);
    }
    t.version.add(&resource.name, resource.hash);
    let name = Arc::clone(&resource.name);
    set.changed[ty.index()].push(Arc::clone(&name));
    t.entries.insert(
        name,
        Entry {
            resource: Arc::new(resource),
            changed_seq: seq,
        },
    );
}

pub(super) fn remove(
    t: &mut TypeResources,
    set: &mut ChangeSet,
    ty: ResourceType,
    name: &Arc<str>,
) {
    if let Some(old) = t.entries.remove(&**name) {
        t.version.remove(&old.resource.name, old.resource.hash);
        set.removed[ty.index()].push(Arc::clone(name));
    }
}
