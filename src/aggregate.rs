//! Merges every registry into one view of the mesh, and decides when to push.
//!
//! One task owns the state of every registry (per hostname, per registry). When a registry reports a
//! change it re-merges only the touched hostnames: service attributes come from the first registry
//! in configured order that knows the hostname, endpoints are the union of all registries, each
//! tagged with its origin. Real changes (not no-op resyncs, REG-14) go to the debouncer, which hands
//! batches to the snapshot builder.

mod merge;

pub use merge::MergedService;
