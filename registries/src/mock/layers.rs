//! What the mock registry serves: the file's services with the control API's edits on top.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::file_format::Services;
use crate::model::{Hostname, ServiceState};

/// What a mock registry serves at one moment: a persistent map, so taking a copy per control call
/// is O(1) and two views made from each other are compared in the size of their difference
/// (`OrdMap::diff` skips shared subtrees, `Arc` values compare by pointer first). Each change then
/// costs the change, not the registry (a load test writes thousands of services one call at a
/// time).
pub(crate) type View = imbl::OrdMap<Hostname, Arc<ServiceState>>;

/// `services` as a [`View`].
pub(crate) fn view_of(services: &Services) -> View {
    services
        .iter()
        .map(|(h, s)| (h.clone(), Arc::new(s.clone())))
        .collect()
}

/// The two sources of a mock registry's services.
///
/// - `file`: the last good read of the file (or the inline services).
/// - `api`: the control API's edits, per hostname: `Some` replaces or adds the service, `None`
///   hides it.
///
/// What is served is `api` where it has an entry, else `file`. A reload re-asserts only the
/// hostnames whose file definition changed (added, edited or removed): their API edits are
/// dropped. Hostnames the file left unchanged keep their edits; hostnames the file never defined
/// are never touched by a reload.
///
/// `served` is that overlay, kept up to date by each edit (O(change)) rather than recomputed.
#[derive(Debug, Default)]
pub(crate) struct Layers {
    file: Services,
    api: BTreeMap<Hostname, Option<Arc<ServiceState>>>,
    served: View,
}

impl Layers {
    /// Layers serving `file` with no API edits.
    pub(crate) fn new(file: Services) -> Self {
        Self {
            served: view_of(&file),
            file,
            api: BTreeMap::new(),
        }
    }

    /// Everything served now (a copy in O(1)).
    pub(crate) fn desired(&self) -> View {
        self.served.clone()
    }

    /// The served state of one hostname.
    pub(crate) fn get(&self, host: &Hostname) -> Option<&ServiceState> {
        self.served.get(host).map(|s| &**s)
    }

    /// Applies a new good read of the file.
    pub(crate) fn replace_file(&mut self, file: Services) {
        let changed: Vec<Hostname> = self
            .file
            .keys()
            .chain(file.keys())
            .filter(|h| self.file.get(*h) != file.get(*h))
            .cloned()
            .collect();
        for host in changed {
            self.api.remove(&host);
            match file.get(&host) {
                Some(state) => self.served.insert(host, Arc::new(state.clone())),
                None => self.served.remove(&host),
            };
        }
        self.file = file;
    }

    /// A control-API upsert.
    pub(crate) fn upsert(&mut self, state: ServiceState) {
        let host = state.service.hostname.clone();
        let state = Arc::new(state);
        self.api.insert(host.clone(), Some(Arc::clone(&state)));
        self.served.insert(host, state);
    }

    /// A control-API delete; whether the hostname was served.
    pub(crate) fn delete(&mut self, host: &Hostname) -> bool {
        if self.file.contains_key(host) {
            self.api.insert(host.clone(), None);
        } else {
            self.api.remove(host);
        }
        self.served.remove(host).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::tests::services;

    fn svc(host: &str, addr: &str) -> String {
        format!(
            "- {{hostname: {host}, ports: [{{name: http, port: 80, protocol: HTTP}}], endpoints: [{{address: {addr}}}]}}\n"
        )
    }

    fn addr(l: &Layers, host: &str) -> Option<String> {
        l.get(&Hostname::new(host).unwrap())
            .map(|s| s.endpoints[0].address.clone())
    }

    #[test]
    fn api_edits_sit_on_top_and_reload_reasserts_only_changed_file_hostnames() {
        let v1 = format!(
            "services:\n{}{}",
            svc("a.x", "1.0.0.1"),
            svc("b.x", "1.0.0.2")
        );
        let mut l = Layers::new(services(&v1));
        let api = services(&format!(
            "services:\n{}{}{}",
            svc("a.x", "9.0.0.1"),
            svc("b.x", "9.0.0.2"),
            svc("z.x", "9.0.0.9")
        ));
        for s in api.values() {
            l.upsert(s.clone());
        }
        assert_eq!(addr(&l, "a.x").as_deref(), Some("9.0.0.1"));

        // The file edits a.x only: a.x goes back to the file, b.x and z.x keep their edits.
        let v2 = format!(
            "services:\n{}{}",
            svc("a.x", "1.0.0.7"),
            svc("b.x", "1.0.0.2")
        );
        l.replace_file(services(&v2));
        assert_eq!(addr(&l, "a.x").as_deref(), Some("1.0.0.7"));
        assert_eq!(addr(&l, "b.x").as_deref(), Some("9.0.0.2"));
        assert_eq!(addr(&l, "z.x").as_deref(), Some("9.0.0.9"));

        // An identical reload changes nothing.
        l.replace_file(services(&v2));
        assert_eq!(addr(&l, "b.x").as_deref(), Some("9.0.0.2"));
    }

    #[test]
    fn api_delete_hides_a_file_hostname_until_the_file_changes_it() {
        let v1 = format!("services:\n{}", svc("a.x", "1.0.0.1"));
        let mut l = Layers::new(services(&v1));
        assert!(l.delete(&Hostname::new("a.x").unwrap()));
        assert!(!l.delete(&Hostname::new("a.x").unwrap()));
        assert!(l.desired().is_empty());
        l.replace_file(services(&v1));
        assert!(l.desired().is_empty(), "unchanged file keeps the delete");
        let v2 = format!("services:\n{}", svc("a.x", "1.0.0.2"));
        l.replace_file(services(&v2));
        assert_eq!(addr(&l, "a.x").as_deref(), Some("1.0.0.2"));
    }

    #[test]
    fn removing_a_hostname_from_the_file_removes_it_even_if_edited() {
        let v1 = format!(
            "services:\n{}{}",
            svc("a.x", "1.0.0.1"),
            svc("b.x", "1.0.0.2")
        );
        let mut l = Layers::new(services(&v1));
        l.upsert(
            services(&format!("services:\n{}", svc("a.x", "9.9.9.9")))
                [&Hostname::new("a.x").unwrap()]
                .clone(),
        );
        l.replace_file(services(&format!("services:\n{}", svc("b.x", "1.0.0.2"))));
        assert_eq!(addr(&l, "a.x"), None);
    }
}
