//! Building a kube `Client` for one cluster: from a kubeconfig file or the in-cluster service
//! account, with the client-side rate limit and an observer that tells the cluster task when the
//! API server answers again.
//!
//! Why the observer: after an outage, kube-runtime's watcher resumes a watch from its last
//! resourceVersion and yields nothing until an object changes, so the watch stream alone cannot
//! say "reachable again". Every successful (2xx) response is counted per resource (the last path
//! segment of a list or watch URL: `services`, `endpointslices`, ...), and the cluster task
//! compares those counts with the ones it saw when a watch failed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use http::{Request, Response};
use kube::Client;
use kube::client::ClientBuilder;
use kube::config::{KubeConfigOptions, Kubeconfig};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tower::{Layer, Service};

pub(crate) use super::rate_limit::RateLimitLayer;

/// Where a cluster's credentials come from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Credentials {
    /// The pod's service account.
    InCluster,
    /// A kubeconfig, already read (`text`), from `path`.
    Kubeconfig {
        /// Where it was read from, for messages.
        path: PathBuf,
        /// Its contents; a change of contents is a credential rotation.
        text: String,
        /// Context to use; `None` is the file's current context.
        context: Option<String>,
    },
}

/// Why a client cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file cannot be read.
    #[error("cannot read kubeconfig {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The kubeconfig is not usable.
    #[error("kubeconfig {}: {source} (is the context, cluster and user there?)", path.display())]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What kube said.
        source: kube::config::KubeconfigError,
    },
    /// Not running in a pod with a service account.
    #[error("no in-cluster credentials ({0}); set `kubeconfig` when running outside Kubernetes")]
    InCluster(#[from] kube::config::InClusterError),
    /// kube could not build an HTTP client from the config (TLS material, proxy, ...).
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[from] kube::Error),
}

impl Credentials {
    /// Reads a kubeconfig file.
    pub(crate) fn from_file(path: &Path, context: Option<String>) -> Result<Self, ClientError> {
        let text = std::fs::read_to_string(path).map_err(|source| ClientError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let creds = Self::Kubeconfig {
            path: path.to_path_buf(),
            text,
            context,
        };
        creds.check()?;
        Ok(creds)
    }

    /// Whether a kubeconfig parses (without contacting anything).
    pub(crate) fn check(&self) -> Result<(), ClientError> {
        if let Self::Kubeconfig { path, text, .. } = self {
            Kubeconfig::from_yaml(text).map_err(|source| ClientError::Kubeconfig {
                path: path.clone(),
                source,
            })?;
        }
        Ok(())
    }

    async fn config(&self) -> Result<kube::Config, ClientError> {
        match self {
            Self::InCluster => Ok(kube::Config::incluster()?),
            Self::Kubeconfig {
                path,
                text,
                context,
            } => {
                let err = |source| ClientError::Kubeconfig {
                    path: path.clone(),
                    source,
                };
                let kubeconfig = Kubeconfig::from_yaml(text).map_err(err)?;
                let options = KubeConfigOptions {
                    context: context.clone(),
                    ..KubeConfigOptions::default()
                };
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(err)
            }
        }
    }

    /// A client with the rate limit and the success observer.
    pub(crate) async fn client(
        &self,
        rate: RateLimitLayer,
        seen: ApiSuccesses,
    ) -> Result<Client, ClientError> {
        let config = self.config().await?;
        // kube builds its rustls config with the process-wide crypto provider, which rustls cannot
        // choose by itself once two providers are compiled in (ring here, aws-lc-rs from another
        // crate's defaults). Installing ring first makes that choice; a provider already
        // installed by someone else is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(ClientBuilder::try_from(config)?
            .with_layer(&rate)
            .with_layer(&ObserveLayer(seen))
            .build())
    }
}

/// Counts of successful responses per resource, shared between a cluster's client and its task.
#[derive(Debug, Clone, Default)]
pub(crate) struct ApiSuccesses {
    counts: Arc<Mutex<HashMap<String, u64>>>,
    notify: Arc<Notify>,
}

impl ApiSuccesses {
    /// Successful responses so far for `resource` (a plural such as `pods`).
    pub(crate) fn count(&self, resource: &str) -> u64 {
        self.counts.lock().get(resource).copied().unwrap_or(0)
    }

    /// Resolves at the next successful response after it was created.
    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    fn record(&self, path: &str) {
        let resource = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        *self.counts.lock().entry(resource.to_string()).or_default() += 1;
        // One waiter (the cluster task); a permit is kept if it is busy, so no wake-up is lost.
        self.notify.notify_one();
    }
}

/// Adds [`Observe`] to a service stack.
#[derive(Debug, Clone)]
struct ObserveLayer(ApiSuccesses);

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            seen: self.0.clone(),
        }
    }
}

/// Records every 2xx response in [`ApiSuccesses`].
struct Observe<S> {
    inner: S,
    seen: ApiSuccesses,
}

impl<S, B, RB> Service<Request<B>> for Observe<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    RB: 'static,
{
    type Response = Response<RB>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Response<RB>, S::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let path = req.uri().path().to_string();
        let seen = self.seen.clone();
        self.inner
            .call(req)
            .map(move |result| {
                if let Ok(resp) = &result
                    && resp.status().is_success()
                {
                    seen.record(&path);
                }
                result
            })
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn successes_are_counted_per_resource() {
        let seen = ApiSuccesses::default();
        seen.record("/api/v1/namespaces/default/pods");
        seen.record("/apis/discovery.k8s.io/v1/endpointslices");
        seen.record("/api/v1/pods");
        assert_eq!(seen.count("pods"), 2);
        assert_eq!(seen.count("endpointslices"), 1);
        assert_eq!(seen.count("nodes"), 0);
    }

    #[test]
    fn a_broken_kubeconfig_is_reported_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("east.yaml");
        std::fs::write(&path, "clusters: [").unwrap();
        let err = Credentials::from_file(&path, None).unwrap_err().to_string();
        assert!(err.contains("east.yaml"), "{err}");
        let err = Credentials::from_file(&dir.path().join("missing"), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot read kubeconfig"), "{err}");
    }
}
