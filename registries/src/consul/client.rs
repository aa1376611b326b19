//! A small Consul HTTP client (reqwest, rustls): the two blocking reads the registry needs, with
//! their consistency headers.
//!
//! Every request carries `X-Consul-Token` when a token is configured, and `dc` / `ns` /
//! `partition` / `stale` / `filter` only when configured (OSS Consul rejects `partition`). A
//! blocking request (`index` > 0) gets `wait` and a timeout of `wait` plus Consul's jitter
//! (`wait/16`) plus [`TIMEOUT_GRACE`], so a hung Consul is noticed without cutting a healthy
//! blocking query short.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{StatusCode, Url};

use super::config::ConsulConfig;
use super::wire::{self, HealthEntry, ServiceList};

/// How much longer than its blocking wait (plus Consul's `wait/16` jitter) a request may take
/// before it counts as hung. A healthy Consul answers within wait + wait/16; five seconds more
/// covers a loaded server and the network, and is also the whole budget of a non-blocking read.
pub const TIMEOUT_GRACE: Duration = Duration::from_secs(5);

/// Connecting to the agent is local or nearby; longer than this, it is not there.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How much of an error answer's body goes into the error message.
const ERROR_BODY_CHARS: usize = 200;

/// One blocking read: `index` 0 reads at once; any other index blocks up to `wait` for a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Query {
    /// The last `X-Consul-Index` seen (0: none, read at once).
    pub index: u64,
    /// How long Consul may hold the request waiting for a change.
    pub wait: Duration,
}

impl Query {
    /// The request timeout: the blocking wait plus Consul's jitter plus [`TIMEOUT_GRACE`].
    pub(super) fn timeout(&self) -> Duration {
        match self.index {
            0 => TIMEOUT_GRACE,
            _ => self.wait + self.wait / 16 + TIMEOUT_GRACE,
        }
    }
}

/// The consistency headers of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct QueryMeta {
    /// `X-Consul-Index` (an answer without it is refused as not Consul's).
    pub index: u64,
    /// `X-Consul-KnownLeader` (true when absent).
    pub known_leader: bool,
    /// `X-Consul-LastContact`: how long since the answering server heard from the leader.
    pub last_contact: Duration,
}

/// A parsed answer with its headers.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Answer<T> {
    /// The body.
    pub body: T,
    /// The headers.
    pub meta: QueryMeta,
}

/// Why a Consul request failed. Each says what to check.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The client could not be built from the config (TLS files, token file).
    #[error("consul client setup: {0}")]
    Setup(String),
    /// No TCP/TLS connection could be made.
    #[error(
        "cannot connect to Consul at {address}: {source}; is it running, and is `address` (or CONSUL_HTTP_ADDR) right?"
    )]
    Connect {
        /// Consul's address.
        address: String,
        /// The transport error.
        source: reqwest::Error,
    },
    /// No answer in time: Consul is hung or overloaded.
    #[error(
        "Consul at {address} did not answer {path} within {after:?}; is it hung or overloaded?"
    )]
    Timeout {
        /// Consul's address.
        address: String,
        /// The request path.
        path: String,
        /// The timeout.
        after: Duration,
    },
    /// Consul answered with an error status.
    #[error("Consul at {address} answered {status} to {path}: {body}{hint}")]
    Status {
        /// Consul's address.
        address: String,
        /// The request path.
        path: String,
        /// The HTTP status.
        status: StatusCode,
        /// The start of the answer's body.
        body: String,
        /// What to check, for statuses that have a usual cause.
        hint: &'static str,
    },
    /// The request failed after connecting (reset, truncated body, ...).
    #[error("request {path} to Consul at {address} failed: {source}")]
    Transport {
        /// Consul's address.
        address: String,
        /// The request path.
        path: String,
        /// The transport error.
        source: reqwest::Error,
    },
    /// A successful answer without `X-Consul-Index`: not Consul, or a proxy dropping headers.
    #[error(
        "the answer to {path} from {address} has no X-Consul-Index header; is `address` Consul's HTTP API, or does a proxy drop headers?"
    )]
    NoIndex {
        /// The address.
        address: String,
        /// The request path.
        path: String,
    },
    /// The body is not the JSON Consul documents.
    #[error("Consul's answer to {path} is not the expected JSON: {source}")]
    Body {
        /// The request path.
        path: String,
        /// The parse error.
        source: serde_json::Error,
    },
}

