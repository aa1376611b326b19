//! The whole-type `resources` bytes of recent versions, shared by every wildcard stream.
//!
//! A wildcard LDS/CDS response carries every resource of the type (SOTW-24), and every wildcard
//! stream with the same bind address sends exactly the same bytes for the same type version
//! (versions are content-derived and entries are in name order). So those bytes are concatenated
//! once per version and shared: such a response is then two chunks, a per-stream header and this
//! one shared `Bytes`, which is the `raw` floor of `shared/reference/floor.md` (no per-stream list
//! of per-resource handles while a large response is in flight).

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard};

use bytes::{BufMut, Bytes, BytesMut};

use crate::envoy::ResourceType;
use crate::snapshot::{TypeResources, TypeVersion};

/// How many recent (type, bind address, version) sets are kept. A push needs the newest one per
/// type; a few more cover streams still walking an older snapshot and nodes with their own bind
/// address. Each entry is one full type (up to a few MiB), so keep this small.
const FULL_SET_CACHE_LEN: usize = 8;

type Key = (ResourceType, Option<IpAddr>, TypeVersion);

/// Recently built full sets, newest last.
#[derive(Default)]
pub(crate) struct FullSetCache {
    /// Locked only to look up or insert; concatenation happens outside the lock.
    recent: Mutex<VecDeque<(Key, Bytes)>>,
}

impl FullSetCache {
    fn lock(&self) -> MutexGuard<'_, VecDeque<(Key, Bytes)>> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The concatenated `resources` entries of `res` (type `ty`, as seen with `bind`).
    pub(crate) fn get(&self, ty: ResourceType, bind: Option<IpAddr>, res: &TypeResources) -> Bytes {
        let key = (ty, bind, res.version);
        if let Some((_, bytes)) = self.lock().iter().find(|(k, _)| *k == key) {
            return bytes.clone();
        }
        // Two streams may build the same set at once; both results are identical and one wins.
        let len = res
            .entries
            .values()
            .map(|e| e.resource.sotw_entry().len())
            .sum();
        let mut buf = BytesMut::with_capacity(len);
        for e in res.entries.values() {
            buf.put_slice(e.resource.sotw_entry());
        }
        let bytes = buf.freeze();
        let mut recent = self.lock();
        if !recent.iter().any(|(k, _)| *k == key) {
            recent.push_back((key, bytes.clone()));
            while recent.len() > FULL_SET_CACHE_LEN {
                recent.pop_front();
            }
        }
        bytes
    }
}
