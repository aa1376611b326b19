//! The `mcp:` section of the config file: whether and how the MCP collections are served.

use serde::{Deserialize, Serialize};

/// How a published ServiceEntry carries its endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndpointMode {
    /// In the ServiceEntry's `endpoints` (`resolution: STATIC`); the WorkloadEntry collection is
    /// empty. One object per hostname: what istiod needs, at the least cost.
    #[default]
    Inline,
    /// One WorkloadEntry per endpoint, selected by the ServiceEntry's `workloadSelector`
    /// (label `tributary.io/service`): each instance is an object of its own, as Istio's VM
    /// integration publishes them.
    WorkloadEntries,
}

/// Settings of the MCP collections served on the xDS ports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpSettings {
    /// Serve `networking.istio.io/v1alpha3/{ServiceEntry,WorkloadEntry,DestinationRule,
    /// VirtualService}` on the xDS ports, for an istiod whose `configSources` name tributary.
    /// Off by default: then those collections are unknown types, ignored as before.
    pub enabled: bool,
    /// Endpoints inline in the ServiceEntry (`inline`, the default) or as WorkloadEntries
    /// (`workload_entries`).
    pub endpoints: EndpointMode,
    /// Publish unhealthy and draining endpoints too. Off by default: istiod gets only the
    /// endpoints that are healthy now, and a health change is an update.
    pub include_unhealthy: bool,
    /// Leave out hostnames ending with one of these: istiod's own Kubernetes registry already
    /// has them. Default: `[".svc.cluster.local"]`; `[]` publishes every hostname.
    pub skip_host_suffixes: Vec<String>,
    /// Leave out services whose attributes come from these registries (by registry name), e.g. a
    /// Kubernetes registry reading the cluster istiod also watches.
    pub skip_registries: Vec<String>,
    /// The namespace of services whose registry gives none (Consul, files, mock).
    pub default_namespace: String,
}

impl Default for McpSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            endpoints: EndpointMode::default(),
            include_unhealthy: false,
            skip_host_suffixes: vec![".svc.cluster.local".to_string()],
            skip_registries: Vec::new(),
            default_namespace: "default".to_string(),
        }
    }
}

impl McpSettings {
    /// Checks the settings; `registries` are the names of every configured registry.
    pub fn validate<'a>(
        &self,
        mut registries: impl Iterator<Item = &'a str>,
    ) -> Result<(), String> {
        let ns = &self.default_namespace;
        let label = !ns.is_empty()
            && ns.len() <= 63
            && ns
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !ns.starts_with('-')
            && !ns.ends_with('-');
        if !label {
            return Err(format!(
                "mcp.default_namespace {ns:?} is not a Kubernetes namespace name (a DNS-1123 \
                 label: lower-case letters, digits and '-', at most 63)"
            ));
        }
        if let Some(empty) = self.skip_host_suffixes.iter().find(|s| s.trim().is_empty()) {
            return Err(format!(
                "mcp.skip_host_suffixes holds an empty suffix ({empty:?}), which would leave out \
                 every hostname; use `enabled: false` instead"
            ));
        }
        let known: Vec<&str> = registries.by_ref().collect();
        if let Some(unknown) = self
            .skip_registries
            .iter()
            .find(|r| !known.contains(&r.as_str()))
        {
            return Err(format!(
                "mcp.skip_registries names {unknown:?}, which is not a configured registry \
                 (known: {known:?})"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_off() {
        let s = McpSettings::default();
        assert!(!s.enabled);
        assert_eq!(s.endpoints, EndpointMode::Inline);
        assert!(s.validate(std::iter::empty()).is_ok());
    }

    #[test]
    fn bad_values_are_refused_with_the_field_named() {
        let bad_ns = McpSettings {
            default_namespace: "Not_A_Namespace".into(),
            ..Default::default()
        };
        let e = bad_ns.validate(std::iter::empty()).unwrap_err();
        assert!(e.contains("mcp.default_namespace"), "{e}");
        let empty_suffix = McpSettings {
            skip_host_suffixes: vec![" ".into()],
            ..Default::default()
        };
        let e = empty_suffix.validate(std::iter::empty()).unwrap_err();
        assert!(e.contains("mcp.skip_host_suffixes"), "{e}");
        let unknown = McpSettings {
            skip_registries: vec!["k8s".into()],
            ..Default::default()
        };
        let e = unknown.validate(["consul"].into_iter()).unwrap_err();
        assert!(e.contains("\"k8s\""), "{e}");
        assert!(unknown.validate(["k8s"].into_iter()).is_ok());
    }

    #[test]
    fn the_config_file_section_is_validated_against_its_registries() {
        use crate::config::Config;
        let ok = Config::from_yaml(
            "registries: [{type: mock, name: vms}]\n\
             mcp: {enabled: true, endpoints: workload_entries, skip_registries: [vms]}\n",
        )
        .expect("valid");
        assert_eq!(ok.mcp.endpoints, EndpointMode::WorkloadEntries);
        let e = Config::from_yaml("mcp: {enabled: true, skip_registries: [nope]}\n").unwrap_err();
        assert!(e.to_string().contains("mcp.skip_registries"), "{e}");
        let e = Config::from_yaml("mcp: {enabled: true, endpoints: sideways}\n").unwrap_err();
        assert!(e.to_string().contains("sideways"), "{e}");
    }
}
