//! State-of-the-world xDS: the hooks `stream.rs` runs for `StreamAggregatedResources` and the
//! per-type `Stream*` methods (SOTW-1..37).
//!
//! `request.rs` reads a request leaving its `resource_names` in the frame (an unchanged EDS ACK
//! allocates nothing for them); `state.rs` is the pure per-type protocol state; this file maps a
//! request onto it, frames what it builds, and says what follows CDS: clusters a CDS response
//! added or changed have their EDS answered on the next EDS request, even one that looks like an
//! ACK (SOTW-32). Make-before-break (SOTW-31): a CDS response told to hold removals keeps the
//! clusters removed since the snapshot the last CDS response came from; a clean CDS response is
//! owed when the push completes. The same base tells which clusters a CDS response added, for the
//! stream's warming gate (listeners and routes wait for their EDS, `warming.rs`).

mod request;
mod state;

use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Node;
use tonic::Status;

use super::body::Framed;
use super::cache::FullSetCache;
use super::connections::TypeStatus;
use super::diffs::DiffCache;
use super::names::SharedNames;
use super::per_type::PerType;
use super::record::Sent;
use super::request::{Kind, MAX_NAME_BYTES, MAX_NAMES_PER_REQUEST, check_names};
use super::response::{self, TooLarge};
use super::stream::Protocol;
use super::subscription::Known;
use super::subscription::SotwNames;
use crate::envoy::ResourceType;
use crate::snapshot::{Snapshot, TypeResources, TypeVersion, View};
use request::SotwRequest;
use state::{SotwBuilt, SotwState};

/// The SotW side of one stream.
#[derive(Default)]
pub(crate) struct Sotw {
    types: PerType<SotwState>,
    /// ADS only: the snapshot the last CDS response came from, to keep removed clusters until the
    /// routes moved off them (SOTW-31). Shared with every other holder; costs only what changed
    /// since.
    cds_base: Option<Arc<Snapshot>>,
}

impl Protocol for Sotw {
    type Request = SotwRequest;
    type Built = SotwBuilt;
    const DELTA: bool = false;
    const NONCE_MARK: &'static str = "-";

    fn node(req: &SotwRequest) -> Option<&Node> {
        req.node.as_ref()
    }

    fn type_url(req: &SotwRequest) -> &str {
        &req.type_url
    }

    fn response_nonce(req: &SotwRequest) -> &str {
        &req.response_nonce
    }

    fn error(req: &SotwRequest) -> Option<&str> {
        req.error_detail.as_ref().map(|e| e.message.as_str())
    }

    fn check(req: &SotwRequest) -> Result<(), Status> {
        if req.names.count() <= MAX_NAMES_PER_REQUEST && req.names.longest() <= MAX_NAME_BYTES {
            // Both limits were measured while the request was read: no second pass over the names.
            return Ok(());
        }
        check_names(req.names.count(), req.names.each())
    }

    fn apply(
        &mut self,
        ty: ResourceType,
        req: &SotwRequest,
        known: Option<&TypeResources>,
        shared: &SharedNames,
        _conn: &str,
    ) -> Result<Kind, Status> {
        let state = self.types.entry(ty);
        let kind = state.on_request_known(
            &req.response_nonce,
            &req.version_info,
            &req.names,
            Self::error(req),
            Known {
                resources: known,
                sets: Some(shared),
            },
        );
        Ok(kind)
    }

    fn status(&self, ty: ResourceType) -> TypeStatus {
        self.types
            .get(ty)
            .map(SotwState::status)
            .unwrap_or_default()
    }

    fn has_work(&self, ty: ResourceType, latest_seq: u64) -> bool {
        self.types.get(ty).is_some_and(|s| s.has_work(latest_seq))
    }

    fn would_send(
        &self,
        ty: ResourceType,
        snap: &Snapshot,
        _view: View,
        _diffs: &DiffCache,
    ) -> bool {
        self.types.get(ty).is_some_and(|s| s.would_send(snap))
    }

    fn build(
        &mut self,
        ty: ResourceType,
        snap: &Snapshot,
        view: View,
        hold_removals: bool,
        full_sets: &FullSetCache,
        _diffs: &DiffCache,
    ) -> Option<SotwBuilt> {
        let retain_from = self.cds_base.as_deref().filter(|_| hold_removals);
        self.types
            .get_mut(ty)?
            .build(snap, view, retain_from, full_sets)
    }

    fn shared_nonce(_built: &SotwBuilt) -> Option<Arc<str>> {
        None
    }

    fn version(built: &SotwBuilt) -> TypeVersion {
        built.version
    }

    fn frame(
        ty: ResourceType,
        type_url: &str,
        built: &mut SotwBuilt,
        nonce: &str,
        version: &str,
        _view: View,
        _full_sets: &FullSetCache,
    ) -> Result<(Framed, usize), TooLarge> {
        let entries = std::mem::take(&mut built.entries);
        response::frame(ty, type_url, version, nonce, entries)
    }

    fn change_driven(built: &SotwBuilt) -> bool {
        built.change_driven
    }

    fn after_cds(
        &mut self,
        built: &SotwBuilt,
        snap: &Arc<Snapshot>,
        view: View,
        ads: bool,
    ) -> Vec<Arc<str>> {
        let eds = self.types.entry(ResourceType::Endpoint);
        eds.note_warming(&built.warming);
        if !ads {
            return Vec::new();
        }
        let base = self.cds_base.replace(Arc::clone(snap));
        match base {
            Some(base) if eds.sub().requested() => {
                let cds = self.types.get(ResourceType::Cluster);
                added_eds_clusters(&base, snap, view, |c| cds.is_some_and(|s| s.covers(c)))
            }
            _ => Vec::new(),
        }
    }

    fn carried(built: &SotwBuilt) -> impl Iterator<Item = &Arc<str>> {
        built.names.iter()
    }

    fn sent(&mut self, ty: ResourceType, nonce: Arc<str>, version: Arc<str>, built: SotwBuilt) {
        if let Some(state) = self.types.get_mut(ty) {
            state.sent(Sent::now(nonce, built.version, version), built.names);
        }
    }

    fn end_cycle(&mut self) {
        self.types.entry(ResourceType::Cluster).release_removals();
    }

    fn force_all(&mut self) {
        for t in self.types.iter_mut() {
            t.force_all();
        }
    }
}

/// The clusters in `snap` that were not in `base`, that the client's CDS subscription covers and
/// whose endpoints come over EDS (a load assignment exists): what a CDS response from `snap` adds for
/// a client whose previous one came from `base`. Costs the change (the maps share structure).
pub(crate) fn added_eds_clusters(
    base: &Snapshot,
    snap: &Snapshot,
    view: View,
    covers: impl Fn(&str) -> bool,
) -> Vec<Arc<str>> {
    let before = base.resources_for(ResourceType::Cluster, view);
    let after = snap.resources_for(ResourceType::Cluster, view);
    let cla = snap.resources_for(ResourceType::Endpoint, view);
    before
        .entries
        .diff(&after.entries)
        .filter_map(|item| match item {
            imbl::ordmap::DiffItem::Add(name, _) => Some(name),
            _ => None,
        })
        .filter(|name| covers(name) && cla.get(name).is_some())
        .cloned()
        .collect()
}
