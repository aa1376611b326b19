//! Empty answers to collections istiod subscribes to that tributary does not serve
//! (`docs/mcp.md`, "Which type URLs are answered"; `crate::mcp::type_urls::is_collection`).
//!
//! istiod counts an `xds://` config source synced only when every collection it asked for got a
//! response, so such a subscription gets one response with no resources. The only state is the
//! URLs owed an answer: a request without `response_nonce` (a new subscription) owes one, an
//! ACK or NACK (with a nonce) owes nothing, as the set never changes.

/// `version_info` of an empty answer: the set is always empty, so the version never changes.
pub(crate) const EMPTY_VERSION: &str = "empty";

/// Most distinct URLs owed at once on one stream; istiod asks for about twenty. Past it, further
/// subscriptions are ignored until the owed ones went out.
const MAX_OWED: usize = 64;

/// The collection URLs one stream owes an empty answer, oldest first.
#[derive(Default)]
pub(crate) struct EmptyAnswers {
    owed: Vec<Box<str>>,
}

impl EmptyAnswers {
    /// A request for `url` arrived; `response_nonce` empty means a new subscription.
    pub(crate) fn on_request(&mut self, url: &str, response_nonce: &str) {
        if response_nonce.is_empty()
            && self.owed.len() < MAX_OWED
            && !self.owed.iter().any(|u| **u == *url)
        {
            self.owed.push(url.into());
        }
    }

    /// Whether an answer is owed.
    pub(crate) fn owed(&self) -> bool {
        !self.owed.is_empty()
    }

    /// The next URL to answer.
    pub(crate) fn take(&mut self) -> Option<Box<str>> {
        (!self.owed.is_empty()).then(|| self.owed.remove(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GATEWAY: &str = "networking.istio.io/v1/Gateway";
    const SIDECAR: &str = "networking.istio.io/v1/Sidecar";

    #[test]
    fn new_subscriptions_owe_one_answer_each_and_acks_none() {
        let mut e = EmptyAnswers::default();
        e.on_request(GATEWAY, "");
        e.on_request(SIDECAR, "");
        e.on_request(GATEWAY, "");
        assert_eq!(e.take().as_deref(), Some(GATEWAY));
        e.on_request(GATEWAY, "1-3");
        assert_eq!(e.take().as_deref(), Some(SIDECAR));
        assert!(!e.owed());
        assert_eq!(e.take(), None);
    }

    #[test]
    fn owed_urls_are_bounded() {
        let mut e = EmptyAnswers::default();
        for i in 0..MAX_OWED + 10 {
            e.on_request(&format!("networking.istio.io/v1/Kind{i}"), "");
        }
        assert_eq!(std::iter::from_fn(|| e.take()).count(), MAX_OWED);
    }
}
