//! Content-derived type versions that cost O(change) to maintain.
//!
//! A type's version must change whenever any of its resources is added, removed or changed, and be
//! identical on two replicas holding the same content (SOTW-7, TRANS-12). Hashing every resource on
//! every build would make each build cost the whole mesh, so the version is an order-independent
//! accumulator: the XOR of a hash of each `(name, content hash)` pair, plus the count. Adding and
//! removing a resource are the same XOR, so a build updates the version in O(changed resources).

use std::fmt;

use crate::envoy::ContentHash;

/// The version of one resource type in a snapshot.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TypeVersion {
    acc: u128,
    count: u64,
}

impl TypeVersion {
    fn term(name: &str, hash: ContentHash) -> u128 {
        let mut buf = Vec::with_capacity(name.len() + 17);
        buf.extend_from_slice(name.as_bytes());
        buf.push(0);
        buf.extend_from_slice(&hash.0.to_le_bytes());
        xxhash_rust::xxh3::xxh3_128(&buf)
    }

    /// Accounts for a resource that joined the set.
    pub fn add(&mut self, name: &str, hash: ContentHash) {
        self.acc ^= Self::term(name, hash);
        self.count += 1;
    }

    /// Accounts for a resource that left the set.
    pub fn remove(&mut self, name: &str, hash: ContentHash) {
        self.acc ^= Self::term(name, hash);
        self.count -= 1;
    }

    /// Number of resources accounted for.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The version mixed with something that varies the content per node (e.g. a listener bind
    /// address), so that variant gets a version of its own.
    pub fn salted(&self, salt: &str) -> TypeVersion {
        TypeVersion {
            acc: self.acc ^ xxhash_rust::xxh3::xxh3_128(salt.as_bytes()),
            count: self.count,
        }
    }
}

impl fmt::Display for TypeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-{:016x}",
            self.count,
            (self.acc >> 64) as u64 ^ self.acc as u64
        )
    }
}

impl fmt::Debug for TypeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u128) -> ContentHash {
        ContentHash(n)
    }

    #[test]
    fn order_independent_and_reversible() {
        let mut a = TypeVersion::default();
        a.add("x", h(1));
        a.add("y", h(2));
        let mut b = TypeVersion::default();
        b.add("y", h(2));
        b.add("x", h(1));
        assert_eq!(a, b);
        let before = a;
        a.remove("x", h(1));
        a.add("x", h(3));
        assert_ne!(a, before);
        a.remove("x", h(3));
        a.add("x", h(1));
        assert_eq!(a, before);
        assert_eq!(a.to_string(), b.to_string());
    }

    #[test]
    fn same_hash_under_another_name_differs() {
        let mut a = TypeVersion::default();
        a.add("x", h(1));
        let mut b = TypeVersion::default();
        b.add("y", h(1));
        assert_ne!(a, b);
    }
}
