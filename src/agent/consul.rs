//! Registering the VM's service in the local Consul agent (`PUT /v1/agent/service/register`) with
//! an HTTP check, and removing it on shutdown (`PUT /v1/agent/service/deregister/<id>`).
//!
//! Registration is retried until the Consul agent takes it (at boot it may start after us);
//! deregistration happens only on a requested shutdown: an agent that dies leaves its check to
//! turn critical, which is what tells the mesh.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use tracing::{info, warn};

use super::AgentError;

/// The Consul agent a VM talks to when nothing says otherwise.
pub const DEFAULT_CONSUL_ADDR: &str = "http://127.0.0.1:8500";

/// How often the check runs when not configured (Consul's documentation examples use 10s).
const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// Between registration attempts while the Consul agent is not answering.
const REGISTER_RETRY: Duration = Duration::from_secs(1);

/// One agent API request's limit (the local agent answers from memory).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The `consul:` section of the agent's file (flags override each field).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsulFileSection {
    /// The local Consul agent's HTTP address.
    pub address: Option<String>,
    /// ACL token (`X-Consul-Token`).
    pub token: Option<String>,
    /// The service name to register.
    pub service: Option<String>,
    /// The instance id (default: `<service>-<ip>`).
    pub id: Option<String>,
    /// The application's port.
    pub port: Option<u16>,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// `Service.Meta` (besides `protocol`).
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
    /// `Meta.protocol`: `http`, `http2`, `grpc` or `tcp` [default: `http`].
    pub protocol: Option<String>,
    /// The HTTP check's URL [default: the agent's `/healthz/ready`].
    pub check_url: Option<String>,
    /// The check interval [default: 10s].
    #[serde(default, with = "opt_duration")]
    pub check_interval: Option<Duration>,
}

mod opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        #[derive(Deserialize)]
        struct Wrap(#[serde(with = "tributary_registries::duration")] Duration);
        Ok(Option::<Wrap>::deserialize(d)?.map(|w| w.0))
    }
}

/// What to register, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsulRegistration {
    /// The Consul agent's base URL.
    pub address: String,
    /// ACL token.
    pub token: Option<String>,
    /// Service name.
    pub service: String,
    /// Instance id.
    pub id: String,
    /// The address other proxies reach this VM at.
    pub ip: IpAddr,
    /// The application's port.
    pub port: u16,
    /// Tags.
    pub tags: Vec<String>,
    /// `Service.Meta`, including `protocol`.
    pub meta: BTreeMap<String, String>,
    /// The HTTP check's URL.
    pub check_url: String,
    /// The check interval.
    pub check_interval: Duration,
}

impl ConsulRegistration {
    /// Resolves the section for a VM at `ip` whose readiness is at `ready_url`; `None` when no
    /// service is named (registration is off).
    pub fn resolve(
        s: ConsulFileSection,
        ip: IpAddr,
        ready_url: String,
    ) -> Result<Option<Self>, AgentError> {
        let Some(service) = s.service else {
            return Ok(None);
        };
        let port = s.port.ok_or_else(|| {
            AgentError::Invalid(format!(
                "Consul service {service:?} needs the application's port (--consul-port)"
            ))
        })?;
        let mut address = s.address.unwrap_or_else(|| DEFAULT_CONSUL_ADDR.to_string());
        if !address.contains("://") {
            address = format!("http://{address}");
        }
        let mut meta = s.meta;
        meta.insert(
            "protocol".into(),
            s.protocol.unwrap_or_else(|| "http".into()),
        );
        Ok(Some(Self {
            address: address.trim_end_matches('/').to_string(),
            token: s.token.filter(|t| !t.is_empty()),
            id: s.id.unwrap_or_else(|| format!("{service}-{ip}")),
            service,
            ip,
            port,
            tags: s.tags,
            meta,
            check_url: s.check_url.unwrap_or(ready_url),
            check_interval: s.check_interval.unwrap_or(DEFAULT_CHECK_INTERVAL),
        }))
    }

    /// Checks what Consul would refuse.
    pub fn validate(&self) -> Result<(), AgentError> {
        if self.service.is_empty() || self.id.is_empty() {
            return Err(AgentError::Invalid(
                "the Consul service name and id must not be empty".into(),
            ));
        }
        if self.check_interval < Duration::from_secs(1) {
            return Err(AgentError::Invalid(
                "--consul-check-interval must be at least 1s".into(),
            ));
        }
        match self.meta.get("protocol").map(String::as_str) {
            Some("http" | "http2" | "grpc" | "tcp") => Ok(()),
            other => Err(AgentError::Invalid(format!(
                "--consul-protocol {other:?}: use http, http2, grpc or tcp"
            ))),
        }
    }

