//! The xDS config source (`xds://host:port`, MCP over xDS): an ADS client that subscribes to the
//! four Istio collections and reports what it reads to the registry's worker in the same events
//! as the CRD source, so validation, last valid versions, rejections, sync and health are the
//! worker's, unchanged.
//!
//! - Delta ADS by default; a server that answers `UNIMPLEMENTED` gets state-of-the-world from then
//!   on (and `protocol: sotw` asks for it from the start).
//! - Every collection is a wildcard subscription. A SotW response is the whole collection; the
//!   first delta response of a stream is taken as the whole collection too (the stream starts
//!   without `initial_resource_versions`, so the server sends everything), later ones as changes.
//!   Either way a reconnect replaces the contents at once, never piecemeal (REG-1).
//! - ACK/NACK per response (`decode`): a response with a resource that cannot be identified is
//!   NACKed with `error_detail` and changes nothing; an identified but invalid object is rejected
//!   on its own, like a file's, and the response is ACKed.
//! - A failed stream is retried with jittered exponential backoff; meanwhile the source is
//!   Degraded and everything read before stays served (REG-2).

mod config;
mod decode;
mod session;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use tokio::sync::mpsc;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use tracing::{info, warn};

use super::cluster::{ClusterEvent, Scope};
use super::types::Kind;
use crate::support::backoff::RetryBackoff;

pub use config::{DEFAULT_NODE_ID, XdsProtocol, XdsSourceConfig, XdsTlsConfig};
pub(crate) use session::Ended;

/// How long a TCP (and TLS) connect may take before the attempt counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2 pings while the stream is idle, so a server that vanished without closing the
/// connection (a host gone, a partition) is noticed within `KEEPALIVE + KEEPALIVE_TIMEOUT`
/// rather than at the next TCP timeout, minutes later.
const KEEPALIVE: Duration = Duration::from_secs(30);

/// How long a ping may go unanswered.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the client task needs, read and checked when the source starts.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) config: XdsSourceConfig,
    /// The namespace of resources whose name has no `namespace/` part.
    pub(crate) default_namespace: String,
    /// The server, with TLS when configured.
    pub(crate) endpoint: Endpoint,
    /// `xds://host:port`, for messages.
    pub(crate) address: String,
}

/// Why the source cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    /// A TLS file cannot be read.
    #[error("xds config source {address}: cannot read tls.{what} {path}: {source}")]
    File {
        /// The source.
        address: String,
        /// Which setting.
        what: &'static str,
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The address or the TLS settings are not usable.
    #[error("xds config source {address}: {why}")]
    Invalid {
        /// The source.
        address: String,
        /// What is wrong.
        why: String,
    },
}

impl Settings {
    /// Reads the TLS files and builds the endpoint.
    pub(crate) fn new(
        config: XdsSourceConfig,
        default_namespace: String,
    ) -> Result<Self, SetupError> {
        let address = format!("xds://{}", config.address);
        let invalid = |why: String| SetupError::Invalid {
            address: address.clone(),
            why,
        };
        if let Some(why) = config.problem() {
            return Err(invalid(why));
        }
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let endpoint = Endpoint::from_shared(format!("{scheme}://{}", config.address))
            .map_err(|e| invalid(e.to_string()))?
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEPALIVE)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        let endpoint = match &config.tls {
            None => endpoint,
            Some(tls) => {
                let read = |what: &'static str, path: &std::path::Path| {
                    std::fs::read(path).map_err(|source| SetupError::File {
                        address: address.clone(),
                        what,
                        path: path.display().to_string(),
                        source,
                    })
                };
                let name = tls.server_name.clone();
                let mut c =
                    ClientTlsConfig::new().domain_name(name.unwrap_or(config.host().into()));
                c = match &tls.ca_file {
                    Some(path) => c.ca_certificate(Certificate::from_pem(read("ca_file", path)?)),
                    None => c.with_native_roots(),
                };
                if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
                    let identity =
                        Identity::from_pem(read("cert_file", cert)?, read("key_file", key)?);
                    c = c.identity(identity);
                }
                endpoint.tls_config(c).map_err(|e| invalid(e.to_string()))?
            }
        };
        Ok(Self {
            config,
            default_namespace,
            endpoint,
            address,
        })
    }

    /// One scope per collection, all namespaces: `Synced` waits for a response of each.
    pub(crate) fn scopes() -> Vec<Scope> {
        Kind::ALL
            .into_iter()
            .map(|kind| Scope {
                kind: Some(kind),
                namespace: None,
            })
            .collect()
    }

    fn node(&self) -> Node {
        Node {
            id: self.config.node_id.clone(),
            user_agent_name: "tributary".into(),
            ..Node::default()
        }
    }
}

/// Runs the client until the worker goes away: one stream at a time, reconnecting with backoff.
pub(crate) async fn run(settings: Arc<Settings>, tx: mpsc::Sender<ClusterEvent>) {
    let c = &settings.config;
    let mut retry = RetryBackoff::new(c.retry_initial, c.retry_max);
    let mut protocol = c.protocol;
    let mut health = session::Health::new(tx.clone());
    loop {
        let link = session::Link {
            settings: &settings,
            tx: &tx,
            health: &mut health,
        };
        let ended = match (session::connect(&settings).await, protocol) {
            (Err(ended), _) => ended,
            (Ok(client), XdsProtocol::Delta) => session::delta(client, link).await,
            (Ok(client), XdsProtocol::Sotw) => session::sotw(client, link).await,
        };
        match ended {
            Ended::WorkerGone => return,
            Ended::DeltaUnimplemented => {
                info!(address = %settings.address,
                    "the config server does not implement delta xDS; using state-of-the-world");
                protocol = XdsProtocol::Sotw;
            }
            Ended::Failed { reason, responded } => {
                if responded {
                    retry.reset();
                }
                warn!(address = %settings.address, error = %reason,
                    "xds config source stream failed; keeping what it sent, retrying");
                let reason = format!(
                    "{}: {reason} (is the config server reachable and serving ADS?)",
                    settings.address
                );
                if health.connection(Some(reason)).await.is_err() {
                    return;
                }
                tokio::time::sleep(retry.next().unwrap_or(c.retry_max)).await;
            }
        }
    }
}