/// The Consul HTTP client of one registry.
#[derive(Debug, Clone)]
pub(super) struct Client {
    http: reqwest::Client,
    /// `<address>/v1/`.
    base: Url,
    address: String,
    /// Query parameters every request carries (`dc`, `ns`, `partition`, `stale`).
    common: Vec<(&'static str, String)>,
    /// `filter` of instance reads.
    filter: Option<String>,
}

impl Client {
    /// A client for `config` (validated). Reads the TLS and token files.
    pub(super) fn new(config: &ConsulConfig) -> Result<Self, ClientError> {
        let address = config.effective_address();
        let mut base = Url::parse(&address)
            .map_err(|e| ClientError::Setup(format!("address {address:?}: {e}")))?;
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let base = base
            .join("v1/")
            .map_err(|e| ClientError::Setup(format!("address {address:?}: {e}")))?;
        let mut headers = HeaderMap::new();
        if let Some(token) = token(config)? {
            let mut value = HeaderValue::from_str(&token).map_err(|_| {
                ClientError::Setup("the ACL token has characters a header cannot carry".into())
            })?;
            value.set_sensitive(true);
            headers.insert("X-Consul-Token", value);
        }
        let builder = reqwest::Client::builder()
            .use_rustls_tls()
            .default_headers(headers)
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_max_idle_per_host(config.max_concurrent_watches + 2)
            .user_agent(concat!("tributary/", env!("CARGO_PKG_VERSION")));
        let http = tls(builder, config)?
            .build()
            .map_err(|e| ClientError::Setup(format!("HTTP client: {e}")))?;
        let mut common = Vec::new();
        let optional = [
            ("dc", &config.datacenter),
            ("ns", &config.namespace),
            ("partition", &config.partition),
        ];
        for (key, value) in optional {
            if let Some(v) = value {
                common.push((key, v.clone()));
            }
        }
        if config.stale {
            common.push(("stale", String::new()));
        }
        Ok(Self {
            http,
            base,
            address,
            common,
            filter: config.filter.clone(),
        })
    }

    /// Consul's address, for messages.
    pub(super) fn address(&self) -> &str {
        &self.address
    }

    /// `GET /v1/catalog/services`.
    pub(super) async fn services(&self, q: Query) -> Result<Answer<ServiceList>, ClientError> {
        let url = self.url(&["catalog", "services"]);
        let (bytes, meta, path) = self.get(url, q, None).await?;
        let body = wire::parse_service_list(&bytes).map_err(|source| ClientError::Body {
            path: path.clone(),
            source,
        })?;
        Ok(Answer { body, meta })
    }

