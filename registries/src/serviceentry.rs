//! The ServiceEntry registry: Istio `ServiceEntry` and `WorkloadEntry` objects
//! (`networking.istio.io/v1`, also `v1beta1` / `v1alpha3`), accepted unchanged from a watched
//! directory of manifests and from a cluster's CRDs, converted the way istiod converts them.
//!
//! It is also the config store's reader: every config source (`config_sources:`, see
//! [`crate::config_source`]) runs as one instance. The same directory and CRD machinery reads
//! `DestinationRule` and `VirtualService` objects too; they are validated with
//! [`crate::rules`]' checks, reported like the others when invalid (keeping their last valid
//! version), and the valid ones are published to the [`crate::config_store::ConfigStore`].
//!
//! # Shape
//!
//! - `types`: the objects as written; `parse`: manifest text (or a CRD's JSON) → checked objects,
//!   every problem with its field (and line, for files); `checks` + `validate`: Istio's
//!   validation (REG-11) plus what tributary cannot serve.
//! - `store`: an object per source with its last valid version; `files`: the directory source
//!   ([`read_manifest`]: one file read and converted the same way, for tools and fuzzing);
//!   `cluster`: the CRD source (kube-runtime watchers, plus Pods for selectors).
//! - `convert`: one entry + the workloads it selects → one service per host; `catalog`: every
//!   object → the services served and the objects rejected.
//! - `xds`: the xDS config source (MCP over xDS), an ADS client reporting the CRD source's events.
//! - `worker`: the task that owns it all and reports changes, rejections, health and sync.
//!
//! # Contract
//!
//! Every object as soon as its source has read it (the directory at start, each CRD watch when it
//! has listed), `Synced` once all have; then only real changes. An invalid object is reported (`RegistryEvent::Rejected`, a log
//! line, `/debug/configz`) and every other object is still served; an object that becomes invalid
//! keeps its last valid version. A source that fails (directory gone, API server unreachable)
//! makes the registry `Degraded` and withdraws nothing.
//!
//! # Not done here
//!
//! Wildcard hosts and `DYNAMIC_DNS` (rejected, see `validate`); per-namespace visibility
//! (`exportTo` is recorded on each service, and `~` hides an entry, but every proxy sees every
//! other entry); writing status conditions back to the CRDs (read-only access suffices).

mod catalog;
pub(crate) mod checks;
mod cluster;
mod config;
mod convert;
mod files;
#[cfg(any(test, feature = "test-util"))]
pub mod fixtures;
mod parse;
mod store;
mod types;
mod validate;
mod worker;
mod xds;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::config::{AdapterConfig, BuiltRegistry, RegistryConfigError};
use crate::config_store::RulePublisher;
use crate::model::RegistryId;
use crate::registry::{Registry, RegistryError, RegistrySink};

pub use catalog::Catalog;
pub use config::{ConfigError, CrdSourceConfig, ServiceEntryConfig};
pub use files::watch::WatchError;
pub use files::{manifest_problems, read_manifest};
pub use types::{API_VERSIONS, GROUP};
pub use worker::{FILE_DEBOUNCE, FILE_DEBOUNCE_MAX};
pub use xds::{DEFAULT_NODE_ID, XdsProtocol, XdsSourceConfig, XdsTlsConfig};

use cluster::{Credentials, Settings};
use convert::Context;
use files::Directory;
use tokio_util::task::AbortOnDropHandle;
use worker::{ClusterSource, Feed, FileSource, Worker};

/// A ServiceEntry registry instance. Create it with [`ServiceEntryRegistry::new`], start it with
/// [`Registry::run`].
#[derive(Debug, Clone)]
pub struct ServiceEntryRegistry {
    config: ServiceEntryConfig,
    rules: Option<RulePublisher>,
}

impl AdapterConfig for ServiceEntryConfig {
    fn name(&self) -> &str {
        &self.name
    }

    fn validate(&self) -> Result<(), RegistryConfigError> {
        ServiceEntryConfig::validate(self).map_err(RegistryConfigError::invalid)
    }

