//! One delta stream: what its requests mean and what its pushes send, run by the same loop as SotW
//! streams (`driver.rs`). One push walks CDS → EDS → LDS → RDS from one pinned snapshot. Over ADS, cluster removals go out after that push's listeners and
//! routes (make-before-break, SOTW-31), and clusters a CDS response changed get their EDS resent
//! right after it: Envoy re-warms an updated cluster and waits for its assignment (SOTW-32; Envoy
//! issue 31535 shows the outage when a delta server leaves it out).

use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::discovery::v3::DeltaDiscoveryRequest;
use tokio::sync::watch;
use tonic::Status;
use tonic::codec::Streaming;

use super::super::body::{BodyGone, SlotWriter};
use super::super::connections::Registration;
use super::super::driver;
use super::super::metrics::{self, InvalidReason};
use super::super::node::NodeInfo;
use super::super::response;
use super::super::stream::{
    MAX_NAMES_PER_REQUEST, Params, UnknownTypes, check_names, check_same_node, refuse, request_type,
};
use super::state::{DeltaState, Kind, Request};
use crate::envoy::ResourceType;
use crate::snapshot::Snapshot;

/// Runs one delta stream to its end. Aborted (and cleaned up by drop guards) if the body goes away.
pub(crate) async fn run(
    params: Params,
    requests: Streaming<DeltaDiscoveryRequest>,
    writer: SlotWriter,
    snapshots: watch::Receiver<u64>,
) {
    driver::run(
        params,
        requests,
        writer,
        snapshots,
        true,
        |params, node, registration, writer| Stream {
            params,
            node,
            nonce_prefix: format!("{:x}", registration.serial()),
            registration,
            types: ResourceType::PUSH_ORDER.map(DeltaState::new),
            writer,
            cycle: None,
            unconverged: None,
            nonces: 0,
            unknown: UnknownTypes::default(),
        },
    )
    .await;
}

struct Stream {
    params: Params,
    node: NodeInfo,
    registration: Registration,
    nonce_prefix: String,
    types: [DeltaState; 4],
    writer: SlotWriter,
    /// The snapshot the current push walks through; `None` between pushes.
    cycle: Option<Arc<Snapshot>>,
    /// Trigger time of a snapshot whose push started but whose convergence is not recorded yet.
    unconverged: Option<Instant>,
    nonces: u64,
    unknown: UnknownTypes,
}

impl driver::Protocol for Stream {
    type Request = DeltaDiscoveryRequest;

    fn writer(&self) -> &SlotWriter {
        &self.writer
    }

