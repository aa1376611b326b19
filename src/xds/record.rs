//! What a stream records per type about the responses it sent and the client's answers, in either
//! protocol: the last response handed to the body ([`Sent`]), bounded copies of client text.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::SystemTime;

use crate::envoy::ResourceType;
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

/// `version` of `ty` as responses spell it, shared: every stream a push reaches sends the same
/// version, so each worker thread spells it once per type and change, not once per stream.
pub(crate) fn version_text(ty: ResourceType, version: TypeVersion) -> Arc<str> {
    type Last = [Option<(TypeVersion, Arc<str>)>; ResourceType::COUNT];
    thread_local! {
        static LAST: RefCell<Last> = const { RefCell::new([const { None }; ResourceType::COUNT]) };
    }
    LAST.with_borrow_mut(|last| match &mut last[ty.index()] {
        Some((v, text)) if *v == version => Arc::clone(text),
        slot => {
            let text: Arc<str> = Arc::from(version.to_string());
            *slot = Some((version, Arc::clone(&text)));
            text
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_spelled_once_per_type() {
        let v = TypeVersion::default();
        let a = version_text(ResourceType::Endpoint, v);
        assert_eq!(*a, *v.to_string());
        assert!(Arc::ptr_eq(&a, &version_text(ResourceType::Endpoint, v)));
        let c = version_text(ResourceType::Cluster, v);
        assert!(!Arc::ptr_eq(&a, &c), "each type has its own");
        assert_eq!(a, c);
    }
}
