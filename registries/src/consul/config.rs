//! The Consul registry's configuration: where Consul is, how to authenticate, how hard to watch it,
//! and how its catalog maps onto the model.
//!
//! Nothing here reads the environment: `env` applies `CONSUL_HTTP_ADDR`, `CONSUL_HTTP_TOKEN`, ...
//! ([`ConsulConfig::apply_env`]) from a lookup the caller passes in (`main` reads the process
//! environment at the edge) into [`ConsulConfig::address`] / [`ConsulConfig::token`] when the file
//! leaves them unset.

mod env;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::duration;
use crate::model::{ClusterId, Hostname, Origin, Protocol, RegistryId};

/// Consul's own default HTTP address, used when neither the config nor `CONSUL_HTTP_ADDR` names one.
pub const DEFAULT_ADDRESS: &str = "http://127.0.0.1:8500";

/// The default hostname template: Consul DNS's `<service>.service.consul`.
pub const DEFAULT_HOSTNAME_TEMPLATE: &str = "{service}.service.consul";

/// Consul caps a blocking query's `wait` at 10 minutes; a longer one is silently shortened, so we
/// refuse it rather than time out requests Consul answers early.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

/// How one Consul registry instance is set up.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConsulConfig {
    /// The registry id this instance reports as (`Origin::registry`); unique per tributary.
    pub name: String,
    /// The cluster id its services and endpoints carry (`Origin::cluster`). Default: `datacenter`
    /// when set, else `name`. Give two Consul registries (two datacenters) different ones.
    pub cluster: Option<String>,
    /// Consul's HTTP API: `http://host:8500`, `https://host:8501`, or `host:port` (plain HTTP).
    /// Unset: `CONSUL_HTTP_ADDR`, else `http://127.0.0.1:8500`.
    pub address: Option<String>,
    /// ACL token, sent as `X-Consul-Token`. Unset: `CONSUL_HTTP_TOKEN`, else none (the agent's
    /// default token). Never shown in `/debug/configz`.
    #[serde(serialize_with = "redact")]
    pub token: Option<String>,
    /// A file holding the ACL token (read at start, trimmed). Exclusive with `token`.
    pub token_file: Option<PathBuf>,
    /// The datacenter to read (`?dc=`); unset: the agent's own.
    pub datacenter: Option<String>,
    /// Consul Enterprise namespace (`?ns=`); sent only when set.
    pub namespace: Option<String>,
    /// Consul Enterprise admin partition (`?partition=`); sent only when set (OSS Consul rejects it).
    pub partition: Option<String>,
    /// TLS settings for `https` addresses.
    pub tls: TlsConfig,
    /// How long one blocking query may wait for a change (Consul's `?wait=`, at most 10m).
    #[serde(with = "duration")]
    pub wait: Duration,
    /// Read with `?stale` (any server answers; scales reads). Answers without a known leader, or
    /// whose server lost the leader longer than `max_last_contact` ago, are not applied (REG-8).
    pub stale: bool,
    /// The oldest acceptable `X-Consul-LastContact` of a stale read.
    #[serde(with = "duration")]
    pub max_last_contact: Duration,
    /// At most this many per-service blocking queries are in flight at once. Each one holds an
    /// HTTP connection, and Consul agents allow 200 per client IP by default
    /// (`limits.http_max_conns_per_client`). With more services than this, services take turns
    /// with proportionally shorter waits (see the README).
    pub max_concurrent_watches: usize,
    /// Each watch re-queries at most once per this interval on average (a token bucket with a
    /// burst of 2), so a churning service degrades into polling instead of spinning (REG-6). It is
    /// also the most a third quick change in a row waits; `max_requests_per_second` bounds the
    /// registry as a whole.
    #[serde(with = "duration")]
    pub min_query_interval: Duration,
    /// All watches together send at most this many requests per second on average (a token bucket
    /// holding 10 seconds' worth, so the initial listing of a large catalog is not slowed).
    pub max_requests_per_second: u32,
    /// Retry timing after a failed request.
    pub backoff: BackoffConfig,
    /// The hostname of a Consul service: `{service}` is its name, `{dc}` the configured datacenter.
    pub hostname_template: String,
    /// The port protocol of services without a `protocol` in their `Service.Meta`.
    pub default_protocol: Protocol,
    /// How an instance whose worst check is `warning` is served.
    pub warning: WarningPolicy,
    /// Service kinds to serve besides typical services (`Kind` = ""): e.g. `terminating-gateway`.
    /// Sidecar proxies and gateways are skipped by default.
    pub include_kinds: Vec<String>,
    /// Consul services never served (Consul's own `consul` service by default).
    pub skip_services: Vec<String>,
    /// The node meta key whose value is the endpoint's locality zone (region is the datacenter).
    pub zone_meta_key: String,
    /// A Consul filter expression applied to instances (`?filter=` of `/v1/health/service`), e.g.
    /// `Service.Tags contains "mesh"`.
    pub filter: Option<String>,
}