    fn check_sources(&self) -> Result<(), RegistryConfigError> {
        let source = |why| RegistryConfigError::Source {
            kind: "service_entry",
            name: self.name.clone(),
            why,
        };
        self.check_directory().map_err(source)?;
        // The xDS source's TLS files are read now, so a typo stops start-up.
        if let Some(x) = &self.xds {
            xds::Settings::new(x.clone(), self.default_namespace.clone())
                .map_err(|e| source(e.to_string()))?;
        }
        Ok(())
    }

    fn source_problems(&self) -> Vec<String> {
        files::directory_problems(self)
    }

    fn build(&self) -> BuiltRegistry {
        BuiltRegistry::from_config(self, ServiceEntryRegistry::new)
    }
}

impl ServiceEntryRegistry {
    /// A registry for `config` (validated when it runs).
    pub fn new(config: ServiceEntryConfig) -> Self {
        Self {
            config,
            rules: None,
        }
    }

    /// Publishes the valid DestinationRules and VirtualServices it reads to `rules` (without,
    /// they are still validated and reported, but go nowhere).
    pub fn with_rules(mut self, rules: RulePublisher) -> Self {
        self.rules = Some(rules);
        self
    }

    async fn start(self, sink: RegistrySink) -> Result<(), RegistryError> {
        let c = self.config;
        c.validate()
            .map_err(|e| RegistryError::Config(e.to_string()))?;
        let ctx = Context {
            origin: c.origin(),
            trust_domain: c.trust_domain.clone(),
        };
        let files = match &c.directory {
            Some(dir) => Some(FileSource::open(
                Directory::new(dir.clone(), c.default_namespace.clone()),
                c.rescan_interval,
            )?),
            None => None,
        };
        let cluster = match c.kubernetes.clone() {
            // A kubeconfig that cannot be read or parsed is a config error, not an outage.
            Some(k) => Some(Settings {
                credentials: match &k.kubeconfig {
                    Some(path) => Credentials::from_file(path, k.context.clone())
                        .map_err(|e| RegistryError::Config(e.to_string()))?,
                    None => Credentials::InCluster,
                },
                config: k,
                cluster: c.cluster_id.clone(),
            }),
            None => None,
        };
        let cluster = cluster.map(|settings| {
            let settings = Arc::new(settings);
            let (tx, rx) = mpsc::channel(cluster::EVENT_CAPACITY);
            let span = tracing::info_span!("serviceentry_crds", cluster = %c.cluster_id);
            let feed = Feed::Crds {
                api: settings.api(),
            };
            let scopes = settings.scopes();
            let task = tokio::spawn(cluster::run(settings, tx).instrument(span));
            ClusterSource::new(feed, scopes, rx, AbortOnDropHandle::new(task))
        });
        let xds = match c.xds.clone() {
            Some(x) => Some(
                xds::Settings::new(x, c.default_namespace.clone())
                    .map_err(|e| RegistryError::Config(e.to_string()))?,
            ),
            None => None,
        };
        let cluster = match xds {
            Some(settings) => {
                let (tx, rx) = mpsc::channel(cluster::EVENT_CAPACITY);
                let span = tracing::info_span!("serviceentry_xds", address = %settings.address);
                let feed = Feed::Xds {
                    address: settings.address.clone(),
                };
                let task = tokio::spawn(xds::run(Arc::new(settings), tx).instrument(span));
                let task = AbortOnDropHandle::new(task);
                Some(ClusterSource::new(feed, xds::Settings::scopes(), rx, task))
            }
            None => cluster,
        };
        tracing::info!(
            directory = ?c.directory,
            crds = c.kubernetes.is_some(),
            xds = ?c.xds.as_ref().map(|x| &x.address),
            "ServiceEntry registry starting"
        );
        Worker::new(ctx, sink, files, cluster)
            .with_rules(self.rules)
            .run()
            .await
    }
}

impl Registry for ServiceEntryRegistry {
    fn id(&self) -> RegistryId {
        self.config.registry_id()
    }

    fn run(self: Box<Self>, sink: RegistrySink) -> BoxFuture<'static, Result<(), RegistryError>> {
        let span = tracing::info_span!("serviceentry_registry", registry = %self.config.name);
        self.start(sink).instrument(span).boxed()
    }
}
