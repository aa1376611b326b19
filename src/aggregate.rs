//! Merges every registry into one view of the mesh, and decides when to push.
//!
//! One task ([`Aggregate`]) owns the state of every registry (per hostname, per registry). When a
//! registry reports a change it re-merges only the touched hostnames ([`merge`]): service attributes
//! come from the first registry in configured order that knows the hostname, endpoints are the union
//! of all registries, each tagged with its origin. Real changes (not no-op resyncs, REG-14) go to the
//! [`Debouncer`], which hands batches to the snapshot builder as [`PushRequest`]s, one at a time.
//! Registry health and sync progress are published in a [`RegistriesView`].

mod debounce;
mod merge;
pub(crate) mod metrics;
mod ports;
mod status;
mod task;
#[cfg(test)]
mod tests;

pub use debounce::{ChangeKind, DebounceSettings, Debouncer, Due};
pub use merge::{MergedService, merge};
pub use ports::UnmappedPort;
pub use status::{RegistriesView, RegistryInfo, SyncState, ViewState};
pub use task::{
    Aggregate, AggregateCommand, AggregateSettings, CommandReceiver, CommandSender, PushRequest,
};
