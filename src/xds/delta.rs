//! Incremental (delta) xDS: the hooks `stream.rs` runs for `DeltaAggregatedResources` and the
//! per-type `Delta*` methods, served from the same snapshot and the same encoded resource bytes as
//! state-of-the-world (DELTA-21).
//!
//! A delta response carries only what changed for the client (DELTA-8) and names what went away in
//! `removed_resources` (DELTA-9). Each resource's `version` is its content hash, the same on every
//! replica and after restarts (DELTA-13), so a reconnecting client's `initial_resource_versions`
//! are compared meaningfully and it receives exactly what it lacks (DELTA-11/12). Streams are only
//! accepted once registries have synced, so that reconnect diff is never computed against a
//! partial mesh (TRANS-11).
//!
//! `state.rs` is the pure per-type protocol state (how what the client holds is tracked without
//! copying it is explained there). What follows CDS: over ADS, clusters a CDS response changed get
//! their EDS resent right after it: Envoy re-warms an updated cluster and waits for its assignment
//! (SOTW-32; Envoy issue 31535 shows the outage when a delta server leaves it out). A CDS response
//! told to hold removals defers them to the end of the push (SOTW-31); the clusters it added (not
//! in the map the previous one came from) go to the stream's warming gate (`warming.rs`). For a
//! VHDS view, an RDS response is followed by the virtual hosts of every route configuration it
//! carried (`vhds.rs`). Not supported: aliases and
//! resource locators (treated as unknown names, DELTA-15/18), TTLs (DELTA-20).

mod state;
mod vhds;

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use tonic::Status;

use super::body::Framed;
use super::cache::FullSetCache;
use super::connections::TypeStatus;
use super::diffs::DiffCache;
use super::metrics::InvalidReason;
use super::names::SharedNames;
use super::per_type::PerType;
use super::record::Sent;
use super::request::{Kind, MAX_NAMES_PER_REQUEST, check_names, refuse};
use super::response::{self, TooLarge};
use super::stream::Protocol;
use super::subscription::Known;
use crate::envoy::ResourceType;
use crate::snapshot::{Snapshot, TypeResources, TypeVersion, View};
use state::{DeltaBuilt, DeltaState, Request};

/// The delta side of one stream.
#[derive(Default)]
pub(crate) struct Delta {
    types: PerType<DeltaState>,
}

impl Protocol for Delta {
    type Request = DeltaDiscoveryRequest;
    type Built = DeltaBuilt;
    const DELTA: bool = true;
    const NONCE_MARK: &'static str = "-d";

    fn node(req: &DeltaDiscoveryRequest) -> Option<&Node> {
        req.node.as_ref()
    }

    fn type_url(req: &DeltaDiscoveryRequest) -> &str {
        &req.type_url
    }

    fn response_nonce(req: &DeltaDiscoveryRequest) -> &str {
        &req.response_nonce
    }

    fn error(req: &DeltaDiscoveryRequest) -> Option<&str> {
        req.error_detail.as_ref().map(|e| e.message.as_str())
    }

    fn check(req: &DeltaDiscoveryRequest) -> Result<(), Status> {
        let irv = &req.initial_resource_versions;
        check_names(
            req.resource_names_subscribe.len() + req.resource_names_unsubscribe.len() + irv.len(),
            req.resource_names_subscribe
                .iter()
                .chain(&req.resource_names_unsubscribe)
                .chain(irv.keys())
                .map(String::as_str),
        )
    }

