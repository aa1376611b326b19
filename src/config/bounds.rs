//! Upper bounds of tributary's own duration settings (REL-3).
//!
//! Every duration read from a file is already capped at [`MAX_SETTING`] when it is parsed; these are
//! the tighter, per-setting bounds past which a value is surely a mistake, each reported with the
//! setting's name. They also keep every deadline computed from a setting far from overflow.

use std::time::Duration;

use tributary_registries::duration::MAX_SETTING;

use super::{Config, ConfigError};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

/// Quiet time before a push: a minute of waiting is already a frozen mesh.
const MAX_DEBOUNCE_AFTER: Duration = MINUTE;
/// Longest a push may be held back by a burst of changes.
const MAX_DEBOUNCE_MAX: Duration = Duration::from_secs(10 * 60);
/// Longest the first push waits for registries that have not synced.
const MAX_SYNC_TIMEOUT: Duration = HOUR;
/// Upstream connect timeout in generated clusters.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// Keepalive pings and their timeout.
const MAX_KEEPALIVE: Duration = HOUR;
/// Drain delay and grace period at shutdown: past an hour, the orchestrator kills us anyway.
const MAX_SHUTDOWN_STEP: Duration = HOUR;

/// Checks every duration of `c` against its bound.
pub(super) fn check(c: &Config) -> Result<(), ConfigError> {
    let d = &c.debounce;
    let conn = &c.connections;
    let checks: [(&str, Duration, Duration); 12] = [
        (
            "debounce.debounce_after",
            d.debounce_after,
            MAX_DEBOUNCE_AFTER,
        ),
        ("debounce.debounce_max", d.debounce_max, MAX_DEBOUNCE_MAX),
        (
            "debounce.endpoint_debounce_after",
            d.endpoint_debounce_after,
            MAX_DEBOUNCE_AFTER,
        ),
        ("sync_timeout", c.sync_timeout, MAX_SYNC_TIMEOUT),
        ("connect_timeout", c.connect_timeout, MAX_CONNECT_TIMEOUT),
        (
            "connections.keepalive_interval",
            conn.keepalive_interval,
            MAX_KEEPALIVE,
        ),
        (
            "connections.keepalive_timeout",
            conn.keepalive_timeout,
            MAX_KEEPALIVE,
        ),
        (
            "connections.max_connection_age",
            conn.max_connection_age.unwrap_or_default(),
            MAX_SETTING,
        ),
        (
            "connections.max_connection_age_jitter",
            conn.max_connection_age_jitter,
            MAX_SETTING,
        ),
        (
            "connections.max_connection_age_grace",
            conn.max_connection_age_grace,
            MAX_SHUTDOWN_STEP,
        ),
        (
            "shutdown.drain_delay",
            c.shutdown.drain_delay,
            MAX_SHUTDOWN_STEP,
        ),
        (
            "shutdown.grace_period",
            c.shutdown.grace_period,
            MAX_SHUTDOWN_STEP,
        ),
    ];
    for (name, value, max) in checks {
        if value > max {
            return Err(ConfigError::Invalid(format!(
                "{name} is {}; it may be at most {}",
                humantime::format_duration(value),
                humantime::format_duration(max)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_duration_has_an_upper_bound_with_its_name_in_the_error() {
        // REL-3: the huge values that used to panic a task are refused at validation.
        let mut c = Config::default();
        assert!(check(&c).is_ok());
        c.debounce.debounce_max = Duration::MAX;
        let err = c.validate().expect_err("huge debounce_max").to_string();
        assert!(err.contains("debounce.debounce_max"), "{err}");
        let c = Config {
            sync_timeout: Duration::from_secs(u64::MAX),
            ..Config::default()
        };
        let err = c.validate().expect_err("huge sync_timeout").to_string();
        assert!(
            err.contains("sync_timeout") && err.contains("at most 1h"),
            "{err}"
        );
        let mut c = Config::default();
        c.shutdown.grace_period = Duration::from_secs(2 * 3600);
        assert!(c.validate().is_err());
    }
}
