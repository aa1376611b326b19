//! The per-type protocol states of one stream.
//!
//! Envoy's four types, which every proxy asks for, sit inline; the rest (VHDS, used only by Envoys
//! that opt in, and the MCP collections, asked for only by istiod-like clients) get a state on
//! their first request. A proxy's stream then carries no state for the types it never asks for
//! (~400–500 bytes each, in every stream's task, MEM-3).
//! A type without a state behaves as a type never requested: nothing subscribed, nothing owed.

use crate::envoy::ResourceType;

/// Types whose state sits inline: Envoy's, in push order.
const INLINE: usize = ResourceType::PUSH_ORDER.len();

/// Types whose state is made on first use: VHDS and the MCP collections.
const ON_DEMAND: usize = ResourceType::COUNT - INLINE;

/// A protocol's state of one type on one stream.
pub(crate) trait TypeState {
    /// The state of `ty` before any request.
    fn new(ty: ResourceType) -> Self;
}

/// One `S` per type, made on demand past Envoy's four.
#[derive(Debug)]
pub(crate) struct PerType<S> {
    inline: [S; INLINE],
    on_demand: [Option<Box<S>>; ON_DEMAND],
}

impl<S: TypeState> Default for PerType<S> {
    fn default() -> Self {
        Self {
            inline: ResourceType::PUSH_ORDER.map(S::new),
            on_demand: std::array::from_fn(|_| None),
        }
    }
}

impl<S: TypeState> PerType<S> {
    /// The state of `ty`; `None` for an on-demand type never requested on the stream.
    pub(crate) fn get(&self, ty: ResourceType) -> Option<&S> {
        match ty.index().checked_sub(INLINE) {
            None => self.inline.get(ty.index()),
            Some(i) => self.on_demand.get(i)?.as_deref(),
        }
    }

    /// See [`Self::get`].
    pub(crate) fn get_mut(&mut self, ty: ResourceType) -> Option<&mut S> {
        match ty.index().checked_sub(INLINE) {
            None => self.inline.get_mut(ty.index()),
            Some(i) => self.on_demand.get_mut(i)?.as_deref_mut(),
        }
    }

    /// The state of `ty`, made now if it has none (a request about it).
    pub(crate) fn entry(&mut self, ty: ResourceType) -> &mut S {
        match ty.index().checked_sub(INLINE) {
            None => &mut self.inline[ty.index()],
            Some(i) => self.on_demand[i].get_or_insert_with(|| Box::new(S::new(ty))),
        }
    }

    /// Every state there is.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut S> {
        self.inline
            .iter_mut()
            .chain(self.on_demand.iter_mut().flatten().map(|b| &mut **b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Probe(ResourceType);

    impl TypeState for Probe {
        fn new(ty: ResourceType) -> Self {
            Probe(ty)
        }
    }

    #[test]
    fn envoy_types_are_inline_and_collections_come_on_first_use() {
        let mut types = PerType::<Probe>::default();
        for ty in ResourceType::PUSH_ORDER {
            assert_eq!(types.get(ty), Some(&Probe(ty)));
        }
        let mcp = ResourceType::ALL[INLINE];
        assert!(!ResourceType::PUSH_ORDER.contains(&mcp));
        assert_eq!(types.get(mcp), None, "no state before a request");
        assert_eq!(types.iter_mut().count(), INLINE);
        assert_eq!(*types.entry(mcp), Probe(mcp));
        assert_eq!(types.get(mcp), Some(&Probe(mcp)));
        assert_eq!(types.iter_mut().count(), INLINE + 1);
        for ty in ResourceType::ALL {
            assert_eq!(types.entry(ty).0, ty, "each type has its own state");
        }
    }

    #[test]
    fn a_stream_without_collections_carries_no_state_for_them() {
        // MEM-3: the unused collections cost a pointer each, not a state.
        let per_type = std::mem::size_of::<PerType<[u8; 512]>>();
        assert!(per_type < INLINE * 512 + ON_DEMAND * 16, "{per_type} bytes");
    }
}
