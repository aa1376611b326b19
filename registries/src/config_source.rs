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
//! `xds://host:port` is an ADS config server (MCP over xDS, `docs/mcp.md`): the registry instance
//! runs an ADS client for it instead of reading files or CRDs.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::serviceentry::{
    CrdSourceConfig, DEFAULT_NODE_ID, ServiceEntryConfig, XdsProtocol, XdsSourceConfig,
    XdsTlsConfig,
};

/// The scheme of a directory of manifests: `fs:///path/to/dir`.
pub const FS_SCHEME: &str = "fs://";
/// The scheme of a cluster's CRDs: `k8s://`.
pub const K8S_SCHEME: &str = "k8s://";
/// The scheme of an xDS config server: `xds://host:port`.
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
    /// `xds://` only: `delta` (the default; falls back to SotW when the server has no delta) or
    /// `sotw`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<XdsProtocol>,
    /// `xds://` only: the node id of requests (default `tributary-config-client`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// `xds://` only: TLS to the server (`ca_file`, `cert_file`, `key_file`, `server_name`);
    /// absent means plaintext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<XdsTlsConfig>,
}

/// What an address points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceAddress {
    /// A directory of manifests.
    Directory(PathBuf),
    /// The CRDs of a cluster.
    Kubernetes,
    /// An xDS config server at `host:port`.
    Xds(String),
}

/// Why a config source cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// `xds://` without a usable `host:port`.
    #[error(
        "config source {address:?}: xds:// needs host:port after it, as in \
         xds://istiod.istio-system.svc:15010"
    )]
    XdsAddress {
        /// The address.
        address: String,
    },
    /// An `xds://` setting on another kind of source.
    #[error(
        "config source {address:?}: `protocol`, `node_id` and `tls` apply to xds:// sources only"
    )]
    XdsSettingElsewhere {
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
        let xds_settings = self.protocol.is_some() || self.node_id.is_some() || self.tls.is_some();
        if let Some(rest) = address.strip_prefix(XDS_SCHEME) {
            if self.kubeconfig.is_some() || self.context.is_some() || !self.namespaces.is_empty() {
                return Err(SourceError::K8sSettingOnDirectory { address: err() });
            }
            let probe = XdsSourceConfig {
                address: rest.to_string(),
                ..XdsSourceConfig::default()
            };
            if rest.contains('/') || probe.problem().is_some() {
                return Err(SourceError::XdsAddress { address: err() });
            }
            return Ok(SourceAddress::Xds(rest.to_string()));
        }
        if xds_settings {
            return Err(SourceError::XdsSettingElsewhere { address: err() });
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
            SourceAddress::Xds(address) => {
                c.xds = Some(XdsSourceConfig {
                    address,
                    protocol: self.protocol.unwrap_or_default(),
                    node_id: self
                        .node_id
                        .clone()
                        .unwrap_or_else(|| DEFAULT_NODE_ID.to_string()),
                    tls: self.tls.clone(),
                    ..XdsSourceConfig::default()
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

        let xds = source("{address: 'xds://istiod.istio-system:15010', protocol: sotw}");
        let c = xds.registry_config().unwrap();
        let x = c.xds.clone().unwrap();
        assert_eq!(x.address, "istiod.istio-system:15010");
        assert_eq!(
            (x.protocol, x.node_id.as_str()),
            (XdsProtocol::Sotw, DEFAULT_NODE_ID)
        );
        assert!(c.directory.is_none() && c.kubernetes.is_none());
        c.validate().unwrap();
        let tls = source("{address: 'xds://h:1', tls: {cert_file: /c}}").registry_config();
        let e = tls.unwrap().validate().unwrap_err().to_string();
        assert!(e.contains("cert_file") && e.contains("key_file"), "{e}");
    }

    #[test]
    fn bad_addresses_are_clear_errors() {
        let e = |yaml: &str| source(yaml).registry_config().unwrap_err().to_string();
        assert!(e("address: xds://istiod").contains("host:port"));
        assert!(e("address: xds://istiod:15010/x").contains("host:port"));
        assert!(e("{address: 'xds://i:1', context: x}").contains("k8s:// sources only"));
        assert!(e("{address: 'fs:///d', protocol: sotw}").contains("xds:// sources only"));
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
