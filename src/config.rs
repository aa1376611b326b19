//! tributary's settings: the config file, and the flags that override it.
//!
//! `tributary --config tributary.yaml` reads a [`Config`]; flags given on the command line replace
//! the file's values (`main` applies them with [`Config::apply_overrides`]). With neither a config
//! file nor `--mock-file`, tributary serves the embedded demo mesh. Nothing below this module and
//! `main` reads environment variables: the registries' variables (`CONSUL_HTTP_ADDR`, ...) come in
//! through [`Config::apply_env`], which the command line calls with the process environment.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tributary_registries::config_source::{self, ConfigSourceConfig};
use tributary_registries::duration;
use tributary_registries::mock::MockConfig;

use crate::aggregate::DebounceSettings;
use crate::control_api::ControlApiConfig;
use crate::mcp::McpSettings;
use crate::tls::TlsConfig;

mod admin;
mod bounds;
mod server;
mod traffic;

pub use admin::AdminSettings;
pub use server::{ConnectionSettings, ShutdownSettings};
pub use traffic::TrafficSettings;
/// One registry to run; each adapter owns its variant's settings, checks and build.
pub use tributary_registries::RegistryConfig;

/// The default plaintext xDS address, istiod's `--grpcAddr` port on loopback.
pub const DEFAULT_XDS_ADDR: &str = "127.0.0.1:15010";
/// The default admin address (metrics, readiness, debug), istiod's monitoring port on loopback.
pub const DEFAULT_ADMIN_ADDR: &str = "127.0.0.1:15014";

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid YAML for a [`Config`].
    #[error("config file {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What serde said, with line and column.
        source: serde_yaml::Error,
    },
    /// The values do not make sense together.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// The whole configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the plaintext xDS gRPC server listens.
    pub xds_addr: SocketAddr,
    /// Where the admin HTTP server listens: `/ready`, `/metrics`, `/debug/*`.
    pub admin_addr: SocketAddr,
    /// The registries, in merge order: the first that knows a hostname defines its attributes.
    pub registries: Vec<RegistryConfig>,
    /// Where Istio config objects come from, as istiod's MeshConfig `configSources`:
    /// `{address: fs:///dir}` or `{address: k8s://}` (with `kubeconfig`, `context`,
    /// `namespaces`). Each runs as a registry after `registries` (named by its address): its
    /// ServiceEntries and WorkloadEntries are services, its DestinationRules and VirtualServices
    /// traffic rules.
    pub config_sources: Vec<ConfigSourceConfig>,
    /// How bursts of changes are coalesced into pushes.
    pub debounce: DebounceSettings,
    /// How long to wait for a registry's initial sync before serving without it (loudly).
    #[serde(with = "duration")]
    pub sync_timeout: Duration,
    /// Send UNHEALTHY endpoints to proxies (marked UNHEALTHY) instead of leaving them out.
    pub send_unhealthy_endpoints: bool,
    /// Upstream connect timeout of generated clusters.
    #[serde(with = "duration")]
    pub connect_timeout: Duration,
    /// Serve xDS over mTLS too (istiod's `https-xds` port 15012): the port for proxies on other
    /// machines (SEC-1).
    pub tls: Option<TlsConfig>,
    /// Allow `xds_addr` (plaintext, unauthenticated) on a non-loopback address. Off by default:
    /// plaintext xDS stays on loopback unless this says otherwise (SEC-1, SEC-14).
    pub insecure_plaintext_xds: bool,
    /// HTTP/2 limits, keepalive and connection age of the xDS servers.
    pub connections: ConnectionSettings,
    /// Graceful shutdown on SIGTERM/SIGINT.
    pub shutdown: ShutdownSettings,
    /// Admin server limits and access to its mutating call.
    pub admin: AdminSettings,
    /// Whether this came from a config file: then no registries means an empty mesh, never the
    /// demo (which only a bare `tributary` serves).
    #[serde(skip)]
    pub from_file: bool,
    /// Serve the mock registry's control API on its own listener. Unset: not served at all.
    pub control_api: Option<ControlApiConfig>,
    /// What traffic rules generate that they do not say themselves (the default retry policy).
    pub traffic: TrafficSettings,
    /// Serve every registry's services to istiod as MCP collections (ServiceEntry,
    /// WorkloadEntry) on the xDS ports (`docs/mcp.md`, "Serve"). Off by default.
    pub mcp: McpSettings,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            xds_addr: DEFAULT_XDS_ADDR.parse().expect("constant address parses"),
            admin_addr: DEFAULT_ADMIN_ADDR.parse().expect("constant address parses"),
            registries: Vec::new(),
            config_sources: Vec::new(),
            debounce: DebounceSettings::default(),
            sync_timeout: Duration::from_secs(30),
            send_unhealthy_endpoints: false,
            connect_timeout: Duration::from_secs(10),
            tls: None,
            insecure_plaintext_xds: false,
            connections: ConnectionSettings::default(),
            shutdown: ShutdownSettings::default(),
            admin: AdminSettings::default(),
            from_file: false,
            control_api: None,
            traffic: TrafficSettings::default(),
            mcp: McpSettings::default(),
        }
    }
}