    /// The agent API's service definition.
    pub fn definition(&self) -> serde_json::Value {
        json!({
            "ID": self.id,
            "Name": self.service,
            "Address": self.ip.to_string(),
            "Port": self.port,
            "Tags": self.tags,
            "Meta": self.meta,
            "Check": {
                "Name": "tributary agent readiness",
                "HTTP": self.check_url,
                "Method": "GET",
                "Interval": humantime::format_duration(self.check_interval).to_string(),
                "Timeout": humantime::format_duration(self.check_interval.min(REQUEST_TIMEOUT)).to_string(),
            },
        })
    }
}

/// Talks to the Consul agent.
#[derive(Debug, Clone)]
pub(super) struct Registrar {
    client: reqwest::Client,
    reg: ConsulRegistration,
}

impl Registrar {
    /// A registrar for `reg`.
    pub(super) fn new(reg: ConsulRegistration) -> Self {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .build()
            .unwrap_or_default();
        Self { client, reg }
    }

    async fn put(&self, path: &str, body: Option<&serde_json::Value>) -> Result<(), AgentError> {
        let url = format!("{}{path}", self.reg.address);
        let mut req = self.client.put(&url);
        if let Some(t) = &self.reg.token {
            req = req.header("X-Consul-Token", t);
        }
        if let Some(b) = body {
            req = req
                .header("Content-Type", "application/json")
                .body(b.to_string());
        }
        let consul = |e: String| AgentError::Consul {
            address: self.reg.address.clone(),
            error: e,
        };
        let r = req.send().await.map_err(|e| consul(e.to_string()))?;
        let status = r.status();
        if !status.is_success() {
            let text = r.text().await.unwrap_or_default();
            return Err(consul(format!("PUT {path}: {status}: {}", text.trim())));
        }
        Ok(())
    }

    /// Registers, retrying until the agent takes it.
    pub(super) async fn register_until_done(&self) {
        let def = self.reg.definition();
        loop {
            match self.put("/v1/agent/service/register", Some(&def)).await {
                Ok(()) => {
                    info!(service = %self.reg.service, id = %self.reg.id, "registered in Consul");
                    return;
                }
                Err(e) => warn!(error = %e, "Consul registration failed; retrying"),
            }
            tokio::time::sleep(REGISTER_RETRY).await;
        }
    }

    /// Deregisters (once; a failure is logged by the caller).
    pub(super) async fn deregister(&self) -> Result<(), AgentError> {
        self.put(
            &format!("/v1/agent/service/deregister/{}", self.reg.id),
            None,
        )
        .await?;
        info!(id = %self.reg.id, "deregistered from Consul");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_defaults_and_builds_the_agent_definition() {
        let ip: IpAddr = "127.0.0.2".parse().unwrap();
        let off = ConsulRegistration::resolve(ConsulFileSection::default(), ip, "u".into());
        assert_eq!(off.unwrap(), None);
        let no_port = ConsulFileSection {
            service: Some("app".into()),
            ..Default::default()
        };
        assert!(ConsulRegistration::resolve(no_port, ip, "u".into()).is_err());
        let s = ConsulFileSection {
            service: Some("app".into()),
            port: Some(8080),
            address: Some("127.0.0.1:8500".into()),
            tags: vec!["vm".into()],
            ..Default::default()
        };
        let r = ConsulRegistration::resolve(s, ip, "http://127.0.0.1:15021/healthz/ready".into())
            .unwrap()
            .unwrap();
        r.validate().unwrap();
        assert_eq!(r.address, "http://127.0.0.1:8500");
        assert_eq!(r.id, "app-127.0.0.2");
        let d = r.definition();
        assert_eq!(d["Address"], "127.0.0.2");
        assert_eq!(d["Port"], 8080);
        assert_eq!(d["Meta"]["protocol"], "http");
        assert_eq!(d["Check"]["HTTP"], "http://127.0.0.1:15021/healthz/ready");
        assert_eq!(d["Check"]["Interval"], "10s");
        let bad = ConsulRegistration {
            meta: BTreeMap::from([("protocol".to_string(), "udp".to_string())]),
            ..r
        };
        assert!(bad.validate().is_err());
    }
}