/// TLS to Consul (`https` addresses).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM file of the CA(s) that signed Consul's certificate; unset: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate, when Consul verifies clients (`verify_incoming`).
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Accept any server certificate. For experiments only.
    pub insecure_skip_verify: bool,
}

/// Retry timing after a failed request: exponential, with jitter.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackoffConfig {
    /// The first retry delay.
    #[serde(with = "duration")]
    pub initial: Duration,
    /// The longest retry delay.
    #[serde(with = "duration")]
    pub max: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(250),
            max: Duration::from_secs(30),
        }
    }
}

/// How an instance whose worst check is `warning` is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WarningPolicy {
    /// Served as HEALTHY (with its `Weights.Warning` weight), as Consul DNS does.
    #[default]
    Healthy,
    /// Served as UNHEALTHY.
    Unhealthy,
}

impl Default for ConsulConfig {
    fn default() -> Self {
        Self {
            name: "consul".to_string(),
            cluster: None,
            address: None,
            token: None,
            token_file: None,
            datacenter: None,
            namespace: None,
            partition: None,
            tls: TlsConfig::default(),
            wait: Duration::from_secs(300),
            stale: false,
            max_last_contact: Duration::from_secs(10),
            max_concurrent_watches: 128,
            min_query_interval: Duration::from_millis(250),
            max_requests_per_second: 100,
            backoff: BackoffConfig::default(),
            hostname_template: DEFAULT_HOSTNAME_TEMPLATE.to_string(),
            default_protocol: Protocol::Tcp,
            warning: WarningPolicy::Healthy,
            include_kinds: Vec::new(),
            skip_services: vec!["consul".to_string()],
            zone_meta_key: "zone".to_string(),
            filter: None,
        }
    }
}

/// Why a Consul registry config cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `name` is empty.
    #[error("consul registry: `name` is empty; give the registry an id")]
    EmptyName,
    /// A field that must not be empty is.
    #[error("consul registry {name:?}: `{field}` is empty; remove it or give it a value")]
    Empty {
        /// The registry.
        name: String,
        /// The field.
        field: &'static str,
    },
    /// `address` is not an http(s) URL or host:port.
    #[error(
        "consul registry {name:?}: address {address:?} is not like http://127.0.0.1:8500 or https://consul:8501 ({why})"
    )]
    Address {
        /// The registry.
        name: String,
        /// The address.
        address: String,
        /// What is wrong.
        why: String,
    },
    /// A numeric or duration setting is out of range.
    #[error("consul registry {name:?}: `{field}` {why}")]
    Range {
        /// The registry.
        name: String,
        /// The field.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
    /// `hostname_template` cannot produce hostnames.
    #[error("consul registry {name:?}: hostname_template {template:?} {why}")]
    Template {
        /// The registry.
        name: String,
        /// The template.
        template: String,
        /// What is wrong.
        why: String,
    },
    /// Two settings exclude each other, or one needs the other.
    #[error("consul registry {name:?}: {why}")]
    Conflict {
        /// The registry.
        name: String,
        /// What is wrong.
        why: String,
    },
}

impl ConsulConfig {
    /// The origin every service and endpoint of this registry carries.
    pub fn origin(&self) -> Origin {
        let cluster = self
            .cluster
            .as_deref()
            .or(self.datacenter.as_deref())
            .unwrap_or(&self.name);
        Origin {
            registry: RegistryId::new(&self.name),
            cluster: ClusterId::new(cluster),
        }
    }