    fn apply(
        &mut self,
        ty: ResourceType,
        req: &DeltaDiscoveryRequest,
        known: Option<&TypeResources>,
        shared: &SharedNames,
        conn: &str,
    ) -> Result<Kind, Status> {
        if !req.resource_locators_subscribe.is_empty()
            || !req.resource_locators_unsubscribe.is_empty()
        {
            // DELTA-18: not implemented; say so and carry on with the names.
            tracing::info!(conn, r#type = %ty, "ignoring resource_locators (not supported)");
        }
        let state = self.types.entry(ty);
        let kind = state.on_request(&Request {
            nonce: &req.response_nonce,
            subscribe: &req.resource_names_subscribe,
            unsubscribe: &req.resource_names_unsubscribe,
            initial_versions: Some(&req.initial_resource_versions),
            error: Self::error(req),
            known: Known {
                resources: known,
                sets: Some(shared),
            },
        });
        if state.sub().names.len() > MAX_NAMES_PER_REQUEST {
            // SEC-9: delta subscriptions accumulate across requests; cap the total as SotW caps
            // one request, so no client grows the server's memory without bound.
            return Err(refuse(
                InvalidReason::BadNames,
                format!(
                    "{} names subscribed to {ty}, over the limit of {MAX_NAMES_PER_REQUEST}",
                    state.sub().names.len()
                ),
            ));
        }
        Ok(kind)
    }

    fn status(&self, ty: ResourceType) -> TypeStatus {
        self.types
            .get(ty)
            .map(DeltaState::status)
            .unwrap_or_default()
    }

    fn has_work(&self, ty: ResourceType, latest_seq: u64) -> bool {
        self.types.get(ty).is_some_and(|s| s.has_work(latest_seq))
    }

    fn would_send(&self, ty: ResourceType, snap: &Snapshot, view: View, diffs: &DiffCache) -> bool {
        self.types
            .get(ty)
            .is_some_and(|s| s.would_send(snap, view, diffs))
    }

    fn build(
        &mut self,
        ty: ResourceType,
        snap: &Snapshot,
        view: View,
        hold_removals: bool,
        _full_sets: &FullSetCache,
        diffs: &DiffCache,
    ) -> Option<DeltaBuilt> {
        let built = self
            .types
            .get_mut(ty)?
            .build(snap, view, hold_removals, diffs);
        if ty == ResourceType::Route
            && view.vhds()
            && let Some(routes) = &built
        {
            let virtual_hosts = self.types.entry(ResourceType::VirtualHost);
            vhds::owe_after_routes(virtual_hosts, routes, snap, view);
        }
        built
    }

    fn shared_nonce(built: &DeltaBuilt) -> Option<Arc<str>> {
        built.shared.as_ref().map(|s| Arc::clone(&s.nonce))
    }

    fn version(built: &DeltaBuilt) -> TypeVersion {
        built.version
    }

    fn frame(
        ty: ResourceType,
        type_url: &str,
        built: &mut DeltaBuilt,
        nonce: &str,
        version: &str,
        view: View,
        full_sets: &FullSetCache,
    ) -> Result<(Framed, usize), TooLarge> {
        let frame = || {
            let entries = match &built.whole_set {
                Some(res) => vec![full_sets.get_delta(ty, view, res)],
                None => built
                    .resources
                    .iter()
                    .flat_map(|r| r.delta_entry())
                    .collect(),
            };
            response::frame_delta(ty, type_url, version, nonce, &built.removed, entries)
        };
        match &built.shared {
            // The same bytes for every stream that sends it, its nonce included.
            Some(shared) => shared.framed(type_url, frame),
            None => frame(),
        }
    }

    fn change_driven(built: &DeltaBuilt) -> bool {
        built.change_driven
    }

    fn after_cds(
        &mut self,
        built: &DeltaBuilt,
        snap: &Arc<Snapshot>,
        view: View,
        ads: bool,
    ) -> Vec<Arc<str>> {
        if !ads {
            return Vec::new();
        }
        // SOTW-32 for delta: re-warmed clusters need their assignment again.
        let eds = self.types.entry(ResourceType::Endpoint);
        eds.owe(built.resources.iter().map(|r| Arc::clone(&r.name)));
        let Some(before) = built.previous().filter(|_| eds.sub().requested()) else {
            return Vec::new();
        };
        let cla = snap.resources_for(ResourceType::Endpoint, view);
        built
            .resources
            .iter()
            .map(|r| &r.name)
            .filter(|n| before.get(n).is_none() && cla.get(n).is_some())
            .cloned()
            .collect()
    }

    fn carried(built: &DeltaBuilt) -> impl Iterator<Item = &Arc<str>> {
        built
            .resources
            .iter()
            .map(|r| &r.name)
            .chain(&built.removed)
    }

    fn sent(&mut self, ty: ResourceType, nonce: Arc<str>, version: Arc<str>, built: DeltaBuilt) {
        if let Some(state) = self.types.get_mut(ty) {
            state.sent(Sent::now(nonce, built.version, version));
        }
    }

    fn end_cycle(&mut self) {
        self.types.entry(ResourceType::Cluster).release_deferred();
    }

    fn force_all(&mut self) {
        for t in self.types.iter_mut() {
            t.force_all();
        }
    }
}
