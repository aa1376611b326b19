//! The async runtime's count of live tasks, sampled at every scrape: each xDS stream, connection
//! and timer is a task, so a count that does not come back to its idle figure after clients left is
//! a leak that RSS alone would show late or never (MEM-2 in docs/reliability.md).

/// The gauge's name.
pub(super) const ALIVE_TASKS: &str = "tributary_runtime_alive_tasks";

/// Registers the description (HELP line).
pub(super) fn describe() {
    metrics::describe_gauge!(
        ALIVE_TASKS,
        "Tasks alive in the async runtime (spawned and not yet finished), at scrape time."
    );
}

/// Samples the current runtime's live task count; outside a runtime the gauge is left as it was.
pub(super) fn sample() {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        metrics::gauge!(ALIVE_TASKS).set(handle.metrics().num_alive_tasks() as f64);
    }
}
