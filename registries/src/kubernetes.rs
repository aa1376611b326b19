//! The Kubernetes registry: Services, EndpointSlices (`discovery.k8s.io/v1`), Pods and Nodes of
//! one or more clusters, read through kube-runtime watchers and reflector stores and converted the
//! way istiod converts them.
//!
//! # Shape
//!
//! - `watch`: per cluster, one kube-runtime `watcher` per kind (and namespace) into a reflector
//!   store; relists swap the store atomically at `InitDone` (REG-1).
//! - `convert`: a Service and its EndpointSlices → one `ServiceState` (hostname, ports and
//!   protocols, VIP for the cluster, resolution; endpoints with pod labels, service account,
//!   locality, health from slice conditions).
//! - `shards`: the converted services of one cluster, re-converted only for what an event
//!   touches, reported only when they change (REG-3, REG-14).
//! - `cluster`: one task per cluster owning its client, watches and shards; health from watch
//!   failures and recoveries (REG-2).
//! - `worker`: the registry task: merges clusters per hostname (a VIP per cluster, union of
//!   endpoints), follows the kubeconfig directory (REG-9, BUG-15), reports to the aggregate.
//! - `fake` (tests and the `test-util` feature): a fake API server speaking the real wire format.
//!
//! # Contract
//!
//! The full state of each hostname once every configured cluster has listed (remote clusters up
//! to `remote_sync_timeout`), then `Synced`, then only real changes. API failures report
//! `Degraded` and withdraw nothing: the stores keep their contents until a successful list
//! replaces them, and kube-runtime retries with our backoff.

mod cluster;
mod config;
mod convert;
#[cfg(any(test, feature = "test-util"))]
pub mod fake;
mod remote;
mod shards;
mod watch;
mod worker;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use tracing::Instrument;

use crate::config::{AdapterConfig, BuiltRegistry, RegistryConfigError};
use crate::model::{ClusterId, RegistryId};
use crate::registry::{Registry, RegistryError, RegistrySink};

pub use crate::support::kube_client::ClientError;
pub use config::{ConfigError, KubernetesConfig, RemoteCluster};
pub use remote::DirError;

use crate::support::backoff::RetryBackoff;
use crate::support::kube_client::{Credentials, RateLimitLayer};
use cluster::ClusterSettings;
use convert::Context;
use watch::WatchSettings;
use worker::{Worker, WorkerSetup};

/// A Kubernetes registry instance. Create it with [`KubernetesRegistry::new`], start it with
/// [`Registry::run`].
#[derive(Debug, Clone)]
pub struct KubernetesRegistry {
    config: KubernetesConfig,
}

impl AdapterConfig for KubernetesConfig {
    fn name(&self) -> &str {
        &self.name
    }

    fn validate(&self) -> Result<(), RegistryConfigError> {
        KubernetesConfig::validate(self).map_err(RegistryConfigError::invalid)
    }

    fn build(&self) -> BuiltRegistry {
        BuiltRegistry::from_config(self, KubernetesRegistry::new)
    }
}

impl KubernetesRegistry {
    /// A registry for `config` (validated when it runs).
    pub fn new(config: KubernetesConfig) -> Self {
        Self { config }
    }

    fn setup(&self) -> Result<WorkerSetup, RegistryError> {
        let c = &self.config;
        c.validate()
            .map_err(|e| RegistryError::Config(e.to_string()))?;
        let creds_err = |e: ClientError| RegistryError::Config(e.to_string());
        let primary = match &c.kubeconfig {
            Some(path) => Credentials::from_file(path, c.context.clone()).map_err(creds_err)?,
            None => Credentials::InCluster,
        };
        let mut configured = vec![(c.primary(), primary)];
        for rc in &c.clusters {
            let creds =
                Credentials::from_file(&rc.kubeconfig, rc.context.clone()).map_err(creds_err)?;
            configured.push((ClusterId::new(&rc.cluster_id), creds));
        }
        let backoff = RetryBackoff::new(c.retry_initial, c.retry_max);
        let settings = ClusterSettings {
            watch: WatchSettings {
                namespaces: c.namespaces.clone(),
                label_selector: c.label_selector.clone(),
                timeout_secs: u32::try_from(c.watch_timeout.as_secs()).unwrap_or(290),
                backoff: backoff.clone(),
            },
            rate: RateLimitLayer {
                qps: c.qps,
                burst: c.burst,
            },
            ctx: Context {
                origin: crate::model::Origin {
                    registry: c.registry_id(),
                    cluster: c.primary(),
                },
                domain: c.domain.clone(),
                trust_domain: c.trust_domain.clone(),
            },
            retry: backoff,
        };
        Ok(WorkerSetup {
            settings: Arc::new(settings),
            primary: c.primary(),
            configured,
            dir: c.kubeconfig_dir.clone(),
            remote_sync_timeout: c.remote_sync_timeout,
        })
    }
}

impl Registry for KubernetesRegistry {
    fn id(&self) -> RegistryId {
        self.config.registry_id()
    }

    fn run(self: Box<Self>, sink: RegistrySink) -> BoxFuture<'static, Result<(), RegistryError>> {
        let span = tracing::info_span!("kubernetes_registry", registry = %self.config.name);
        async move {
            let setup = self.setup()?;
            tracing::info!(
                cluster = %setup.primary,
                clusters = setup.configured.len(),
                dir = ?setup.dir,
                "kubernetes registry starting"
            );
            Worker::new(setup, sink).run().await
        }
        .instrument(span)
        .boxed()
    }
}
