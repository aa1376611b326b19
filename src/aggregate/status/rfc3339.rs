//! Timestamps in `/debug/registryz` as RFC 3339 (with milliseconds), or null when absent.

use std::time::SystemTime;

use serde::Serializer;

/// `t` as an RFC 3339 string.
pub(super) fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_rfc3339_millis(*t).to_string())
}

/// `t` as an RFC 3339 string, or null.
pub(super) fn serialize_opt<S: Serializer>(
    t: &Option<SystemTime>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => serialize(t, s),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::super::SyncState;

    #[test]
    fn timestamps_read_as_rfc3339_with_milliseconds() {
        let at = UNIX_EPOCH + Duration::from_millis(1_500);
        let json = serde_json::to_value(SyncState::Synced { at }).expect("serializes");
        assert_eq!(
            json,
            serde_json::json!({"state": "synced", "at": "1970-01-01T00:00:01.500Z"})
        );
    }

    #[test]
    fn an_absent_timestamp_is_null() {
        let mut json = serde_json::Serializer::new(Vec::new());
        super::serialize_opt(&None, &mut json).expect("serializes");
        assert_eq!(json.into_inner(), b"null");
    }
}
