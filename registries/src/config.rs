//! One registry to run: the config file's `registries:` list holds [`RegistryConfig`]s, one
//! variant per adapter. Each adapter owns its settings (serde, validation, environment, what it
//! reads at start-up) and how it is built, through [`AdapterConfig`]; this file only lists the
//! adapters. Adding a registry is its folder plus one line in the `registries!` list below
//! (`docs/architecture.md`, "Adding a registry").

use std::error::Error;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::consul::ConsulConfig;
use crate::kubernetes::KubernetesConfig;
use crate::mock::{MockConfig, MockHandle};
use crate::registry::Registry;
use crate::serviceentry::ServiceEntryConfig;

/// Makes a fresh instance of one configured registry; called again for every restart.
pub type RegistryFactory = Box<dyn Fn() -> Box<dyn Registry> + Send + Sync>;

/// A built registry: the factory the supervisor restarts it with, and for a mock registry the
/// handle its control API drives (the same across restarts).
pub struct BuiltRegistry {
    /// Makes an instance.
    pub factory: RegistryFactory,
    /// The mock registry's handle, if this is one.
    pub mock: Option<MockHandle>,
}

impl BuiltRegistry {
    /// A registry with no handle: each (re)start is `make(config)` on a copy of `config`.
    pub fn from_config<C, R>(config: &C, make: fn(C) -> R) -> Self
    where
        C: Clone + Send + Sync + 'static,
        R: Registry + 'static,
    {
        let config = config.clone();
        Self {
            factory: Box::new(move || Box::new(make(config.clone()))),
            mock: None,
        }
    }
}

/// A registry config that cannot run.
#[derive(Debug, Error)]
pub enum RegistryConfigError {
    /// The adapter's settings are invalid; the adapter's error says which and why.
    #[error(transparent)]
    Invalid(Box<dyn Error + Send + Sync>),
    /// Something the registry reads at start-up (a file, a directory) is missing or broken.
    #[error("{kind} registry {name:?}: {why}")]
    Source {
        /// The registry type, as written in the config (`mock`, `service_entry`).
        kind: &'static str,
        /// The registry's name.
        name: String,
        /// What is wrong, with the file (and line) to fix.
        why: String,
    },
}

impl RegistryConfigError {
    /// The adapter's own validation error.
    pub fn invalid(e: impl Error + Send + Sync + 'static) -> Self {
        Self::Invalid(Box::new(e))
    }
}

/// What every adapter's config does; each adapter implements it next to its registry type.
pub trait AdapterConfig {
    /// The registry's configured name (its [`crate::RegistryId`]).
    fn name(&self) -> &str;

    /// Checks what can be checked without reading files or reaching a platform.
    fn validate(&self) -> Result<(), RegistryConfigError>;

    /// Fills what the config leaves unset from the environment variables the platform's own
    /// tools read. `env` is the lookup (the process environment at the edge, a map in tests).
    fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) {
        let _ = env;
    }

    /// Reads what the registry names (a file, a directory) and fails if it is missing or invalid:
    /// start-up runs this, so bad input is an exit, not an empty mesh.
    fn check_sources(&self) -> Result<(), RegistryConfigError> {
        Ok(())
    }

    /// Every problem in what the registry reads, one line each (`file[:line]: message`), for
    /// `tributary validate`: where [`Self::check_sources`] stops at what keeps the registry from
    /// starting, this goes on through every file and reports the objects it would reject.
    fn source_problems(&self) -> Vec<String> {
        Vec::new()
    }

    /// Builds the registry (validated again when an instance runs).
    fn build(&self) -> BuiltRegistry;
}

impl<C: AdapterConfig> AdapterConfig for Box<C> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn validate(&self) -> Result<(), RegistryConfigError> {
        (**self).validate()
    }
    fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) {
        (**self).apply_env(env)
    }
    fn check_sources(&self) -> Result<(), RegistryConfigError> {
        (**self).check_sources()
    }
    fn source_problems(&self) -> Vec<String> {
        (**self).source_problems()
    }
    fn build(&self) -> BuiltRegistry {
        (**self).build()
    }
}

/// Declares [`RegistryConfig`] with one variant per adapter and forwards to the adapter.
macro_rules! registries {
    ($($(#[$doc:meta])* $variant:ident($config:ty),)+) => {
        /// One registry to run, as the config file's `registries:` list names it
        /// (`type: consul`, ...).
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        pub enum RegistryConfig {
            $($(#[$doc])* $variant($config),)+
        }

        impl RegistryConfig {
            /// The adapter's config.
            pub fn adapter(&self) -> &dyn AdapterConfig {
                match self {
                    $(RegistryConfig::$variant(c) => c,)+
                }
            }

            /// The adapter's config, to fill it in.
            pub fn adapter_mut(&mut self) -> &mut dyn AdapterConfig {
                match self {
                    $(RegistryConfig::$variant(c) => c,)+
                }
            }
        }
    };
}

registries! {
    /// The mock registry: a YAML mesh file, reloaded on change, plus a gRPC control API.
    Mock(MockConfig),
    /// Kubernetes clusters: Services, EndpointSlices, Pods and Nodes through kube-rs watchers.
    /// Boxed: its config is several times the size of the others.
    Kubernetes(Box<KubernetesConfig>),
    /// A Consul catalog, watched with blocking queries (one datacenter per registry). Boxed: its
    /// settings are several times the size of the other variants'.
    Consul(Box<ConsulConfig>),
    /// Istio ServiceEntry / WorkloadEntry objects from a watched directory of manifests and/or a
    /// cluster's CRDs. Boxed, as the other large configs.
    ServiceEntry(Box<ServiceEntryConfig>),
}

impl RegistryConfig {
    /// The registry's configured name (its [`crate::RegistryId`]).
    pub fn name(&self) -> &str {
        self.adapter().name()
    }

    /// Checks what can be checked without reading files or reaching a platform.
    pub fn validate(&self) -> Result<(), RegistryConfigError> {
        self.adapter().validate()
    }

    /// Fills what the config leaves unset from the environment (see
    /// [`AdapterConfig::apply_env`]).
    pub fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) {
        self.adapter_mut().apply_env(env)
    }

    /// Reads what the registry names and fails if it is missing or invalid.
    pub fn check_sources(&self) -> Result<(), RegistryConfigError> {
        self.adapter().check_sources()
    }

    /// Every problem in what the registry reads (see [`AdapterConfig::source_problems`]).
    pub fn source_problems(&self) -> Vec<String> {
        self.adapter().source_problems()
    }

    /// Builds the registry.
    pub fn build(&self) -> BuiltRegistry {
        self.adapter().build()
    }
}
