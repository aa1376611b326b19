//! The xDS server's metrics, named exactly as istiod names them so existing dashboards work.
//!
//! Counters carry no `_total` suffix (istiod's exporter drops it; ours, `admin/metrics.rs`, is set
//! up the same way, docs/ecosystem.md §1.4). Every label value comes from a closed set (resource types, fixed reasons), never from
//! node ids or resource names.
//!
//! | name | kind | labels | meaning |
//! | --- | --- | --- | --- |
//! | `pilot_xds` | gauge | — | connected xDS streams, SotW and delta |
//! | `pilot_xds_pushes` | counter | `type` = `cds`… | responses handed to a stream |
//! | `pilot_total_xds_rejects` | counter | `type` | NACKs received |
//! | `pilot_xds_expired_nonce` | counter | `type` | requests ignored for a stale nonce |
//! | `pilot_proxy_convergence_time` | histogram (s) | — | snapshot trigger → push handed over |
//! | `pilot_xds_config_size_bytes` | histogram | `type` | encoded size of each response |
//! | `pilot_total_xds_internal_errors` | counter | `type` | a response or debug view tributary failed to produce |
//! | `pilot_xds_push_time` | histogram (s) | `type` | a response's build-and-hand-over time on a stream |
//! | `pilot_xds_invalid_requests` | counter | `reason` | tributary's own: requests refused or ignored (unknown type URL, missing node, …) |
//!
//! The four families recorded on every push (`pilot_xds_pushes`, `pilot_xds_config_size_bytes`,
//! `pilot_xds_push_time`, `pilot_proxy_convergence_time`) are counted per thread and rendered at
//! scrape time by `pushes.rs`; the others go through the `metrics` recorder.

mod pushes;

pub(crate) use pushes::{TIME_BUCKETS, converged, pushed, render};

use crate::envoy::ResourceType;

/// Why a request was refused or ignored; the `reason` label of `pilot_xds_invalid_requests`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InvalidReason {
    /// A type URL this server does not serve (ignored, stream continues; SOTW-5).
    UnknownType,
    /// First request without a node or with an empty node id (SOTW-1).
    MissingNode,
    /// ADS request without a type URL (SOTW-4).
    MissingTypeUrl,
    /// Per-type service called with another type's URL (SOTW-4).
    TypeMismatch,
    /// A later request carried a different node (SOTW-3).
    NodeChanged,
    /// Node metadata too large, too deep, or with an invalid known key.
    BadMetadata,
    /// A resource name over the length cap, or too many names.
    BadNames,
    /// The request could not be decoded, or was over the size limit.
    Malformed,
}

impl InvalidReason {
    fn label(self) -> &'static str {
        match self {
            InvalidReason::UnknownType => "unknown_type",
            InvalidReason::MissingNode => "missing_node",
            InvalidReason::MissingTypeUrl => "missing_type_url",
            InvalidReason::TypeMismatch => "type_mismatch",
            InvalidReason::NodeChanged => "node_changed",
            InvalidReason::BadMetadata => "bad_metadata",
            InvalidReason::BadNames => "bad_names",
            InvalidReason::Malformed => "malformed",
        }
    }
}

/// Registers descriptions once, so the exporter shows help text. Safe to call repeatedly.
pub(crate) fn describe() {
    metrics::describe_gauge!(
        "pilot_xds",
        "Number of endpoints connected to this pilot using XDS."
    );
    metrics::describe_counter!(
        "pilot_total_xds_rejects",
        "Total number of XDS responses from pilot rejected by proxy."
    );
    metrics::describe_counter!(
        "pilot_xds_expired_nonce",
        "Total number of XDS requests with an expired nonce."
    );
    metrics::describe_counter!(
        "pilot_total_xds_internal_errors",
        "Total number of internal XDS errors in pilot."
    );
    metrics::describe_counter!(
        "pilot_xds_invalid_requests",
        "xDS requests refused or ignored by tributary, by reason (unknown_type, missing_node, ...)."
    );
}

/// Creates the error counters at zero, so that dashboards show "no errors" rather than "no
/// data" (istiod's Push Errors panel otherwise has no series until the first error).
pub(crate) fn register_error_series() {
    for ty in ResourceType::PUSH_ORDER {
        metrics::counter!("pilot_total_xds_rejects", "type" => ty.short()).absolute(0);
        metrics::counter!("pilot_total_xds_internal_errors", "type" => ty.short()).absolute(0);
    }
}

/// A stream connected (`+1`) or went away (`-1`).
pub(crate) fn connected(delta: f64) {
    metrics::gauge!("pilot_xds").increment(delta);
}

/// The client NACKed a response of `ty`.
pub(crate) fn rejected(ty: ResourceType) {
    metrics::counter!("pilot_total_xds_rejects", "type" => ty.short()).increment(1);
}

/// A request for `ty` carried a stale nonce and was ignored.
pub(crate) fn expired_nonce(ty: ResourceType) {
    metrics::counter!("pilot_xds_expired_nonce", "type" => ty.short()).increment(1);
}

/// A request was refused or ignored.
pub(crate) fn invalid(reason: InvalidReason) {
    metrics::counter!("pilot_xds_invalid_requests", "reason" => reason.label()).increment(1);
}

/// Something tributary should have been able to produce failed (`what`: `config_dump`, or a type's
/// short name). istiod counts these as `pilot_total_xds_internal_errors`.
pub(crate) fn internal_error(what: &'static str) {
    metrics::counter!("pilot_total_xds_internal_errors", "type" => what).increment(1);
}
