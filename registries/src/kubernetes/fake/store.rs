//! The fake API server's objects: one collection per resource type, one resourceVersion counter
//! for all of them (as etcd has), an event log per collection for watches to resume from, and
//! compaction so that old versions answer `410 Gone`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::ResourceType;

/// Room for live events per watcher. A watcher that falls this far behind is closed, as a real
/// API server closes a watch that cannot keep up; the client resumes from its last version.
pub(crate) const NOTICE_CAPACITY: usize = 4096;

/// The first resourceVersion handed out; anything but 0, which means "any version" on the wire.
const FIRST_RESOURCE_VERSION: u64 = 1000;

/// A watch event type on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub(crate) fn wire(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change to one object, as logged and as broadcast to watchers.
#[derive(Debug, Clone)]
pub(crate) struct Logged {
    pub(crate) rv: u64,
    pub(crate) kind: EventType,
    /// The object before the change (for label-selector transitions), if any.
    pub(crate) old: Option<Arc<Value>>,
    /// The object after the change (for deletions: the last state, with the deletion's version).
    pub(crate) new: Arc<Value>,
}

/// What open watches are told.
#[derive(Debug, Clone)]
pub(crate) enum Notice {
    /// An object of `resource` changed.
    Event {
        resource: ResourceType,
        event: Logged,
    },
    /// Send a BOOKMARK at the current version to watches of `resource` that allow bookmarks.
    Bookmark { resource: ResourceType, rv: u64 },
    /// End watches of `resource` with an ERROR event (410 Expired): their version is compacted.
    Expire { resource: ResourceType, rv: u64 },
    /// End watches of `resource` normally, as when their `timeoutSeconds` elapse.
    End { resource: ResourceType },
}

/// One resource type's objects and history.
#[derive(Debug, Default)]
pub(crate) struct Collection {
    /// (namespace, name) → object; namespace is empty for cluster-scoped kinds.
    pub(crate) objects: BTreeMap<(String, String), Arc<Value>>,
    /// Every change after `compacted`, in order.
    pub(crate) log: Vec<Logged>,
    /// Versions at or below this are gone: watching from them answers 410.
    pub(crate) compacted: u64,
}

/// A consistent snapshot being paged through with `continue`.
#[derive(Debug)]
pub(crate) struct Paging {
    pub(crate) rv: u64,
    pub(crate) items: Vec<Arc<Value>>,
    pub(crate) offset: usize,
}

/// Everything the fake stores, behind one lock.
#[derive(Debug)]
pub(crate) struct Store {
    pub(crate) types: BTreeMap<String, ResourceType>,
    pub(crate) collections: HashMap<ResourceType, Collection>,
    pub(crate) rv: u64,
    pub(crate) pages: HashMap<String, Paging>,
    next_token: u64,
    next_uid: u64,
    pub(crate) notices: broadcast::Sender<Arc<Notice>>,
}

fn strip_volatile(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
        meta.remove("generation");
    }
    v
}

impl Store {
    pub(crate) fn new() -> Self {
        let (notices, _) = broadcast::channel(NOTICE_CAPACITY);
        Self {
            types: BTreeMap::new(),
            collections: HashMap::new(),
            rv: FIRST_RESOURCE_VERSION,
            pages: HashMap::new(),
            next_token: 1,
            next_uid: 1,
            notices,
        }
    }

    /// Registers a resource type so it can be served; idempotent.
    pub(crate) fn register(&mut self, rt: ResourceType) {
        self.types.insert(rt.path_key(), rt.clone());
        self.collections.entry(rt).or_default();
    }

