//! What a stream records per type about the responses it sent and the client's answers, in either
//! protocol: the last response handed to the body ([`Sent`]), bounded copies of client text.

use std::sync::Arc;
use std::time::SystemTime;

use crate::snapshot::TypeVersion;

/// Longest NACK message kept per type. Envoy's messages name the resource and the field at fault
/// and fit easily; a client sending megabytes of error text must not grow server memory.
pub const MAX_ERROR_BYTES: usize = 4 * 1024;

/// Longest client `version_info` kept for debug views; ours are ~24 bytes.
pub(crate) const MAX_CLIENT_VERSION_BYTES: usize = 128;

/// The last response of a type handed to the body (SOTW-10).
#[derive(Debug, Clone)]
pub(crate) struct Sent {
    pub nonce: Arc<str>,
    pub version: TypeVersion,
    /// `version` as the response's `version_info` spells it, written once for client status.
    pub version_text: Arc<str>,
    pub at: SystemTime,
}

impl Sent {
    /// A response with `nonce` and `version` (spelled `version_text`), handed over now.
    pub(crate) fn now(nonce: Arc<str>, version: TypeVersion, version_text: Arc<str>) -> Self {
        Self {
            nonce,
            version,
            version_text,
            at: SystemTime::now(),
        }
    }

    /// [`Self::now`], spelling the version itself (tests).
    #[cfg(test)]
    pub(crate) fn spelled(nonce: &str, version: TypeVersion) -> Self {
        Self::now(Arc::from(nonce), version, Arc::from(version.to_string()))
    }
}

/// `s`, cut to at most `max` bytes (at a character boundary) and marked as cut.
pub(crate) fn bounded(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