/// Values given on the command line, which win over the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--xds-addr`.
    pub xds_addr: Option<SocketAddr>,
    /// `--admin-addr`.
    pub admin_addr: Option<SocketAddr>,
    /// `--mock-file`: replaces the file of the first mock registry, or adds one.
    pub mock_file: Option<PathBuf>,
    /// `--control-addr`: serve the mock control API there (keeping a configured token file).
    pub control_addr: Option<SocketAddr>,
}

impl Config {
    /// Reads and validates a config file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut config = Self::from_yaml(&text).map_err(|e| match e {
            ConfigError::Parse { source, .. } => ConfigError::Parse {
                path: path.to_owned(),
                source,
            },
            other => other,
        })?;
        config.from_file = true;
        Ok(config)
    }

    /// Reads what the registries name (mock files) and fails on the first that is missing or
    /// invalid, with its file and line. Start-up runs this, so bad input is an exit, not an
    /// empty mesh; a file that breaks later only degrades its registry.
    pub fn check_sources(&self) -> Result<(), ConfigError> {
        for r in &self.all_registries() {
            r.check_sources()
                .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        }
        Ok(())
    }

    /// Parses and validates config text.
    pub fn from_yaml(text: &str) -> Result<Self, ConfigError> {
        let config: Config = serde_yaml::from_str(text).map_err(|source| ConfigError::Parse {
            path: PathBuf::from("<inline>"),
            source,
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Applies command-line overrides. With no registry configured at all, the result serves the
    /// embedded demo mesh.
    pub fn apply_overrides(&mut self, o: Overrides) {
        if let Some(a) = o.xds_addr {
            self.xds_addr = a;
        }
        if let Some(a) = o.admin_addr {
            self.admin_addr = a;
        }
        if let Some(addr) = o.control_addr {
            self.control_api
                .get_or_insert_with(ControlApiConfig::default)
                .addr = addr;
        }
        if let Some(file) = o.mock_file {
            MockConfig::use_file(&mut self.registries, file);
        }
    }

    /// Fills what the registries leave unset from the environment variables their platforms'
    /// tools read (`CONSUL_HTTP_ADDR`, ...; each adapter says which). `env` is the environment
    /// lookup (`std::env::var` at the edge, a map in tests).
    pub fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>) {
        for r in &mut self.registries {
            r.apply_env(&env);
        }
    }

    /// Whether the demo mesh is served: no config file and no registry (no `--mock-file`).
    pub fn is_demo(&self) -> bool {
        self.registries.is_empty() && self.config_sources.is_empty() && !self.from_file
    }

    /// `registries`, then one ServiceEntry registry per config source (see
    /// [`tributary_registries::config_source`]): what the registry supervisor runs, in merge
    /// order. Sources whose address is invalid are left out (`validate` refuses them). The demo
    /// ([`Self::is_demo`]) runs the mock registry with the embedded demo mesh.
    pub fn all_registries(&self) -> Vec<RegistryConfig> {
        if self.is_demo() {
            return vec![RegistryConfig::Mock(
                tributary_registries::mock::demo_config(),
            )];
        }
        let mut out = self.registries.clone();
        out.extend(
            self.config_sources
                .iter()
                .filter_map(|s| s.registry_config().ok())
                .map(|c| RegistryConfig::ServiceEntry(Box::new(c))),
        );
        out
    }

    /// Checks that the values make sense together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        bounds::check(self)?;
        let d = &self.debounce;
        if d.debounce_max < d.debounce_after {
            return Err(ConfigError::Invalid(format!(
                "debounce.debounce_max ({:?}) is shorter than debounce.debounce_after ({:?})",
                d.debounce_max, d.debounce_after
            )));
        }
        if d.endpoint_debounce_after > d.debounce_max {
            return Err(ConfigError::Invalid(format!(
                "debounce.endpoint_debounce_after ({:?}) is longer than debounce.debounce_max ({:?})",
                d.endpoint_debounce_after, d.debounce_max
            )));
        }
        config_source::registry_configs(&self.config_sources)
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        self.traffic.validate().map_err(ConfigError::Invalid)?;
        let all = self.all_registries();
        self.mcp
            .validate(all.iter().map(RegistryConfig::name))
            .map_err(ConfigError::Invalid)?;
        let mut names = std::collections::BTreeSet::new();
        for r in &all {
            r.validate()
                .map_err(|e| ConfigError::Invalid(e.to_string()))?;
            let name = r.name();
            if !names.insert(name.to_string()) {
                return Err(ConfigError::Invalid(format!(
                    "two registries (or a registry and a config source) are named {name:?}; give \
                     each a unique `name`"
                )));
            }
        }
        if !self.xds_addr.ip().is_loopback() && !self.insecure_plaintext_xds {
            return Err(ConfigError::Invalid(format!(
                "plaintext xDS on {} would be reachable from the network without authentication; \
                 serve remote proxies over mTLS (`tls:`, port 15012) or set \
                 insecure_plaintext_xds: true",
                self.xds_addr
            )));
        }
        if let Some(tls) = &self.tls
            && (tls.addr == self.xds_addr || tls.addr == self.admin_addr)
        {
            return Err(ConfigError::Invalid(format!(
                "tls.addr {} is also used by xds_addr or admin_addr",
                tls.addr
            )));
        }
        self.admin
            .validate(self.admin_addr.ip().is_loopback())
            .map_err(ConfigError::Invalid)?;
        if let Some(c) = &self.control_api {
            c.validate()
                .map_err(|e| ConfigError::Invalid(e.to_string()))?;
            if [
                Some(self.xds_addr),
                Some(self.admin_addr),
                self.tls.as_ref().map(|t| t.addr),
            ]
            .contains(&Some(c.addr))
                && c.addr.port() != 0
            {
                return Err(ConfigError::Invalid(format!(
                    "control_api.addr {} is also used by xds_addr, admin_addr or tls.addr",
                    c.addr
                )));
            }
        }
        if self.xds_addr == self.admin_addr {
            return Err(ConfigError::Invalid(format!(
                "xds_addr and admin_addr are both {}",
                self.xds_addr
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tributary_registries::consul::ConsulConfig;

    use super::*;

    #[test]
    fn config_sources_run_as_registries_after_the_registries() {
        let c = Config::from_yaml(
            "registries:\n  - {type: service_entry, name: se, directory: /etc/se}\n\
             config_sources:\n  - address: fs:///etc/istio\n  - {address: 'k8s://', namespaces: [shop]}\n",
        )
        .unwrap();
        assert!(!c.is_demo());
        let all = c.all_registries();
        let names: Vec<&str> = all.iter().map(RegistryConfig::name).collect();
        assert_eq!(names, ["se", "fs:///etc/istio", "k8s://"]);
        let RegistryConfig::ServiceEntry(k8s) = &all[2] else {
            panic!("a config source is a ServiceEntry registry: {all:?}");
        };
        let crds = k8s.kubernetes.as_ref().expect("k8s:// reads CRDs");
        assert_eq!(crds.namespaces, ["shop"]);

        let err = |yaml: &str| Config::from_yaml(yaml).unwrap_err().to_string();
        assert!(err("config_sources: [{address: 'xds://istiod'}]").contains("host:port"));
        assert!(err("config_sources: [{address: 'fs://etc'}]").contains("absolute"));
        let clash = "registries:\n  - {type: service_entry, name: 'k8s://', directory: /x}\n\
                     config_sources: [{address: 'k8s://'}]\n";
        assert!(err(clash).contains("unique"), "{}", err(clash));
    }

    #[test]
    fn empty_file_is_all_defaults_and_demo() {
        let c = Config::from_yaml("{}").unwrap();
        assert_eq!(c, Config::default());
        assert!(c.is_demo());
        assert_eq!(c.xds_addr.port(), 15010);
        assert_eq!(c.admin_addr.port(), 15014);
    }

    #[test]
    fn durations_and_overrides() {
        let c = Config::from_yaml(
            "debounce: {debounce_after: 50ms, debounce_max: 2s}\nsync_timeout: 1m\nxds_addr: 127.0.0.1:1000\n",
        )
        .unwrap();
        assert_eq!(c.debounce.debounce_after, Duration::from_millis(50));
        assert_eq!(c.debounce.debounce_max, Duration::from_secs(2));
        assert_eq!(c.sync_timeout, Duration::from_secs(60));
        let mut c = c;
        c.apply_overrides(Overrides {
            xds_addr: Some("127.0.0.1:2000".parse().unwrap()),
            mock_file: Some("mesh.yaml".into()),
            ..Default::default()
        });
        assert_eq!(c.xds_addr.port(), 2000, "flags override the file");
        assert!(!c.is_demo());
    }

    #[test]
    fn kubernetes_registry_config() {
        let c = Config::from_yaml(
            "registries:\n- type: kubernetes\n  kubeconfig: /etc/kube/config\n  cluster_id: east\n  kubeconfig_dir: /etc/tributary/clusters\n  qps: 20\n- type: mock\n",
        )
        .unwrap();
        let RegistryConfig::Kubernetes(k) = &c.registries[0] else {
            panic!("first registry is kubernetes: {:?}", c.registries[0]);
        };
        assert_eq!(k.cluster_id, "east");
        assert_eq!(k.domain, "cluster.local");
        assert_eq!(c.registries[0].name(), "kubernetes");
        let mut c = c;
        c.apply_overrides(Overrides {
            mock_file: Some("mesh.yaml".into()),
            ..Default::default()
        });
        assert!(
            matches!(&c.registries[1], RegistryConfig::Mock(m) if m.file.is_some()),
            "--mock-file goes to the mock registry, not the kubernetes one"
        );
        let e = Config::from_yaml("registries:\n- type: kubernetes\n  qps: 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("qps"), "{e}");
    }

    #[test]
    fn plaintext_off_loopback_must_be_explicit() {
        // SEC-1, SEC-14
        let e = Config::from_yaml("xds_addr: 0.0.0.0:15010\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("insecure_plaintext_xds"), "{e}");
        let c = Config::from_yaml("xds_addr: 0.0.0.0:15010\ninsecure_plaintext_xds: true\n");
        assert!(c.is_ok());
        let c = Config::from_yaml(
            "tls: {cert: /c, key: /k, client_ca: /ca}\nshutdown: {grace_period: 3s}\nconnections: {max_connection_age: 30m}\n",
        )
        .unwrap();
        assert_eq!(c.tls.unwrap().addr.port(), 15012);
        assert_eq!(c.shutdown.grace_period, Duration::from_secs(3));
    }

    #[test]
    fn consul_registries_parse_validate_and_take_the_environment() {
        let mut c = Config::from_yaml(
            "registries:\n  - type: mock\n  - type: consul\n    name: dc1\n    datacenter: dc1\n  - type: consul\n    name: dc2\n    datacenter: dc2\n    address: https://consul-dc2:8501\n    token: from-file\n",
        )
        .unwrap();
        let env: std::collections::HashMap<&str, &str> = [
            ("CONSUL_HTTP_ADDR", "consul.local:8501"),
            ("CONSUL_HTTP_SSL", "true"),
            ("CONSUL_HTTP_TOKEN", "from-env"),
            ("CONSUL_CACERT", "/etc/consul/ca.pem"),
        ]
        .into();
        c.apply_env(|k| env.get(k).map(|v| v.to_string()));
        c.validate().unwrap();
        let consul: Vec<&ConsulConfig> = c
            .registries
            .iter()
            .filter_map(|r| match r {
                RegistryConfig::Consul(c) => Some(&**c),
                _ => None,
            })
            .collect();
        assert_eq!(consul[0].effective_address(), "https://consul.local:8501");
        assert_eq!(consul[0].token.as_deref(), Some("from-env"));
        assert_eq!(
            consul[0].tls.ca_file.as_deref(),
            Some(Path::new("/etc/consul/ca.pem"))
        );
        assert_eq!(
            consul[1].effective_address(),
            "https://consul-dc2:8501",
            "the file wins"
        );
        assert_eq!(consul[1].token.as_deref(), Some("from-file"));
        assert_eq!(consul[1].origin().cluster.as_str(), "dc2");
        assert!(!c.is_demo());
        // The token never reaches /debug/configz.
        let shown = serde_json::to_string(&c).unwrap();
        assert!(
            !shown.contains("from-env") && !shown.contains("from-file"),
            "{shown}"
        );

        let e = Config::from_yaml("registries: [{type: consul, wait: 20m}]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("wait"), "{e}");
        let e = Config::from_yaml("registries: [{type: consul}, {type: consul}]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"consul\""), "{e}");
    }

    #[test]
    fn service_entry_registry_config() {
        let c = Config::from_yaml(
            "registries:\n- type: service_entry\n  name: external\n  directory: /etc/tributary/serviceentries\n  kubernetes: {kubeconfig: /etc/kube/config, namespaces: [shop], api_version: v1beta1}\n",
        )
        .unwrap();
        let RegistryConfig::ServiceEntry(s) = &c.registries[0] else {
            panic!("a service_entry registry: {:?}", c.registries[0]);
        };
        assert_eq!(c.registries[0].name(), "external");
        assert_eq!(s.default_namespace, "default");
        assert_eq!(s.kubernetes.as_ref().unwrap().api_version, "v1beta1");
        let e = Config::from_yaml("registries:\n- type: service_entry\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("directory"), "{e}");
        let e = Config::from_yaml("registries:\n- type: service_entry\n  directory: /x\n  kubernetes: {api_version: v2}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("api_version"), "{e}");
    }

    #[test]
    fn bad_input_names_the_field() {
        let e = Config::from_yaml("xds_adr: 1.2.3.4:5\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("xds_adr"), "{e}");
        let e = Config::from_yaml("debounce: {debounce_after: soon}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("soon"), "{e}");
        let e = Config::from_yaml("debounce: {debounce_after: 20s, debounce_max: 1s}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("debounce_max"), "{e}");
    }
}
