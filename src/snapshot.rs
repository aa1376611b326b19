//! The immutable snapshot every reader sees, how it is built, and where it is published.
//!
//! A [`Snapshot`] holds every Envoy resource, encoded once ([`EncodedResource`]), in persistent maps
//! so that building the next one from the previous one costs only what changed. It is published
//! through a [`SnapshotStore`] (`arc-swap` plus a bell that wakes streams): readers never lock, and a
//! slow reader simply loads the newest snapshot when it gets round to it (latest wins).
//!
//! Each snapshot also remembers what changed in the last [`HISTORY_LEN`] builds, so a stream that
//! last sent at sequence `s` finds what to send by looking at those changes, not by diffing the
//! mesh.

mod builder;
mod history;
mod listeners;
mod locality;
mod mesh;
pub(crate) mod metrics;
mod store;
mod version;
mod vhds;

pub use builder::{BuildInput, SnapshotBuilder};
pub use history::{ChangeSet, Changes, HISTORY_LEN};
pub use listeners::{L4Index, ListenerInputs, PortIndex};
pub use locality::{LocalityId, MAX_PROXY_LOCALITIES};
pub use mesh::{MeshBuilder, run_builder};
pub use store::{Listener, SnapshotStore};
pub use version::TypeVersion;
pub(crate) use vhds::names_of as virtual_host_names_of;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use imbl::OrdMap;
use tributary_registries::Hostname;

use crate::aggregate::MergedService;
use crate::envoy::{ConfigIssue, EncodedResource, ResourceType};

/// One resource in a snapshot, with the build that last changed its content.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The resource, shared by every stream and every later snapshot that did not change it.
    pub resource: Arc<EncodedResource>,
    /// The snapshot `seq` in which this content first appeared.
    pub changed_seq: u64,
}

/// Content equality: entries are equal when their resources encode to the same bytes, whichever
/// build produced them. This is what `OrdMap::diff` compares, so a delta stream finds what its
/// client lacks by diffing the map it last sent from against the newest one; shared subtrees are
/// skipped, so that costs the size of the change.
impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.resource, &other.resource)
            || (self.resource.hash == other.resource.hash
                && self.resource.name == other.resource.name)
    }
}

/// Every resource of one type, with the type's content-derived version.
#[derive(Debug, Clone, Default)]
pub struct TypeResources {
    /// Name → resource, ordered by name so responses are deterministic.
    pub entries: OrdMap<Arc<str>, Entry>,
    /// Version of the whole set: changes exactly when a resource is added, removed or changed, and is
    /// the same on every replica for the same content (SOTW-7, TRANS-12).
    pub version: TypeVersion,
}

impl TypeResources {
    /// The resource named `name`.
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.get(name)
    }

    /// Number of resources.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// An immutable view of the whole mesh as Envoy resources.
#[derive(Debug)]
pub struct Snapshot {
    /// Build number within this process (1, 2, ...). Never sent to clients: versions are content
    /// derived; `seq` only orders snapshots for change tracking.
    pub seq: u64,
    /// When the first registry event folded into this build was received; streams measure
    /// `pilot_proxy_convergence_time` from here.
    pub triggered_at: Instant,
    pub(crate) types: [Arc<TypeResources>; ResourceType::COUNT],
    pub(crate) history: history::History,
    /// The merged services this snapshot was built from, for debug views.
    pub services: OrdMap<Hostname, Arc<MergedService>>,
    /// Input that could not be turned into valid config, as of this snapshot.
    pub issues: Arc<Vec<ConfigIssue>>,
    /// Listener variants for nodes that asked for another bind address.
    pub(crate) listeners: listeners::BoundListeners,
    /// API listeners (`<host>:<port>`, `<host>`) for proxyless gRPC clients only. Their changes are
    /// recorded in the history under [`ResourceType::Listener`]; the names never collide with
    /// Envoy's `0.0.0.0_<port>` listeners.
    pub(crate) api_listeners: Arc<TypeResources>,
    /// Load assignments that differ by proxy locality, and their variants per locality.
    pub(crate) located: locality::LocatedEndpoints,
    /// The route configurations as VHDS clients get them, and the [`ResourceType::VirtualHost`]
    /// resources (`types` holds none): built with the snapshot once a VHDS client read an earlier
    /// one, else split on this snapshot's first VHDS read (`vhds.rs`).
    pub(crate) vhds: OnceLock<vhds::VhdsForm>,
    /// Raised by the first VHDS read of any snapshot of the same builder: from then on each build
    /// brings the VHDS form in step.
    pub(crate) vhds_demand: Arc<AtomicBool>,
}

