//! istiod's `configSources`: where Istio config objects come from, written as MeshConfig writes
//! them (`address: fs:///etc/istio/config`, `address: k8s://`).
//!
//! Each source runs as one instance of the ServiceEntry registry (the directory and CRD machinery,
//! the store with last valid versions and the rejection reporting are the same), so it shows in
//! `/debug/registryz` with its own sync state and health, and its rejected objects in
//! `/debug/configz`. Every source reads the four kinds of the config store: `ServiceEntry` and
//! `WorkloadEntry` become services and endpoints; `DestinationRule` and `VirtualService` go to
//! the [`crate::config_store::ConfigStore`], which merges them into one rule set.
//!
//! `xds://` (config pushed by another control plane) is not implemented yet: it is refused with a
//! clear error rather than ignored.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::serviceentry::{CrdSourceConfig, ServiceEntryConfig};

/// The scheme of a directory of manifests: `fs:///path/to/dir`.
pub const FS_SCHEME: &str = "fs://";
/// The scheme of a cluster's CRDs: `k8s://`.
pub const K8S_SCHEME: &str = "k8s://";
/// The scheme of an xDS config server (not supported yet).
pub const XDS_SCHEME: &str = "xds://";

/// One entry of `config_sources:`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigSourceConfig {
    /// `fs:///absolute/dir` (a directory of Istio YAML, watched) or `k8s://` (the Istio CRDs of
    /// a cluster).
    pub address: String,
    /// `k8s://` only: the kubeconfig file; absent means the in-cluster service account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// `k8s://` only: the context within `kubeconfig`; absent means its `current-context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// `k8s://` only: namespaces to watch; empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}

/// What an address points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceAddress {
    /// A directory of manifests.
    Directory(PathBuf),
    /// The CRDs of a cluster.
    Kubernetes,
}

/// Why a config source cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// `xds://` is a later feature.
    #[error(
        "config source {address:?}: xds:// config sources are not supported yet; use fs:///dir \
         or k8s://"
    )]
    XdsNotSupported {
        /// The address.
        address: String,
    },
    /// Not one of the schemes.
    #[error(
        "config source {address:?}: unknown address; use fs:///absolute/dir (a directory of \
         Istio YAML) or k8s:// (the Istio CRDs of a cluster)"
    )]
    UnknownScheme {
        /// The address.
        address: String,
    },
    /// `fs://` with a relative or empty path.
    #[error(
        "config source {address:?}: fs:// needs an absolute directory after it, as in \
         fs:///etc/istio/config (three slashes)"
    )]
    NotAbsolute {
        /// The address.
        address: String,
    },
    /// `k8s://` followed by something.
    #[error(
        "config source {address:?}: k8s:// takes nothing after the scheme; choose the cluster \
         with `kubeconfig` and `context`"
    )]
    K8sWithPath {
        /// The address.
        address: String,
    },
    /// A `k8s://` setting on a directory source.
    #[error(
        "config source {address:?}: `kubeconfig`, `context` and `namespaces` apply to k8s:// \
         sources only"
    )]
    K8sSettingOnDirectory {
        /// The address.
        address: String,
    },
    /// The same address twice.
    #[error("config source {address:?} is listed twice")]
    Duplicate {
        /// The address.
        address: String,
    },
}

impl ConfigSourceConfig {
    /// Reads the address.
    pub fn parse_address(&self) -> Result<SourceAddress, SourceError> {
        let address = self.address.trim();
        let err = || self.address.clone();
        if address.starts_with(XDS_SCHEME) {
            return Err(SourceError::XdsNotSupported { address: err() });
        }
        if let Some(rest) = address.strip_prefix(K8S_SCHEME) {
            if !rest.is_empty() {
                return Err(SourceError::K8sWithPath { address: err() });
            }
            return Ok(SourceAddress::Kubernetes);
        }
        let Some(path) = address.strip_prefix(FS_SCHEME) else {
            return Err(SourceError::UnknownScheme { address: err() });
        };
        if !path.starts_with('/') {
            return Err(SourceError::NotAbsolute { address: err() });
        }
        if self.kubeconfig.is_some() || self.context.is_some() || !self.namespaces.is_empty() {
            return Err(SourceError::K8sSettingOnDirectory { address: err() });
        }
        Ok(SourceAddress::Directory(PathBuf::from(path)))
    }

    /// The registry id the source reports as: its address.
    pub fn name(&self) -> &str {
        self.address.trim()
    }

    /// The ServiceEntry registry instance that serves this source.
    pub fn registry_config(&self) -> Result<ServiceEntryConfig, SourceError> {
        let mut c = ServiceEntryConfig {
            name: self.name().to_string(),
            ..ServiceEntryConfig::default()
        };
        match self.parse_address()? {
            SourceAddress::Directory(dir) => c.directory = Some(dir),
            SourceAddress::Kubernetes => {
                c.kubernetes = Some(CrdSourceConfig {
                    kubeconfig: self.kubeconfig.clone(),
                    context: self.context.clone(),
                    namespaces: self.namespaces.clone(),
                    ..CrdSourceConfig::default()
                })
            }
        }
        Ok(c)
    }
}

/// The registry instances of `sources`, in order; the first problem found is the error.
pub fn registry_configs(
    sources: &[ConfigSourceConfig],
) -> Result<Vec<ServiceEntryConfig>, SourceError> {
    let mut out: Vec<ServiceEntryConfig> = Vec::new();
    for s in sources {
        let c = s.registry_config()?;
        if out.iter().any(|o| o.name == c.name) {
            return Err(SourceError::Duplicate {
                address: s.address.clone(),
            });
        }
        out.push(c);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(yaml: &str) -> ConfigSourceConfig {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn addresses_as_istiod_writes_them() {
        let fs = source("address: fs:///etc/istio/config");
        assert_eq!(
            fs.parse_address(),
            Ok(SourceAddress::Directory("/etc/istio/config".into()))
        );
        let c = fs.registry_config().unwrap();
        assert_eq!(c.name, "fs:///etc/istio/config");
        assert_eq!(c.directory.as_deref(), Some("/etc/istio/config".as_ref()));
        assert!(c.kubernetes.is_none());
        c.validate().unwrap();

        let k8s = source("{address: 'k8s://', kubeconfig: /k, context: prod, namespaces: [a]}");
        let c = k8s.registry_config().unwrap();
        let k = c.kubernetes.clone().unwrap();
        assert_eq!(k.kubeconfig.as_deref(), Some("/k".as_ref()));
        assert_eq!(
            (k.context.as_deref(), k.namespaces),
            (Some("prod"), vec!["a".into()])
        );
        c.validate().unwrap();
    }

    #[test]
    fn bad_addresses_are_clear_errors() {
        let e = |yaml: &str| source(yaml).registry_config().unwrap_err().to_string();
        assert!(e("address: xds://istiod:15010").contains("not supported yet"));
        assert!(e("address: fs://etc/istio").contains("absolute"));
        assert!(e("address: fs://").contains("absolute"));
        assert!(e("address: /etc/istio").contains("unknown address"));
        assert!(e("address: k8s://cluster1").contains("takes nothing"));
        assert!(e("{address: 'fs:///d', context: x}").contains("k8s:// sources only"));
        let unknown = serde_yaml::from_str::<ConfigSourceConfig>("{address: 'k8s://', kube: x}");
        assert!(unknown.unwrap_err().to_string().contains("unknown field"));
        let twice = [source("address: fs:///d"), source("address: fs:///d")];
        assert!(matches!(
            registry_configs(&twice),
            Err(SourceError::Duplicate { .. })
        ));
    }
}
