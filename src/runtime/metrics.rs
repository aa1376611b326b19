//! The runtime's own metrics (the wiring around the subsystems), named and described in one place:
//!
//! | name | kind | labels | meaning |
//! | --- | --- | --- | --- |
//! | `tributary_registry_restarts` | counter | `registry` | a registry task died (error or panic) and was restarted |
//!
//! `registry` values are configured registry names: bounded by the config file.

/// Registers the descriptions (HELP lines). Safe to call repeatedly.
pub(crate) fn describe() {
    metrics::describe_counter!(
        "tributary_registry_restarts",
        "Registry tasks restarted after they failed or panicked; their last state is served meanwhile."
    );
}

/// The task of registry `registry` died and is being restarted.
pub(super) fn registry_restarted(registry: &str) {
    metrics::counter!("tributary_registry_restarts", "registry" => registry.to_string())
        .increment(1);
}