/// Which variant of the per-node resources a client sees. LDS differs by bind address and client
/// kind, EDS by proxy locality.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum View {
    /// An Envoy whose listeners bind to `0.0.0.0`.
    #[default]
    Envoy,
    /// An Envoy whose listeners bind to this address (node metadata `LISTENER_ADDRESS`).
    Bound(IpAddr),
    /// A proxyless gRPC client: LDS holds the API listeners, never Envoy's socket listeners.
    Proxyless,
    /// Any of the above (`bind`, `proxyless` as there) for a node in `locality`: its EDS is that
    /// locality's variant (`localityLbSetting`).
    Located {
        /// Where its listeners bind (`None` = `0.0.0.0`).
        bind: Option<IpAddr>,
        /// Whether it is a proxyless gRPC client.
        proxyless: bool,
        /// Its locality.
        locality: LocalityId,
    },
    /// An Envoy on delta xDS that takes its virtual hosts over VHDS: its route configurations have
    /// none, and it sees the [`ResourceType::VirtualHost`] resources (no other view does).
    /// Everything else as the Envoy view for `bind` and `locality`.
    Vhds {
        /// Where its listeners bind (`None` = `0.0.0.0`).
        bind: Option<IpAddr>,
        /// Its locality, if it has one.
        locality: Option<LocalityId>,
    },
}

impl View {
    /// The Envoy view for listeners bound to `bind` (`None` = the default `0.0.0.0`).
    pub fn bound(bind: Option<IpAddr>) -> Self {
        bind.map_or(View::Envoy, View::Bound)
    }

    /// This view without its locality: what decides everything but EDS.
    pub fn without_locality(self) -> Self {
        match self {
            View::Located {
                proxyless: true, ..
            } => View::Proxyless,
            View::Located { bind, .. } => View::bound(bind),
            View::Vhds { bind, .. } => View::Vhds {
                bind,
                locality: None,
            },
            other => other,
        }
    }

    /// Whether this view takes its virtual hosts over VHDS.
    pub fn vhds(self) -> bool {
        matches!(self, View::Vhds { .. })
    }

    /// The same view with inline virtual hosts (what it sees of every type but RDS and VHDS).
    fn inline(self) -> Self {
        match self {
            View::Vhds {
                bind,
                locality: Some(locality),
            } => View::Located {
                bind,
                proxyless: false,
                locality,
            },
            View::Vhds {
                bind,
                locality: None,
            } => View::bound(bind),
            other => other,
        }
    }
}

impl Snapshot {
    /// The resources of type `ty` as a node with the default listener address sees them.
    pub fn resources(&self, ty: ResourceType) -> &TypeResources {
        &self.types[ty.index()]
    }

    /// The resources of type `ty` as a client with `view` sees them. Listeners differ between
    /// views, EDS by locality, and RDS and VHDS for VHDS views: for another bind address their names and `changed_seq` are the same as the
    /// default's, and API listener changes are in the same history, so change tracking is shared.
    pub fn resources_for(&self, ty: ResourceType, view: View) -> Arc<TypeResources> {
        match (ty, view) {
            (ResourceType::Route, View::Vhds { .. }) => Arc::clone(&self.vhds_form().routes),
            (ResourceType::VirtualHost, View::Vhds { .. }) => {
                Arc::clone(&self.vhds_form().virtual_hosts)
            }
            // Only VHDS views see virtual hosts as resources of their own.
            (ResourceType::VirtualHost, _) => Arc::new(TypeResources::default()),
            (_, View::Vhds { .. }) => self.resources_for(ty, view.inline()),
            (ResourceType::Endpoint, View::Located { locality, .. }) => {
                self.located.for_locality(locality, &self.types[ty.index()])
            }
            (_, View::Located { .. }) => self.resources_for(ty, view.without_locality()),
            (ResourceType::Listener, View::Bound(ip)) => {
                self.listeners.bound_to(ip, self.resources(ty))
            }
            (ResourceType::Listener, View::Proxyless) => Arc::clone(&self.api_listeners),
            _ => Arc::clone(&self.types[ty.index()]),
        }
    }

    /// How many per-locality EDS variants this snapshot has built: one per distinct proxy
    /// locality that asked, however many proxies share it.
    pub fn locality_variants_built(&self) -> u64 {
        self.located.built()
    }

    /// The API listeners proxyless gRPC clients see.
    pub fn api_listeners(&self) -> &TypeResources {
        &self.api_listeners
    }

    /// What changed in type `ty` after snapshot `since`, up to this one; `None` when `since` is older
    /// than the history kept, and the caller must compare by [`Entry::changed_seq`] instead.
    pub fn changes_since(&self, ty: ResourceType, since: u64) -> Option<Changes> {
        if ty == ResourceType::VirtualHost && self.vhds.get().is_none_or(|f| since < f.split_at) {
            // The builds up to the first split recorded no virtual host.
            return None;
        }
        self.history.since(ty, since, self.seq)
    }

    /// The VHDS form, split now if no build made it (the first VHDS read of this snapshot).
    fn vhds_form(&self) -> &vhds::VhdsForm {
        self.vhds.get_or_init(|| {
            // Raised first, so a build that starts meanwhile splits too rather than leave its
            // snapshot without the form.
            self.vhds_demand.store(true, Ordering::Relaxed);
            vhds::VhdsForm::split(self.resources(ResourceType::Route), self.seq)
        })
    }
}
