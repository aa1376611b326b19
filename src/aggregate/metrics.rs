//! The aggregate's metrics, described in one place (istiod's names where istiod has one):
//!
//! | name | kind | labels | meaning |
//! | --- | --- | --- | --- |
//! | `pilot_inbound_updates` | counter | `type` = `svc`, `eds`, `svcdelete` | registry updates received; `eds` when only endpoints changed |
//! | `pilot_push_triggers` | counter | `type` = `service`, `endpoint` | pushes started, by what changed |
//! | `pilot_debounce_time` | histogram (s) | — | first change of a batch → push started |
//! | `pilot_services` | gauge | — | merged services |
//! | `tributary_registry_changes` | counter | `registry`, `event` = `upsert`, `delete` | changes per configured registry (any kind) |
//! | `tributary_registry_synced` / `_degraded` | gauge | `registry` | 1 when synced / degraded |
//! | `tributary_registry_stale_since_timestamp_seconds` | gauge | `registry` | when a degraded registry's state went stale |
//! | `tributary_registry_rejected_objects` | gauge | `registry` | config objects it currently rejects |
//!
//! `registry` values are configured registry names: bounded by the config file. Every metric the
//! aggregate emits goes through a function of this file.

use std::time::Duration;

/// Registers the descriptions (HELP lines). Safe to call repeatedly.
pub(crate) fn describe() {
    metrics::describe_counter!(
        "pilot_inbound_updates",
        "Total number of updates received by pilot (svc, eds, svcdelete)."
    );
    metrics::describe_counter!(
        "pilot_push_triggers",
        "Total number of times a push was triggered, labeled by reason for the push."
    );
    metrics::describe_histogram!(
        "pilot_debounce_time",
        metrics::Unit::Seconds,
        "Delay in seconds between the first config enters debouncing and the merged push request is pushed into the push queue."
    );
    metrics::describe_gauge!("pilot_services", "Total services known to pilot.");
    metrics::describe_counter!(
        "tributary_registry_changes",
        "Service changes received from each registry (upsert, delete)."
    );
    metrics::describe_gauge!(
        "tributary_registry_synced",
        "1 once the registry has delivered its initial state."
    );
    metrics::describe_gauge!(
        "tributary_registry_degraded",
        "1 while the registry cannot read its source; its last state is still served."
    );
    metrics::describe_gauge!(
        "tributary_registry_stale_since_timestamp_seconds",
        "Unix time since which a degraded registry's state is stale (0 when healthy)."
    );
    metrics::describe_gauge!(
        "tributary_registry_rejected_objects",
        "Config objects the registry currently rejects (see /debug/configz)."
    );
}

/// A debounced batch turned into a push: how long its first change waited, what kind of change
/// triggered it (`service` or `endpoint`), and how many services are merged now.
pub(crate) fn push_started(waited: Duration, reason: &'static str, services: usize) {
    metrics::histogram!("pilot_debounce_time").record(waited.as_secs_f64());
    metrics::counter!("pilot_push_triggers", "type" => reason).increment(1);
    metrics::gauge!("pilot_services").set(services as f64);
}

/// A registry update arrived; `kind` is istiod's: `svc`, `eds` (only endpoints changed) or
/// `svcdelete`.
pub(crate) fn inbound_update(kind: &'static str) {
    metrics::counter!("pilot_inbound_updates", "type" => kind).increment(1);
}

/// The state of configured registry `registry`, as published to `/debug/registryz`.
pub(crate) fn registry_state(
    registry: &str,
    synced: bool,
    degraded: bool,
    stale_since: f64,
    rejected: usize,
) {
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    metrics::gauge!("tributary_registry_synced", "registry" => registry.to_string())
        .set(flag(synced));
    metrics::gauge!("tributary_registry_degraded", "registry" => registry.to_string())
        .set(flag(degraded));
    metrics::gauge!("tributary_registry_stale_since_timestamp_seconds", "registry" => registry.to_string())
        .set(stale_since);
    metrics::gauge!("tributary_registry_rejected_objects", "registry" => registry.to_string())
        .set(rejected as f64);
}

/// Registry `registry` sent a change.
pub(crate) fn registry_change(registry: &str, delete: bool) {
    let event = match delete {
        true => "delete",
        false => "upsert",
    };
    metrics::counter!("tributary_registry_changes", "registry" => registry.to_string(), "event" => event)
        .increment(1);
}
