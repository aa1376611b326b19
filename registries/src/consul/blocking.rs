//! Consul's blocking-query index rules (REG-6, `features/blocking.mdx` "Implementation Details"):
//!
//! - send back the last `X-Consul-Index`; the first read (index 0) does not block;
//! - if the returned index is **lower** than the last one (snapshot restore, upgrade, ...), reset
//!   to 0 and re-read;
//! - never block on an index below 1 after a response ("it is always safe to use an index of 1");
//! - the same index as before means nothing changed: no push.

/// What an answer's index says about its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Observed {
    /// The index did not move: the body is what we already have (a wait timeout).
    Unchanged,
    /// The body may differ from what we have; apply it (the registry still drops no-op results).
    Changed,
}

/// The index state of one watch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct BlockingIndex {
    index: u64,
    answered: bool,
}

impl BlockingIndex {
    /// The `?index=` of the next request; 0 means "read now, do not block".
    pub(super) fn next(&self) -> u64 {
        self.index
    }

    /// Takes the `X-Consul-Index` of a successful answer.
    pub(super) fn observe(&mut self, returned: u64) -> Observed {
        // An index of 0 after a response would make the next request non-blocking and the loop
        // spin: treat it as 1.
        let returned = returned.max(1);
        let first = !self.answered;
        self.answered = true;
        if returned < self.index {
            // Went backwards: start over with a non-blocking re-read. This body is still Consul's
            // current truth, so it is applied.
            self.index = 0;
            return Observed::Changed;
        }
        let unchanged = !first && self.index != 0 && returned == self.index;
        self.index = returned;
        if unchanged {
            Observed::Unchanged
        } else {
            Observed::Changed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // REG-6: index 100, then 50 (backwards), then 0: the next requests use 0, then 1.
    #[test]
    fn backwards_resets_to_zero_and_zero_becomes_one() {
        let mut i = BlockingIndex::default();
        assert_eq!(i.next(), 0, "the first read does not block");
        assert_eq!(i.observe(100), Observed::Changed);
        assert_eq!(i.next(), 100);
        assert_eq!(i.observe(50), Observed::Changed, "the data is re-read");
        assert_eq!(i.next(), 0, "reset after going backwards");
        assert_eq!(i.observe(0), Observed::Changed);
        assert_eq!(i.next(), 1, "never below 1 after a response");
        assert_eq!(i.observe(0), Observed::Unchanged, "0 again is 1 again");
        assert_eq!(i.next(), 1);
        assert_eq!(i.observe(60), Observed::Changed);
        assert_eq!(i.next(), 60);
    }

    // REG-6: the same index and body returned again and again is never a change.
    #[test]
    fn the_same_index_is_unchanged() {
        let mut i = BlockingIndex::default();
        assert_eq!(i.observe(7), Observed::Changed);
        for _ in 0..100 {
            assert_eq!(i.observe(7), Observed::Unchanged);
        }
        assert_eq!(i.observe(8), Observed::Changed);
    }

    // The first answer is always applied, whatever its index.
    #[test]
    fn the_first_answer_is_a_change() {
        let mut i = BlockingIndex::default();
        assert_eq!(i.observe(1), Observed::Changed);
        let mut i = BlockingIndex::default();
        assert_eq!(i.observe(0), Observed::Changed);
        assert_eq!(i.next(), 1);
    }
}
