//! The mock registry: services from a YAML file (watched and reloaded live) or inline config, plus
//! a gRPC control API to edit them and inject faults. It feeds tests, demos and model-based checks
//! (REG-16) through exactly the same [`Registry`] contract as the real platform adapters.
//!
//! # What it serves: file vs control API
//!
//! The file (or the inline `services`) owns the hostnames it defines. Control-API upserts, deletes
//! and endpoint replacements apply *on top*, per hostname. A reload re-asserts only the hostnames
//! whose definition in the file changed since the last good read (added, edited or removed): their
//! API edits are discarded and the file's version is served. Hostnames the file left unchanged keep
//! their API edits, and hostnames the file never defined (created through the API) are never
//! touched by a reload. An invalid, half-written or deleted file is rejected whole: the last good
//! state keeps being served and the registry reports `Degraded` (logged with `tracing::error!`)
//! until a good file clears it.
//!
//! # What it emits
//!
//! The whole state once, then `Synced`, then only real changes: a hostname whose full state did
//! not change produces no event (REG-14). Everything carries `Origin { registry: name, cluster }`.
//!
//! # Faults and sync control ([`Fault`], [`MockHandle`])
//!
//! - **delay**: every change is delivered `delay` after it is made.
//! - **error**: reports `Degraded { reason: message }`; changes made meanwhile are held and their
//!   net effect is delivered (after `Healthy`) when cleared. The aggregate keeps serving the last
//!   good state.
//! - **stall**: the registry goes silent, like a hung platform request: no changes, no status,
//!   until cleared.
//! - **pause / resume sync**: stop delivering changes (status still flows); on resume, deliver the
//!   coalesced net changes.
//! - **hold_sync** (config) / **release sync**: nothing at all is delivered, not even the initial
//!   state, until released — to test that nothing is served before sync (TRANS-11).
//!
//! Held changes always go out as one net diff against what was last delivered, so a change made
//! and undone while held produces nothing.

mod config;
mod control;
mod convert;
mod delivery;
mod demo;
mod diff;
// Its YAML line locator is shared with the ServiceEntry registry.
pub(crate) mod file_format;
mod handle;
mod layers;
mod watch;
mod worker;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::config::{AdapterConfig, BuiltRegistry, RegistryConfigError};
use crate::model::RegistryId;
use crate::registry::{Registry, RegistryError, RegistrySink};

pub use config::{ConfigError, MockConfig};
pub use control::{MockControl, reflection_services};
pub use convert::{spec_from_proto, spec_to_proto};
pub use demo::{DEMO_ENDPOINT_PORTS, DEMO_YAML, DemoEndpoint, demo_config, demo_endpoints};
pub use file_format::{
    EndpointSpec, FieldPath, FileError, InvalidField, MockFile, PortSpec, ServiceSpec, SpecError,
};
pub use handle::{Fault, MockError, MockHandle, MockState};
pub use watch::WatchError;
pub use worker::{FILE_DEBOUNCE, FILE_DEBOUNCE_MAX};

/// The generated protobuf types, client and server of `tributary.mock.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("tributary.mock.v1");

    /// The encoded `FileDescriptorSet` of `tributary.mock.v1`, for gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/mock_descriptor.bin"));
}

/// A mock registry instance. Create it with [`MockRegistry::new`], start it with
/// [`Registry::run`], drive it with the [`MockHandle`].
///
/// Cloning gives another instance of the same registry, driven by the same handle: a supervisor
/// restarts a dead instance with a clone, and the handle (the control API) keeps working. Only one
/// instance runs at a time; a clone started early waits for the previous one to end.
#[derive(Debug, Clone)]
pub struct MockRegistry {
    config: MockConfig,
    commands: Arc<tokio::sync::Mutex<mpsc::Receiver<Command>>>,
}

use handle::Command;

impl AdapterConfig for MockConfig {
    fn name(&self) -> &str {
        &self.name
    }

    /// Nothing before [`AdapterConfig::check_sources`]: `--mock-file` may still replace the file
    /// after the config file is read, and the checks look at both.
    fn validate(&self) -> Result<(), RegistryConfigError> {
        Ok(())
    }

    fn check_sources(&self) -> Result<(), RegistryConfigError> {
        MockConfig::validate(self).map_err(RegistryConfigError::invalid)?;
        self.check_file().map_err(|e| RegistryConfigError::Source {
            kind: "mock",
            name: self.name.clone(),
            why: e.to_string(),
        })
    }

    /// Every (re)start is a clone of one instance, so the handle (the control API) survives
    /// restarts.
    fn build(&self) -> BuiltRegistry {
        let (registry, handle) = MockRegistry::new(self.clone());
        BuiltRegistry {
            factory: Box::new(move || Box::new(registry.clone())),
            mock: Some(handle),
        }
    }
}

impl MockRegistry {
    /// A registry for `config` and the handle that drives it.
    pub fn new(config: MockConfig) -> (MockRegistry, MockHandle) {
        let (tx, commands) = mpsc::channel(handle::COMMAND_CAPACITY);
        let commands = Arc::new(tokio::sync::Mutex::new(commands));
        (MockRegistry { config, commands }, MockHandle::new(tx))
    }

    /// Runs with file-change signals from `file_events` instead of a real watch (tests).
    async fn run_with(
        self,
        sink: RegistrySink,
        file_events: Option<mpsc::Receiver<()>>,
    ) -> Result<(), RegistryError> {
        let config = self.config;
        // Held for the instance's life; released when it ends, even by a panic.
        let commands = self.commands.lock_owned().await;
        config
            .validate()
            .map_err(|e| RegistryError::Config(e.to_string()))?;
        let origin = config.origin();
        let (initial, file) = match &config.file {
            Some(path) => {
                // Watch before reading, so an edit between the two is not missed.
                let (watch, events) = match file_events {
                    Some(events) => (None, events),
                    None => {
                        let (watch, events) = watch::watch_file(path)
                            .map_err(|e| RegistryError::Config(e.to_string()))?;
                        (Some(watch), events)
                    }
                };
                let initial = worker::read_off_runtime(path.clone(), origin.clone())
                    .await
                    .map_err(|e| RegistryError::Config(e.to_string()))?;
                let source = worker::FileSource {
                    path: path.clone(),
                    events,
                    _watch: watch,
                };
                (initial, Some(source))
            }
            None => {
                let initial = file_format::validate_services(&config.services, &origin)
                    .map_err(|e| RegistryError::Config(e.to_string()))?;
                (initial, None)
            }
        };
        tracing::info!(
            services = initial.len(),
            file = config.file.as_ref().map(|f| f.display().to_string()),
            hold_sync = config.hold_sync,
            "mock registry starting"
        );
        worker::Worker::new(origin, initial, config.hold_sync, sink, commands, file)
            .run()
            .await
    }
}

impl Registry for MockRegistry {
    fn id(&self) -> RegistryId {
        RegistryId::new(&self.config.name)
    }

    fn run(self: Box<Self>, sink: RegistrySink) -> BoxFuture<'static, Result<(), RegistryError>> {
        let span = tracing::info_span!("mock_registry", registry = %self.config.name);
        self.run_with(sink, None).instrument(span).boxed()
    }
}