    /// `GET /v1/health/service/<name>`: every instance with its node and checks.
    pub(super) async fn health(
        &self,
        name: &str,
        q: Query,
    ) -> Result<Answer<Vec<HealthEntry>>, ClientError> {
        let url = self.url(&["health", "service", name]);
        let filter = self.filter.as_deref();
        let (bytes, meta, path) = self.get(url, q, filter).await?;
        let body =
            wire::parse_health(&bytes).map_err(|source| ClientError::Body { path, source })?;
        Ok(Answer { body, meta })
    }

    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    async fn get(
        &self,
        url: Url,
        q: Query,
        filter: Option<&str>,
    ) -> Result<(bytes::Bytes, QueryMeta, String), ClientError> {
        let path = url.path().to_string();
        let mut params: Vec<(&str, String)> =
            self.common.iter().map(|(k, v)| (*k, v.clone())).collect();
        if q.index > 0 {
            params.push(("index", q.index.to_string()));
            params.push(("wait", format!("{}ms", q.wait.as_millis())));
        }
        if let Some(f) = filter {
            params.push(("filter", f.to_string()));
        }
        let timeout = q.timeout();
        let response = self
            .http
            .get(url)
            .query(&params)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| self.transport(e, &path, timeout))?;
        let status = response.status();
        let meta = query_meta(response.headers());
        let has_index = response.headers().contains_key("X-Consul-Index");
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.transport(e, &path, timeout))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            let body: String = text.trim().chars().take(ERROR_BODY_CHARS).collect();
            return Err(ClientError::Status {
                address: self.address.clone(),
                path,
                status,
                body,
                hint: hint(status),
            });
        }
        if !has_index {
            // Without it every read would be non-blocking: a proxy is in the way, not Consul.
            return Err(ClientError::NoIndex {
                address: self.address.clone(),
                path,
            });
        }
        Ok((bytes, meta, path))
    }

    fn transport(&self, e: reqwest::Error, path: &str, timeout: Duration) -> ClientError {
        let address = self.address.clone();
        if e.is_timeout() {
            ClientError::Timeout {
                address,
                path: path.to_string(),
                after: timeout,
            }
        } else if e.is_connect() {
            ClientError::Connect { address, source: e }
        } else {
            ClientError::Transport {
                address,
                path: path.to_string(),
                source: e,
            }
        }
    }
}

fn hint(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 | 403 => {
            " (does the ACL token, `token` or CONSUL_HTTP_TOKEN, have service:read and node:read?)"
        }
        400 => " (namespace and partition need Consul Enterprise; is `datacenter` right?)",
        500 => {
            " (a Consul server without a leader answers 500: check `consul operator raft list-peers`)"
        }
        _ => "",
    }
}

/// The consistency headers of an answer.
pub(super) fn query_meta(headers: &HeaderMap) -> QueryMeta {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    QueryMeta {
        index: text("X-Consul-Index")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0),
        known_leader: text("X-Consul-KnownLeader").is_none_or(|v| v.trim() != "false"),
        last_contact: Duration::from_millis(
            text("X-Consul-LastContact")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0),
        ),
    }
}

fn token(config: &ConsulConfig) -> Result<Option<String>, ClientError> {
    if let Some(path) = &config.token_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ClientError::Setup(format!("cannot read token_file {}: {e}", path.display()))
        })?;
        return Ok(Some(text.trim().to_string()).filter(|t| !t.is_empty()));
    }
    Ok(config.token.clone().filter(|t| !t.is_empty()))
}

fn tls(
    mut builder: reqwest::ClientBuilder,
    config: &ConsulConfig,
) -> Result<reqwest::ClientBuilder, ClientError> {
    let read = |what: &str, path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            ClientError::Setup(format!("cannot read tls.{what} {}: {e}", path.display()))
        })
    };
    let tls = &config.tls;
    if let Some(path) = &tls.ca_file {
        let pem = read("ca_file", path)?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| ClientError::Setup(format!("tls.ca_file {}: {e}", path.display())))?;
        if certs.is_empty() {
            return Err(ClientError::Setup(format!(
                "tls.ca_file {} holds no PEM certificate",
                path.display()
            )));
        }
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    if let (Some(cert), Some(key)) = (&tls.cert_file, &tls.key_file) {
        let mut pem = read("cert_file", cert)?;
        pem.push(b'\n');
        pem.extend(read("key_file", key)?);
        let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
            ClientError::Setup(format!(
                "tls.cert_file {} / tls.key_file {}: {e}",
                cert.display(),
                key.display()
            ))
        })?;
        builder = builder.identity(identity);
    }
    if tls.insecure_skip_verify {
        builder = builder.danger_accept_invalid_certs(true);
    }
    Ok(builder)
}

#[cfg(test)]
mod tests;
