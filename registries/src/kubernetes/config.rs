//! The Kubernetes registry's configuration.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{ClusterId, Hostname, RegistryId};

/// How one Kubernetes registry instance is set up: its primary cluster, any remote clusters, and
/// what to watch in each.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct KubernetesConfig {
    /// The registry id this instance reports as (`Origin::registry`).
    pub name: String,
    /// The primary cluster's id; every endpoint from it carries this (`Origin::cluster`).
    /// Istio's default is `Kubernetes`.
    pub cluster_id: String,
    /// Kubeconfig file of the primary cluster. Absent: the in-cluster service account
    /// (`/var/run/secrets/kubernetes.io/serviceaccount`, `KUBERNETES_SERVICE_HOST`).
    pub kubeconfig: Option<PathBuf>,
    /// Context within `kubeconfig`; absent means its `current-context`.
    pub context: Option<String>,
    /// Further clusters, fixed for the life of the process.
    pub clusters: Vec<RemoteCluster>,
    /// A directory of kubeconfig files, one per remote cluster, watched: adding, removing or
    /// replacing a file adds, removes or re-credentials exactly that cluster. The cluster id is
    /// the file name without a `.yaml`, `.yml` or `.kubeconfig` extension; hidden files (such as
    /// a mounted Secret's `..data`) are ignored.
    pub kubeconfig_dir: Option<PathBuf>,
    /// Namespaces to watch Services, EndpointSlices and Pods in; empty means all.
    pub namespaces: Vec<String>,
    /// Only Services matching this label selector (`app=web,tier!=db`) are served.
    pub label_selector: Option<String>,
    /// The cluster DNS domain: hostnames are `<name>.<namespace>.svc.<domain>`.
    pub domain: String,
    /// Trust domain of workload identities: `spiffe://<trust_domain>/ns/<ns>/sa/<account>`.
    pub trust_domain: String,
    /// Client-side request rate per cluster, requests per second (istiod's default: 80).
    pub qps: f32,
    /// Requests allowed at once above `qps` (istiod's default: 160).
    pub burst: u32,
    /// How long remote clusters may take to sync before the registry reports synced without
    /// them, loudly (istiod's `PILOT_REMOTE_CLUSTER_TIMEOUT`, default 30s). The primary cluster
    /// is always waited for.
    #[serde(with = "crate::duration")]
    pub remote_sync_timeout: Duration,
    /// First retry delay after an API failure; doubles (with jitter) up to `retry_max`.
    #[serde(with = "crate::duration")]
    pub retry_initial: Duration,
    /// Longest retry delay after API failures.
    #[serde(with = "crate::duration")]
    pub retry_max: Duration,
    /// Server-side timeout asked for each watch request; the watch then resumes from its last
    /// resourceVersion without relisting (kube-rs' default: 290s).
    #[serde(with = "crate::duration")]
    pub watch_timeout: Duration,
}

/// A remote cluster given in the config file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RemoteCluster {
    /// The cluster id its endpoints carry.
    pub cluster_id: String,
    /// Its kubeconfig file.
    pub kubeconfig: PathBuf,
    /// Context within the file; absent means its `current-context`.
    #[serde(default)]
    pub context: Option<String>,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            name: "kubernetes".into(),
            cluster_id: "Kubernetes".into(),
            kubeconfig: None,
            context: None,
            clusters: Vec::new(),
            kubeconfig_dir: None,
            namespaces: Vec::new(),
            label_selector: None,
            domain: "cluster.local".into(),
            trust_domain: "cluster.local".into(),
            qps: 80.0,
            burst: 160,
            remote_sync_timeout: Duration::from_secs(30),
            retry_initial: Duration::from_millis(800),
            retry_max: Duration::from_secs(30),
            watch_timeout: Duration::from_secs(290),
        }
    }
}