    fn on_request(&mut self, req: DeltaDiscoveryRequest) -> Result<(), Status> {
        check_same_node(&self.node, req.node.as_ref())?;
        let Some(ty) = request_type(self.params.fixed, &req.type_url)? else {
            self.unknown.log(self.registration.id(), &req.type_url);
            return Ok(());
        };
        let irv = &req.initial_resource_versions;
        check_names(
            req.resource_names_subscribe.len() + req.resource_names_unsubscribe.len() + irv.len(),
            req.resource_names_subscribe
                .iter()
                .chain(&req.resource_names_unsubscribe)
                .chain(irv.keys())
                .map(String::as_str),
        )?;
        if !req.resource_locators_subscribe.is_empty()
            || !req.resource_locators_unsubscribe.is_empty()
        {
            // DELTA-18: not implemented; say so and carry on with the names.
            tracing::info!(conn = %self.registration.id(), r#type = %ty, "ignoring resource_locators (not supported)");
        }
        let changes_subscription =
            !req.resource_names_subscribe.is_empty() || !req.resource_names_unsubscribe.is_empty();
        if changes_subscription && self.writer.recall(ty).is_some() {
            // A response built for the old subscription has not started: rebuild it after this
            // request, so nothing goes out for names the client just dropped (INV-5).
            self.types[ty.index()].recalled();
        }
        let error = req.error_detail.as_ref().map(|e| e.message.as_str());
        let known = self.params.store.load();
        let state = &mut self.types[ty.index()];
        let kind = state.on_request(&Request {
            nonce: &req.response_nonce,
            subscribe: &req.resource_names_subscribe,
            unsubscribe: &req.resource_names_unsubscribe,
            initial_versions: Some(irv),
            error,
            known: known.as_deref().map(|s| s.resources(ty)),
        });
        if state.subscribed_names() > MAX_NAMES_PER_REQUEST {
            // SEC-9: delta subscriptions accumulate across requests; cap the total as SotW caps
            // one request, so no client grows the server's memory without bound.
            return Err(refuse(
                InvalidReason::BadNames,
                format!(
                    "{} names subscribed to {ty}, over the limit of {MAX_NAMES_PER_REQUEST}",
                    state.subscribed_names()
                ),
            ));
        }
        match kind {
            Kind::Stale => metrics::expired_nonce(ty),
            Kind::Nack => {
                metrics::rejected(ty);
                tracing::info!(conn = %self.registration.id(), r#type = %ty, error = error.unwrap_or_default(), "NACK");
            }
            Kind::Initial | Kind::Ack | Kind::Update => {}
        }
        if !state.subscribed() && self.writer.recall(ty).is_some() {
            // INV-5: the staged response is for a type the client no longer wants.
            state.recalled();
        }
        self.registration.update(ty, state.status());
        Ok(())
    }

    fn has_work(&self, latest_seq: u64) -> bool {
        self.types.iter().any(|t| t.has_work(latest_seq))
    }

    /// Stages the next owed response, walking the pinned snapshot in push order.
    fn push_one(&mut self, latest_seq: &mut u64) -> Result<(), BodyGone> {
        loop {
            let Some(snap) = driver::pin_cycle(&mut self.cycle, &self.params.store) else {
                return Ok(());
            };
            *latest_seq = (*latest_seq).max(snap.seq);
            for ty in ResourceType::PUSH_ORDER {
                if !self.types[ty.index()].has_work(snap.seq) {
                    continue;
                }
                // Over ADS, cluster removals wait for this push's listeners and routes.
                let defer_removals = ty == ResourceType::Cluster
                    && self.params.fixed.is_none()
                    && [ResourceType::Listener, ResourceType::Route]
                        .iter()
                        .any(|t| self.types[t.index()].has_work(snap.seq));
                let started = std::time::Instant::now();
                let Some(built) =
                    self.types[ty.index()].build(&snap, self.node.view(), defer_removals)
                else {
                    continue;
                };
                let nonce = self.next_nonce();
                let entries = match &built.whole_set {
                    Some(res) => {
                        let view = self.node.view();
                        vec![self.params.full_sets.get_delta(ty, view, res)]
                    }
                    None => built
                        .resources
                        .iter()
                        .flat_map(|r| r.delta_entry())
                        .collect(),
                };
                let framed = response::frame_delta(
                    ty,
                    &built.version.to_string(),
                    &nonce,
                    &built.removed,
                    entries,
                );
                let (framed, len) = match framed {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::error!(conn = %self.registration.id(), error = %e, "cannot send response");
                        metrics::internal_error(ty.short());
                        continue;
                    }
                };
                if self.writer.stage(framed).is_err() {
                    metrics::send_error(ty);
                    return Err(BodyGone);
                }
                let state = &mut self.types[ty.index()];
                state.sent(nonce, built.version, built.restore);
                metrics::pushed(ty, len);
                metrics::push_time(ty, started.elapsed());
                self.registration.update(ty, state.status());
                if ty == ResourceType::Cluster && self.params.fixed.is_none() {
                    // SOTW-32 for delta: re-warmed clusters need their assignment again.
                    let clusters = built.resources.iter().map(|r| Arc::clone(&r.name));
                    self.types[ResourceType::Endpoint.index()].owe(clusters);
                }
                if built.change_driven {
                    self.unconverged.get_or_insert(snap.triggered_at);
                }
                let more = ResourceType::PUSH_ORDER[ty.index() + 1..]
                    .iter()
                    .any(|t| self.types[t.index()].has_work(snap.seq));
                if !more {
                    self.end_cycle();
                }
                return Ok(());
            }
            self.end_cycle();
            match self.params.store.load() {
                Some(newer) if newer.seq > snap.seq => continue,
                _ if self.types.iter().any(|t| t.has_work(snap.seq)) => continue,
                _ => return Ok(()),
            }
        }
    }

    fn force_all(&mut self) {
        for t in &mut self.types {
            t.force_all();
        }
    }
}

impl Stream {
    /// The push is complete: held-back cluster removals are owed, and the next push starts from the
    /// newest snapshot.
    fn end_cycle(&mut self) {
        self.cycle = None;
        if let Some(t) = self.unconverged.take() {
            metrics::converged(t.elapsed());
        }
        self.types[ResourceType::Cluster.index()].release_deferred();
    }

    fn next_nonce(&mut self) -> Arc<str> {
        self.nonces += 1;
        Arc::from(format!("{}-d{:x}", self.nonce_prefix, self.nonces))
    }
}
