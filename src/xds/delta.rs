//! Incremental (delta) xDS: `DeltaAggregatedResources` and the per-type `Delta*` methods, served
//! from the same snapshot and the same encoded resource bytes as state-of-the-world (DELTA-21).
//!
//! A delta response carries only what changed for the client (DELTA-8) and names what went away in
//! `removed_resources` (DELTA-9). Each resource's `version` is its content hash, the same on every
//! replica and after restarts (DELTA-13), so a reconnecting client's `initial_resource_versions`
//! are compared meaningfully and it receives exactly what it lacks (DELTA-11/12). Streams are only
//! accepted once registries have synced, so that reconnect diff is never computed against a
//! partial mesh (TRANS-11).
//!
//! `state.rs` is the pure per-type protocol state (how what the client holds is tracked without
//! copying it is explained there); `stream.rs` is the task that runs one stream. Not supported:
//! aliases and resource locators (treated as unknown names, DELTA-15/18), TTLs (DELTA-20).

mod state;
mod stream;

pub(crate) use stream::run;