/// Why a Kubernetes registry config cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `name` is empty.
    #[error("kubernetes registry: `name` is empty; give the registry an id")]
    EmptyName,
    /// A cluster id is empty.
    #[error("kubernetes registry {name:?}: a cluster id is empty")]
    EmptyCluster {
        /// The registry.
        name: String,
    },
    /// Two clusters share an id.
    #[error("kubernetes registry {name:?}: cluster id {cluster:?} is used twice")]
    DuplicateCluster {
        /// The registry.
        name: String,
        /// The id.
        cluster: String,
    },
    /// `domain` is not a DNS name.
    #[error("kubernetes registry {name:?}: domain {domain:?} is not a DNS name")]
    BadDomain {
        /// The registry.
        name: String,
        /// The domain.
        domain: String,
    },
    /// A rate or duration is out of range.
    #[error("kubernetes registry {name:?}: {what}")]
    OutOfRange {
        /// The registry.
        name: String,
        /// Which setting and why.
        what: String,
    },
}

impl KubernetesConfig {
    /// The registry id.
    pub fn registry_id(&self) -> RegistryId {
        RegistryId::new(&self.name)
    }

    /// The primary cluster's id.
    pub fn primary(&self) -> ClusterId {
        ClusterId::new(&self.cluster_id)
    }

    /// Checks everything that can be checked without reading a kubeconfig.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let name = self.name.clone();
        if self.name.is_empty() {
            return Err(ConfigError::EmptyName);
        }
        let mut ids = std::collections::BTreeSet::new();
        for id in
            std::iter::once(&self.cluster_id).chain(self.clusters.iter().map(|c| &c.cluster_id))
        {
            if id.is_empty() {
                return Err(ConfigError::EmptyCluster { name });
            }
            if !ids.insert(id) {
                return Err(ConfigError::DuplicateCluster {
                    name,
                    cluster: id.clone(),
                });
            }
        }
        if Hostname::new(&format!("a.b.svc.{}", self.domain)).is_err() {
            return Err(ConfigError::BadDomain {
                name,
                domain: self.domain.clone(),
            });
        }
        let range = |what: &str| ConfigError::OutOfRange {
            name: name.clone(),
            what: what.into(),
        };
        if !(self.qps.is_finite() && self.qps > 0.0) {
            return Err(range(
                "`qps` must be a positive number of requests per second",
            ));
        }
        if self.burst == 0 {
            return Err(range("`burst` must be at least 1"));
        }
        if self.retry_initial.is_zero() || self.retry_max < self.retry_initial {
            return Err(range(
                "`retry_initial` must be positive and at most `retry_max`",
            ));
        }
        if self.watch_timeout < Duration::from_secs(1)
            || self.watch_timeout > Duration::from_secs(295)
        {
            return Err(range(
                "`watch_timeout` must be between 1s and 295s (the API server's limit)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_strictness() {
        let c: KubernetesConfig = serde_yaml::from_str("{}").unwrap();
        assert_eq!(c, KubernetesConfig::default());
        c.validate().unwrap();
        assert_eq!(c.primary().as_str(), "Kubernetes");
        let err = serde_yaml::from_str::<KubernetesConfig>("kubconfig: x").unwrap_err();
        assert!(
            err.to_string().contains("unknown field `kubconfig`"),
            "{err}"
        );
        let c: KubernetesConfig =
            serde_yaml::from_str("retry_initial: 10ms\nretry_max: 1s\nqps: 5\nburst: 10").unwrap();
        assert_eq!(c.retry_initial, Duration::from_millis(10));
        c.validate().unwrap();
    }

    #[test]
    fn validate_names_the_setting() {
        let bad = |yaml: &str| {
            serde_yaml::from_str::<KubernetesConfig>(yaml)
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string()
        };
        assert!(bad("qps: 0").contains("qps"));
        assert!(bad("burst: 0").contains("burst"));
        assert!(bad("domain: 'bad domain'").contains("domain"));
        assert!(bad("watch_timeout: 10m").contains("watch_timeout"));
        let dup = bad("cluster_id: a\nclusters: [{cluster_id: a, kubeconfig: /k}]");
        assert!(dup.contains("\"a\" is used twice"), "{dup}");
    }
}
