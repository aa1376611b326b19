//! The mock registry's configuration.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::file_format::{ServiceSpec, SpecError, validate_services};
use crate::config::RegistryConfig;
use crate::model::{ClusterId, Origin, RegistryId};

/// How one mock registry instance is set up.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MockConfig {
    /// The registry id this instance reports as (`Origin::registry`).
    pub name: String,
    /// The cluster id its services and endpoints carry (`Origin::cluster`).
    pub cluster: String,
    /// A YAML file (see `file_format`) to serve and watch for changes. Exclusive with `services`.
    pub file: Option<PathBuf>,
    /// Services embedded in the config, in the mock file format. Exclusive with `file`.
    pub services: Vec<ServiceSpec>,
    /// Start with the initial sync withheld: nothing (not even the initial state) is delivered
    /// until the control API releases it. Used to test "nothing served before sync" (TRANS-11).
    pub hold_sync: bool,
}

impl MockConfig {
    /// `--mock-file`: the first mock registry of `registries` reads `file` instead of what it was
    /// given; with none, a default mock registry reading `file` is added.
    pub fn use_file(registries: &mut Vec<RegistryConfig>, file: PathBuf) {
        let existing = registries.iter_mut().find_map(|r| match r {
            RegistryConfig::Mock(m) => Some(m),
            _ => None,
        });
        match existing {
            Some(m) => m.file = Some(file),
            None => registries.push(RegistryConfig::Mock(MockConfig {
                file: Some(file),
                ..MockConfig::default()
            })),
        }
    }
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            name: "mock".to_string(),
            cluster: "mock".to_string(),
            file: None,
            services: Vec::new(),
            hold_sync: false,
        }
    }
}

/// Why a mock registry config cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `name` is empty.
    #[error("mock registry: `name` is empty; give the registry an id")]
    EmptyName,
    /// `cluster` is empty.
    #[error("mock registry {name:?}: `cluster` is empty; give it a cluster id")]
    EmptyCluster {
        /// The registry.
        name: String,
    },
    /// Both `file` and `services` are set.
    #[error(
        "mock registry {name:?}: set either `file` or `services`, not both (the file owns the hostnames it defines)"
    )]
    FileAndServices {
        /// The registry.
        name: String,
    },
    /// An inline service is invalid.
    #[error("mock registry {name:?}: {source}")]
    Services {
        /// The registry.
        name: String,
        /// What is wrong.
        source: SpecError,
    },
}

impl MockConfig {
    /// The origin every service and endpoint of this registry carries.
    pub fn origin(&self) -> Origin {
        Origin {
            registry: RegistryId::new(&self.name),
            cluster: ClusterId::new(&self.cluster),
        }
    }

    /// Reads and checks the file, if one is configured: what start-up and `tributary validate` do
    /// so that a missing or broken file fails loudly, with its line, instead of serving an empty
    /// mesh.
    pub fn check_file(&self) -> Result<(), super::FileError> {
        match &self.file {
            Some(path) => super::file_format::read_file(path, &self.origin()).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Checks everything that can be checked without reading the file.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.is_empty() {
            return Err(ConfigError::EmptyName);
        }
        if self.cluster.is_empty() {
            return Err(ConfigError::EmptyCluster {
                name: self.name.clone(),
            });
        }
        if self.file.is_some() && !self.services.is_empty() {
            return Err(ConfigError::FileAndServices {
                name: self.name.clone(),
            });
        }
        validate_services(&self.services, &self.origin()).map_err(|source| {
            ConfigError::Services {
                name: self.name.clone(),
                source,
            }
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_strictness() {
        let c: MockConfig = serde_yaml::from_str("{}").unwrap();
        assert_eq!(c, MockConfig::default());
        assert_eq!(c.origin().registry.as_str(), "mock");
        assert_eq!(c.origin().cluster.as_str(), "mock");
        let err = serde_yaml::from_str::<MockConfig>("fiel: x.yaml").unwrap_err();
        assert!(err.to_string().contains("unknown field `fiel`"), "{err}");
    }

    #[test]
    fn validate_rejects_file_and_services_and_bad_services() {
        let c: MockConfig = serde_yaml::from_str(
            "file: m.yaml\nservices: [{hostname: a.b, ports: [{name: http, port: 80, protocol: HTTP}]}]",
        )
        .unwrap();
        assert!(matches!(
            c.validate(),
            Err(ConfigError::FileAndServices { .. })
        ));
        let c: MockConfig = serde_yaml::from_str(
            "services: [{hostname: a.b, ports: [{name: http, port: 0, protocol: HTTP}]}]",
        )
        .unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("services[0]") && err.contains("ports[0].port"),
            "{err}"
        );
        assert!(err.contains("\"a.b\""), "{err}");
    }
}