    /// The address to talk to, with a scheme: `address`, else Consul's default.
    pub fn effective_address(&self) -> String {
        let a = self.address.as_deref().unwrap_or(DEFAULT_ADDRESS).trim();
        if a.contains("://") {
            a.to_string()
        } else {
            format!("http://{a}")
        }
    }

    /// The hostname of Consul service `service`.
    pub fn hostname(&self, service: &str) -> Result<Hostname, crate::model::HostnameError> {
        let dc = self.datacenter.as_deref().unwrap_or_default();
        Hostname::new(
            &self
                .hostname_template
                .replace("{service}", service)
                .replace("{dc}", dc),
        )
    }

    /// Checks everything that can be checked without talking to Consul.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let name = || self.name.clone();
        if self.name.is_empty() {
            return Err(ConfigError::EmptyName);
        }
        let optional = [
            ("cluster", &self.cluster),
            ("address", &self.address),
            ("datacenter", &self.datacenter),
            ("namespace", &self.namespace),
            ("partition", &self.partition),
            ("filter", &self.filter),
        ];
        for (field, value) in optional {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                return Err(ConfigError::Empty {
                    name: name(),
                    field,
                });
            }
        }
        self.validate_address()?;
        if self.token.is_some() && self.token_file.is_some() {
            return Err(ConfigError::Conflict {
                name: name(),
                why: "set either `token` or `token_file`, not both".into(),
            });
        }
        if self.tls.cert_file.is_some() != self.tls.key_file.is_some() {
            return Err(ConfigError::Conflict {
                name: name(),
                why: "tls.cert_file and tls.key_file go together; set both or neither".into(),
            });
        }
        self.validate_ranges()?;
        self.validate_template()
    }

    fn validate_address(&self) -> Result<(), ConfigError> {
        let address = self.effective_address();
        let bad = |why: String| ConfigError::Address {
            name: self.name.clone(),
            address: address.clone(),
            why,
        };
        let url = reqwest::Url::parse(&address).map_err(|e| bad(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad(format!(
                "scheme {:?} is not http or https",
                url.scheme()
            )));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(bad("no host".into()));
        }
        if url.query().is_some() {
            return Err(bad("no query string allowed".into()));
        }
        Ok(())
    }

    fn validate_ranges(&self) -> Result<(), ConfigError> {
        let range = |field: &'static str, why: &str| ConfigError::Range {
            name: self.name.clone(),
            field,
            why: why.to_string(),
        };
        if self.wait.is_zero() || self.wait > MAX_WAIT {
            return Err(range(
                "wait",
                "must be more than 0 and at most 10m (Consul's limit)",
            ));
        }
        if self.max_concurrent_watches == 0 {
            return Err(range("max_concurrent_watches", "must be at least 1"));
        }
        if self.min_query_interval.is_zero() {
            return Err(range(
                "min_query_interval",
                "must be more than 0: an unlimited loop can spin against Consul (REG-6)",
            ));
        }
        if self.max_requests_per_second == 0 {
            return Err(range("max_requests_per_second", "must be at least 1"));
        }
        if self.backoff.initial.is_zero() || self.backoff.initial > self.backoff.max {
            return Err(range(
                "backoff",
                "needs 0 < initial <= max (e.g. initial: 250ms, max: 30s)",
            ));
        }
        Ok(())
    }

    fn validate_template(&self) -> Result<(), ConfigError> {
        let bad = |why: &str| ConfigError::Template {
            name: self.name.clone(),
            template: self.hostname_template.clone(),
            why: why.to_string(),
        };
        let t = &self.hostname_template;
        if !t.contains("{service}") {
            return Err(bad("must contain {service}"));
        }
        if t.contains("{dc}") && self.datacenter.is_none() {
            return Err(bad(
                "uses {dc}, so `datacenter` must be set (hostnames cannot wait for Consul's answer)",
            ));
        }
        let rest = t.replace("{service}", "").replace("{dc}", "");
        if rest.contains('{') || rest.contains('}') {
            return Err(bad("has a placeholder other than {service} and {dc}"));
        }
        self.hostname("web").map(drop).map_err(|e| {
            bad(&format!(
                "does not give a valid hostname for service \"web\": {e}"
            ))
        })
    }
}

fn redact<S: serde::Serializer>(token: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match token {
        Some(_) => s.serialize_str("<redacted>"),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests;
