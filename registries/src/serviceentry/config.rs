//! The ServiceEntry registry's configuration: a watched directory of manifests, the CRDs of a
//! cluster, or both.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::types::API_VERSIONS;
use super::xds::XdsSourceConfig;
use crate::model::{ClusterId, Origin, RegistryId};

/// How one ServiceEntry registry instance is set up.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceEntryConfig {
    /// The registry id this instance reports as (`Origin::registry`).
    pub name: String,
    /// The cluster id its services and endpoints carry (`Origin::cluster`); istiod stamps
    /// ServiceEntry endpoints with its own cluster id (`Kubernetes` by default).
    pub cluster_id: String,
    /// A directory of YAML (or JSON) manifests holding `ServiceEntry` and `WorkloadEntry` objects,
    /// several per file separated by `---`. Watched: adding, editing or deleting a file is picked
    /// up without a restart. Other kinds in the files are ignored.
    pub directory: Option<PathBuf>,
    /// The namespace of objects in `directory` that do not set `metadata.namespace` (as `kubectl
    /// apply` would use the current namespace).
    pub default_namespace: String,
    /// Read the `ServiceEntry` / `WorkloadEntry` CRDs (and optionally Pods) of a cluster.
    pub kubernetes: Option<CrdSourceConfig>,
    /// Read the objects from an xDS config server (MCP over xDS); exclusive with `kubernetes`.
    pub xds: Option<XdsSourceConfig>,
    /// Trust domain of workload identities: a WorkloadEntry's `serviceAccount` becomes
    /// `spiffe://<trust_domain>/ns/<namespace>/sa/<serviceAccount>`, as istiod writes it.
    pub trust_domain: String,
    /// How often the directory is read again in full even without a file event (a safety net for
    /// file systems whose events are lost), and how often an unreadable directory is retried.
    #[serde(with = "crate::duration")]
    pub rescan_interval: Duration,
}

/// Where the CRDs come from and what else to read from that cluster.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CrdSourceConfig {
    /// Kubeconfig file. Absent: the in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    /// Context within `kubeconfig`; absent means its `current-context`.
    pub context: Option<String>,
    /// Namespaces to watch; empty means all.
    pub namespaces: Vec<String>,
    /// The `networking.istio.io` version to read: `v1` (Istio 1.22+), `v1beta1` or `v1alpha3`.
    /// The API server converts between them, so any served version sees every object.
    pub api_version: String,
    /// Also watch Pods, so that a ServiceEntry's `workloadSelector` selects Pods in its namespace
    /// as well as WorkloadEntries (needs get/list/watch on pods).
    pub select_pods: bool,
    /// Client-side request rate, requests per second (istiod's default: 80).
    pub qps: f32,
    /// Requests allowed at once above `qps` (istiod's default: 160).
    pub burst: u32,
    /// First retry delay after an API failure; doubles (with jitter) up to `retry_max`.
    #[serde(with = "crate::duration")]
    pub retry_initial: Duration,
    /// Longest retry delay after API failures.
    #[serde(with = "crate::duration")]
    pub retry_max: Duration,
    /// Server-side timeout asked for each watch request (kube-rs' default: 290s).
    #[serde(with = "crate::duration")]
    pub watch_timeout: Duration,
}

impl Default for ServiceEntryConfig {
    fn default() -> Self {
        Self {
            name: "serviceentry".into(),
            cluster_id: "Kubernetes".into(),
            directory: None,
            default_namespace: "default".into(),
            kubernetes: None,
            xds: None,
            trust_domain: "cluster.local".into(),
            rescan_interval: Duration::from_secs(10),
        }
    }
}

impl Default for CrdSourceConfig {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            context: None,
            namespaces: Vec::new(),
            api_version: "v1".into(),
            select_pods: false,
            qps: 80.0,
            burst: 160,
            retry_initial: Duration::from_millis(800),
            retry_max: Duration::from_secs(30),
            watch_timeout: Duration::from_secs(290),
        }
    }
}

/// Why a ServiceEntry registry config cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `name` is empty.
    #[error("service_entry registry: `name` is empty; give the registry an id")]
    EmptyName,
    /// None of `directory`, `kubernetes`, `xds` is set.
    #[error(
        "service_entry registry {name:?}: set `directory` (manifest files), `kubernetes` (CRDs) \
         or `xds` (a config server)"
    )]
    NoSource {
        /// The registry.
        name: String,
    },
    /// A setting is out of range or malformed.
    #[error("service_entry registry {name:?}: {what}")]
    Invalid {
        /// The registry.
        name: String,
        /// Which setting and why.
        what: String,
    },
}

