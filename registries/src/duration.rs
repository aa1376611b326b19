//! Durations in config files as humans write them (`100ms`, `30s`, `5m`), for
//! `#[serde(with = "duration")]`. Shared by every registry's settings and by tributary's own config.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Writes `d` the way it is read back (`1m 30s`).
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*d).to_string())
}

/// Reads a duration such as `250ms` or `5m`; anything else is an error that shows the text.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_duration(&text).map_err(|e| {
        serde::de::Error::custom(format!(
            "{text:?} is not a duration like 100ms, 30s or 5m: {e}"
        ))
    })
}