    fn bump(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn record(&mut self, rt: &ResourceType, event: Logged) {
        if let Some(c) = self.collections.get_mut(rt) {
            c.log.push(event.clone());
        }
        // No receiver simply means no open watch.
        let _ = self.notices.send(Arc::new(Notice::Event {
            resource: rt.clone(),
            event,
        }));
    }

    /// Creates or updates an object. An update equal to the stored object (ignoring its version)
    /// is a no-op, as on a real API server: no new version, no event. Returns the stored object.
    pub(crate) fn apply(&mut self, rt: &ResourceType, mut obj: Value) -> Result<Value, String> {
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or("object has no metadata.name")?
            .to_string();
        let ns = match rt.namespaced {
            true => obj
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("default")
                .to_string(),
            false => String::new(),
        };
        let key = (ns.clone(), name);
        let old = self
            .collections
            .get(rt)
            .ok_or_else(|| format!("resource {} is not registered", rt.path_key()))?
            .objects
            .get(&key)
            .cloned();
        let obj_map = obj.as_object_mut().ok_or("object is not a JSON object")?;
        obj_map.insert("apiVersion".into(), json!(rt.api_version()));
        obj_map.insert("kind".into(), json!(rt.kind));
        let meta = obj_map
            .entry("metadata")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or("metadata is not an object")?;
        if rt.namespaced {
            meta.insert("namespace".into(), json!(ns));
        }
        match &old {
            Some(o) => {
                for k in ["uid", "creationTimestamp"] {
                    if let Some(v) = o.pointer(&format!("/metadata/{k}")) {
                        meta.insert(k.into(), v.clone());
                    }
                }
            }
            None => {
                if !meta.contains_key("uid") {
                    meta.insert("uid".into(), json!(format!("fake-uid-{}", self.next_uid)));
                    self.next_uid += 1;
                }
                meta.entry("creationTimestamp")
                    .or_insert_with(|| json!("2026-01-01T00:00:00Z"));
            }
        }
        if let Some(o) = &old
            && strip_volatile(o) == strip_volatile(&obj)
        {
            return Ok((**o).clone());
        }
        self.store(rt, key, obj, old)
    }

    /// Stores `obj` at a new version and logs the change.
    fn store(
        &mut self,
        rt: &ResourceType,
        key: (String, String),
        mut obj: Value,
        old: Option<Arc<Value>>,
    ) -> Result<Value, String> {
        let rv = self.bump();
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        let new = Arc::new(obj.clone());
        let c = self.collections.get_mut(rt).ok_or("not registered")?;
        c.objects.insert(key, new.clone());
        let kind = match old {
            Some(_) => EventType::Modified,
            None => EventType::Added,
        };
        self.record(rt, Logged { rv, kind, old, new });
        Ok(obj)
    }

    /// Stores the object again at a new version with unchanged content: a MODIFIED event that
    /// changes nothing (a status-only write elsewhere, a duplicate event).
    pub(crate) fn touch(&mut self, rt: &ResourceType, ns: &str, name: &str) -> Result<(), String> {
        let key = (ns_for(rt, ns), name.to_string());
        let old = self
            .collections
            .get(rt)
            .and_then(|c| c.objects.get(&key))
            .cloned()
            .ok_or_else(|| format!("no {} {ns}/{name}", rt.plural))?;
        self.store(rt, key, (*old).clone(), Some(old))?;
        Ok(())
    }

    /// Deletes an object; `false` if it did not exist.
    pub(crate) fn delete(&mut self, rt: &ResourceType, ns: &str, name: &str) -> bool {
        let key = (ns_for(rt, ns), name.to_string());
        let Some(old) = self
            .collections
            .get_mut(rt)
            .and_then(|c| c.objects.remove(&key))
        else {
            return false;
        };
        let rv = self.bump();
        let mut last = (*old).clone();
        if let Some(meta) = last.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(rv.to_string()));
        }
        self.record(
            rt,
            Logged {
                rv,
                kind: EventType::Deleted,
                old: Some(old),
                new: Arc::new(last),
            },
        );
        true
    }

    /// Forgets the history of `rt` up to now: watches from any earlier version get 410.
    pub(crate) fn compact(&mut self, rt: &ResourceType) {
        let rv = self.rv;
        if let Some(c) = self.collections.get_mut(rt) {
            c.compacted = rv;
            c.log.clear();
        }
    }

    /// Starts a paged list: the matching objects now, sorted by namespace and name.
    pub(crate) fn snapshot(&self, rt: &ResourceType, keep: impl Fn(&Value) -> bool) -> Paging {
        let items = self
            .collections
            .get(rt)
            .map(|c| c.objects.values().filter(|o| keep(o)).cloned().collect())
            .unwrap_or_default();
        Paging {
            rv: self.rv,
            items,
            offset: 0,
        }
    }

    /// Parks the rest of a list under a new continue token.
    pub(crate) fn park(&mut self, paging: Paging) -> String {
        let token = format!("fake-continue-{}", self.next_token);
        self.next_token += 1;
        self.pages.insert(token.clone(), paging);
        token
    }
}

/// The namespace key of an object of `rt`: empty for cluster-scoped kinds.
fn ns_for(rt: &ResourceType, ns: &str) -> String {
    match rt.namespaced {
        true => ns.to_string(),
        false => String::new(),
    }
}