impl ServiceEntryConfig {
    /// Checks that the configured directory exists and is a directory: what start-up does, so that
    /// a mistyped path fails loudly instead of serving no ServiceEntries while it is retried. Its
    /// files are judged object by object later (a rejected object never stops the others).
    pub fn check_directory(&self) -> Result<(), String> {
        match &self.directory {
            Some(dir) if !dir.is_dir() => Err(format!(
                "directory {} does not exist or is not a directory",
                dir.display()
            )),
            _ => Ok(()),
        }
    }

    /// The registry id.
    pub fn registry_id(&self) -> RegistryId {
        RegistryId::new(&self.name)
    }

    /// The origin every service and endpoint of this registry carries.
    pub fn origin(&self) -> Origin {
        Origin {
            registry: self.registry_id(),
            cluster: ClusterId::new(&self.cluster_id),
        }
    }

    /// Checks everything that can be checked without reading files or a cluster.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.is_empty() {
            return Err(ConfigError::EmptyName);
        }
        let invalid = |what: &str| ConfigError::Invalid {
            name: self.name.clone(),
            what: what.to_string(),
        };
        if let Some(x) = &self.xds {
            if self.kubernetes.is_some() {
                return Err(invalid(
                    "`xds` and `kubernetes` cannot both be set; use two sources",
                ));
            }
            if let Some(why) = x.problem() {
                return Err(invalid(&why));
            }
        }
        if self.directory.is_none() && self.kubernetes.is_none() && self.xds.is_none() {
            return Err(ConfigError::NoSource {
                name: self.name.clone(),
            });
        }
        if self.cluster_id.is_empty() {
            return Err(invalid("`cluster_id` is empty"));
        }
        if self.default_namespace.is_empty() {
            return Err(invalid("`default_namespace` is empty"));
        }
        if self.rescan_interval.is_zero() {
            return Err(invalid("`rescan_interval` must be positive"));
        }
        let Some(k) = &self.kubernetes else {
            return Ok(());
        };
        if !API_VERSIONS.contains(&k.api_version.as_str()) {
            return Err(invalid(&format!(
                "`kubernetes.api_version` {:?} is not one of {API_VERSIONS:?}",
                k.api_version
            )));
        }
        if !(k.qps.is_finite() && k.qps > 0.0) || k.burst == 0 {
            return Err(invalid(
                "`kubernetes.qps` must be a positive rate and `kubernetes.burst` at least 1",
            ));
        }
        if k.retry_initial.is_zero() || k.retry_max < k.retry_initial {
            return Err(invalid(
                "`kubernetes.retry_initial` must be positive and at most `kubernetes.retry_max`",
            ));
        }
        if k.watch_timeout < Duration::from_secs(1) || k.watch_timeout > Duration::from_secs(295) {
            return Err(invalid(
                "`kubernetes.watch_timeout` must be between 1s and 295s (the API server's limit)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_strictness_and_validation() {
        let c: ServiceEntryConfig = serde_yaml::from_str("directory: /etc/se").unwrap();
        c.validate().unwrap();
        assert_eq!(c.origin().registry.as_str(), "serviceentry");
        assert_eq!(c.default_namespace, "default");
        let err = serde_yaml::from_str::<ServiceEntryConfig>("dirctory: x").unwrap_err();
        assert!(
            err.to_string().contains("unknown field `dirctory`"),
            "{err}"
        );

        let none: ServiceEntryConfig = serde_yaml::from_str("{}").unwrap();
        assert!(matches!(none.validate(), Err(ConfigError::NoSource { .. })));

        let crd: ServiceEntryConfig =
            serde_yaml::from_str("kubernetes: {namespaces: [a], select_pods: true}").unwrap();
        crd.validate().unwrap();
        let k = crd.kubernetes.unwrap();
        assert_eq!((k.api_version.as_str(), k.qps), ("v1", 80.0));

        let bad: ServiceEntryConfig =
            serde_yaml::from_str("kubernetes: {api_version: v2}").unwrap();
        let e = bad.validate().unwrap_err().to_string();
        assert!(e.contains("api_version") && e.contains("v1beta1"), "{e}");
        let bad: ServiceEntryConfig =
            serde_yaml::from_str("kubernetes: {watch_timeout: 10m}").unwrap();
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("watch_timeout")
        );
    }
}
