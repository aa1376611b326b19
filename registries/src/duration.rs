//! Durations in config files as humans write them (`100ms`, `30s`, `5m`), for
//! `#[serde(with = "duration")]`. Shared by every registry's settings and by tributary's own config.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};
use tokio::time::Instant;

/// The longest duration any setting may hold (30 days). Nothing tributary waits for sensibly takes
/// longer, and anything past it is a typo or an attempt to overflow a deadline (`Instant + 2^64 s`
/// panics); each setting may have a tighter bound in its own `validate()`.
pub const MAX_SETTING: Duration = Duration::from_secs(30 * 24 * 3600);

/// `now + d`, or a time so far ahead it never comes (`now + MAX_SETTING`) when the sum does not
/// fit: a deadline computed from settings never panics.
pub fn deadline(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(MAX_SETTING))
        .unwrap_or(now)
}

/// Writes `d` the way it is read back (`1m 30s`).
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*d).to_string())
}

/// Reads a duration such as `250ms` or `5m`; anything else is an error that shows the text.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    let value = humantime::parse_duration(&text).map_err(|e| {
        serde::de::Error::custom(format!(
            "{text:?} is not a duration like 100ms, 30s or 5m: {e}"
        ))
    })?;
    if value > MAX_SETTING {
        return Err(serde::de::Error::custom(format!(
            "{text:?} is longer than the longest duration a setting may have ({})",
            humantime::format_duration(MAX_SETTING)
        )));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct S {
        #[serde(with = "super")]
        d: Duration,
    }

    #[test]
    fn huge_durations_are_rejected_and_deadlines_never_overflow() {
        // REL-3: a duration setting has an upper bound; REL-4: deadlines saturate.
        let err = serde_yaml::from_str::<S>("d: 18446744073709551615s").expect_err("too long");
        assert!(err.to_string().contains("longest duration"), "{err}");
        assert_eq!(
            serde_yaml::from_str::<S>("d: 30days")
                .expect("at the bound")
                .d,
            MAX_SETTING
        );
        let now = Instant::now();
        assert_eq!(
            deadline(now, Duration::from_secs(1)),
            now + Duration::from_secs(1)
        );
        assert!(deadline(now, Duration::MAX) > now);
    }
}
