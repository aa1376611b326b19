//! The Consul registry: services registered in Consul (VMs, Nomad jobs, anything with an agent)
//! bridged into the mesh.
//!
//! # How it reads Consul
//!
//! HTTP blocking queries (`reqwest`, rustls): one watch on `/v1/catalog/services` for the set of
//! services, and one on `/v1/health/service/<name>` per service for its instances with their node
//! and service checks. Each watch follows Consul's blocking-query rules exactly
//! (module `blocking`, REG-6): it sends back `X-Consul-Index` with `wait` (default 5 min),
//! resets to 0 when the index goes backwards, never blocks on an index below 1, is rate limited by
//! a token bucket instead of sleeping, and an answer that changes nothing pushes nothing.
//!
//! # How it scales
//!
//! At most `max_concurrent_watches` per-service blocking queries are in flight (each is an HTTP
//! connection; Consul agents allow 200 per client by default). In steady state a catalog costs
//! about `services / wait` requests per second (1,000 services at the default 5 min wait: 3.3/s
//! predicted, 3.1/s measured against the fake).
//! With more services than slots, services take turns with proportionally shorter waits, which
//! keeps that rate but lets a change to a waiting service be seen up to one `wait` late. A shared
//! token bucket (`max_requests_per_second`) caps the rate under churn.
//!
//! # Faults (REG-5, REG-8, REG-15)
//!
//! Consul down, refusing, answering 5xx, hanging (a request takes longer than its wait plus
//! Consul's jitter plus [`client::TIMEOUT_GRACE`]) or without a leader: the last good state keeps
//! being served, the registry reports `Degraded` with what to check, retries back off
//! exponentially with jitter, and no deletion is sent until it is healthy again. An error is never
//! read as "no services". On recovery only real differences are sent. A Consul unreachable at
//! startup never syncs; the aggregate's `sync_timeout` then serves the other registries.
//!
//! The mapping onto the model is in module `convert` and the README. `fake` (tests and the
//! `test-util` feature) is an in-process Consul speaking the real wire format.
//! The body parsers ([`parse_service_list`], [`parse_health`]) and the [`Mapping`] are public so the
//! fuzz targets (SEC-12) drive exactly what the client and the worker run on Consul's answers.

mod blocking;
mod client;
mod config;
mod convert;
#[cfg(any(test, feature = "test-util"))]
pub mod fake;
mod watch;
mod wire;
mod worker;

#[cfg(test)]
mod tests;

use futures::FutureExt;
use futures::future::BoxFuture;
use tracing::Instrument;

use crate::config::{AdapterConfig, BuiltRegistry, RegistryConfigError};
use crate::model::RegistryId;
use crate::registry::{Registry, RegistryError, RegistrySink};

pub use client::{ClientError, TIMEOUT_GRACE};
pub use config::{
    BackoffConfig, ConfigError, ConsulConfig, DEFAULT_ADDRESS, DEFAULT_HOSTNAME_TEMPLATE, MAX_WAIT,
    TlsConfig, WarningPolicy,
};
pub use convert::{Conversion, Mapping, TAGS_LABEL};
pub use wire::{HealthEntry, ServiceList, parse_health, parse_service_list};

/// A Consul registry instance. Create it with [`ConsulRegistry::new`], start it with
/// [`Registry::run`].
#[derive(Debug)]
pub struct ConsulRegistry {
    config: ConsulConfig,
}

impl ConsulRegistry {
    /// A registry reading the Consul `config` describes.
    pub fn new(config: ConsulConfig) -> Self {
        Self { config }
    }
}

impl AdapterConfig for ConsulConfig {
    fn name(&self) -> &str {
        &self.name
    }

    fn validate(&self) -> Result<(), RegistryConfigError> {
        ConsulConfig::validate(self).map_err(RegistryConfigError::invalid)
    }

    fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) {
        ConsulConfig::apply_env(self, env)
    }

    fn build(&self) -> BuiltRegistry {
        BuiltRegistry::from_config(self, ConsulRegistry::new)
    }
}

impl Registry for ConsulRegistry {
    fn id(&self) -> RegistryId {
        RegistryId::new(&self.config.name)
    }

    fn run(self: Box<Self>, sink: RegistrySink) -> BoxFuture<'static, Result<(), RegistryError>> {
        let span = tracing::info_span!("consul_registry", registry = %self.config.name);
        let config = self.config;
        async move {
            config
                .validate()
                .map_err(|e| RegistryError::Config(e.to_string()))?;
            let client =
                client::Client::new(&config).map_err(|e| RegistryError::Config(e.to_string()))?;
            tracing::info!(
                address = client.address(),
                datacenter = config.datacenter.as_deref().unwrap_or("<agent's>"),
                wait = ?config.wait,
                max_concurrent_watches = config.max_concurrent_watches,
                "consul registry starting"
            );
            worker::Worker::new(config, client, sink).run().await
        }
        .instrument(span)
        .boxed()
    }
}
