//! Registry-level tests (file source, CRD source, conformance) and helpers shared by the
//! module's unit tests.

mod conformance;
mod crd;
mod files;
mod rules;

use std::time::Duration;

use tokio::sync::mpsc;

use super::convert::Context;
use super::parse::{Document, parse_document};
use super::store::{Entry, Place};
use super::validate::{Valid, ValidServiceEntry};
use super::{ServiceEntryConfig, ServiceEntryRegistry};
use crate::model::{ClusterId, Hostname, Origin, RegistryId, ServiceState};
use crate::registry::{Change, Registry, RegistrySink, RegistryStatus, Rejection};
use crate::test_util::Observer;

/// The conversion context of these tests.
pub(super) fn ctx() -> Context {
    Context {
        origin: Origin {
            registry: RegistryId::new("se"),
            cluster: ClusterId::new("c1"),
        },
        trust_domain: "example.org".into(),
    }
}

/// The entry for one manifest document, as if read from `file` at line 1.
pub(super) fn entry(yaml: &str, file: &str) -> Entry {
    match parse_document(yaml, Some(1), "default", true) {
        Ok(Document::Object(p)) => Entry::new(
            *p,
            Place::File {
                path: file.into(),
                line: Some(1),
            },
            None,
        ),
        other => panic!("not an object: {other:?}"),
    }
}

/// The checked ServiceEntry of one manifest document.
pub(super) fn valid_se(yaml: &str) -> ValidServiceEntry {
    match entry(yaml, "t.yaml").valid.as_deref() {
        Some(Valid::ServiceEntry(se)) => se.clone(),
        other => panic!("not a valid ServiceEntry: {other:?} {yaml}"),
    }
}

/// How long registry-level tests wait for an expected event. Generous: real files and a real
/// HTTP fake share CI cores.
pub(super) const LIMIT: Duration = Duration::from_secs(10);

/// Tells the ServiceEntry harness's [`Observer`] apart.
pub(super) enum Entries {}

/// A running registry and what it has reported.
pub(super) type Run = Observer<Entries>;

impl Run {
    pub(super) fn start(config: ServiceEntryConfig) -> Self {
        Self::start_registry(ServiceEntryRegistry::new(config))
    }

    /// Starts `registry` as it is (with a rule publisher, say).
    pub(super) fn start_registry(registry: ServiceEntryRegistry) -> Self {
        Self::launch(Box::new(registry))
    }

    /// Applies events until `done` holds; panics after [`LIMIT`].
    pub(super) async fn wait(&mut self, what: &str, done: impl Fn(&Run) -> bool) {
        let deadline = tokio::time::Instant::now() + LIMIT;
        while !done(self) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, self.rx.recv()).await {
                Ok(Some(m)) => self.apply(m.event),
                Ok(None) => panic!("the registry stopped: {:?}", (&mut self.task).await),
                Err(_) => panic!(
                    "timed out waiting for {what}; view {:?}, status {:?}, rejected {:?}",
                    self.view.keys(),
                    self.status,
                    self.rejected
                ),
            }
        }
    }

    /// Applies whatever arrives within `quiet`; returns how many data changes came.
    pub(super) async fn settle(&mut self, quiet: Duration) -> usize {
        let mark = self.log.len();
        while let Ok(Some(m)) = tokio::time::timeout(quiet, self.rx.recv()).await {
            self.apply(m.event);
        }
        self.log.len() - mark
    }

    /// The served state of `host`.
    pub(super) fn get(&self, host: &str) -> Option<&ServiceState> {
        self.view
            .get(&Hostname::new(host).expect("test hostnames are valid"))
    }

    /// The rejections of `object` (`ServiceEntry ns/name`).
    pub(super) fn rejections_of(&self, object: &str) -> Vec<&Rejection> {
        self.rejected
            .iter()
            .filter(|r| r.object == object)
            .collect()
    }
}
