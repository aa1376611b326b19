//! The snapshot builder's metrics, named and described in one place:
//!
//! | name | kind | labels | meaning |
//! | --- | --- | --- | --- |
//! | `tributary_snapshot_build_seconds` | histogram (s) | — | time to build a snapshot from a batch of registry changes |

use std::time::Duration;

/// Registers the descriptions (HELP lines). Safe to call repeatedly.
pub(crate) fn describe() {
    metrics::describe_histogram!(
        "tributary_snapshot_build_seconds",
        metrics::Unit::Seconds,
        "Time to build a snapshot from a batch of registry changes."
    );
}

/// A snapshot build took `took`.
pub(super) fn built(took: Duration) {
    metrics::histogram!("tributary_snapshot_build_seconds").record(took.as_secs_f64());
}
