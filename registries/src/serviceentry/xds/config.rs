//! How the xDS config source (`xds://host:port`) connects: protocol, node id, TLS files, retry
//! timing. `docs/mcp.md` ("Consume") lists the keys as users write them under `config_sources:`.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which ADS flavour to speak.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum XdsProtocol {
    /// Incremental ADS; falls back to state-of-the-world for good when the server answers
    /// `UNIMPLEMENTED` (servers older than delta xDS).
    #[default]
    Delta,
    /// State-of-the-world ADS only.
    Sotw,
}

/// TLS to the config server: the same files as the Consul client's `tls:` (PEM).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct XdsTlsConfig {
    /// PEM file of the CA(s) that signed the server's certificate; unset: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate, when the server verifies clients (mTLS).
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// The name the server's certificate must carry; unset: the host of the address.
    pub server_name: Option<String>,
}

/// One xDS config server.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct XdsSourceConfig {
    /// `host:port` of the server (the address without `xds://`).
    pub address: String,
    /// `delta` (default, with SotW fallback) or `sotw`.
    pub protocol: XdsProtocol,
    /// The node id sent in requests (servers key their per-client state by it).
    pub node_id: String,
    /// TLS to the server; unset: plaintext HTTP/2.
    pub tls: Option<XdsTlsConfig>,
    /// First reconnect delay after the stream fails; doubles (with jitter) up to `retry_max`.
    #[serde(with = "crate::duration")]
    pub retry_initial: Duration,
    /// Longest reconnect delay.
    #[serde(with = "crate::duration")]
    pub retry_max: Duration,
}

/// The node id when none is configured: says what the client is, as Envoy's `node.id` does.
pub const DEFAULT_NODE_ID: &str = "tributary-config-client";

impl Default for XdsSourceConfig {
    fn default() -> Self {
        Self {
            address: String::new(),
            protocol: XdsProtocol::Delta,
            node_id: DEFAULT_NODE_ID.into(),
            tls: None,
            retry_initial: Duration::from_millis(250),
            retry_max: Duration::from_secs(30),
        }
    }
}

impl XdsSourceConfig {
    /// What is wrong with the settings, if anything (files are read when the source starts).
    pub fn problem(&self) -> Option<String> {
        let host_port = self.address.rsplit_once(':');
        if host_port.is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err()) {
            return Some(format!(
                "`xds.address` {:?} is not host:port (as in xds://istiod.istio-system:15010)",
                self.address
            ));
        }
        if self.node_id.is_empty() {
            return Some("`xds.node_id` is empty".into());
        }
        if self.retry_initial.is_zero() || self.retry_max < self.retry_initial {
            return Some("`xds.retry_initial` must be positive and at most `xds.retry_max`".into());
        }
        let tls = self.tls.as_ref()?;
        if tls.cert_file.is_some() != tls.key_file.is_some() {
            return Some(
                "`tls.cert_file` and `tls.key_file` go together; set both or neither".into(),
            );
        }
        None
    }

    /// The host part of the address (the default TLS server name).
    pub fn host(&self) -> &str {
        let host = self.address.rsplit_once(':').map_or("", |(h, _)| h);
        host.trim_start_matches('[').trim_end_matches(']')
    }
}
