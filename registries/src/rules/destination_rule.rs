//! `DestinationRule.spec` as written (istio/api `networking/v1alpha3/destination_rule.proto` in
//! its JSON form). These types only carry what was written; every check is in `validate`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::common::{Duration, PortSelector};

/// `DestinationRule.spec`: policies for traffic to `host` once routing has happened.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DestinationRule {
    /// The service the rule applies to: a full name, a short name read in the rule's namespace,
    /// or a wildcard (`*.example.com`).
    #[serde(default)]
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_policy: Option<TrafficPolicy>,
    /// Named groups of endpoints, selected by labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subsets: Vec<Subset>,
    /// Stored and shown, not applied: every proxy sees every rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub export_to: Vec<String>,
    /// Stored and shown, not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_selector: Option<WorkloadSelector>,
}

/// `workloadSelector`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

/// `subsets[]`: endpoints whose labels include `labels`, with their own policy.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Subset {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Overrides the rule's policy field by field (a field set here replaces the rule's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_policy: Option<TrafficPolicy>,
}

/// `trafficPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TrafficPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancerSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_pool: Option<ConnectionPoolSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier_detection: Option<OutlierDetection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ClientTlsSettings>,
    /// Per-port overrides; a port's settings replace the policy's field by field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub port_level_settings: Vec<PortTrafficPolicy>,
    /// Accepted, not applied (HTTP CONNECT tunnelling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<serde_json::Value>,
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_protocol: Option<serde_json::Value>,
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_budget: Option<serde_json::Value>,
}

/// `portLevelSettings[]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PortTrafficPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PortSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<LoadBalancerSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_pool: Option<ConnectionPoolSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outlier_detection: Option<OutlierDetection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ClientTlsSettings>,
}

/// `loadBalancer`: one of `simple` or `consistentHash`, plus locality settings.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simple: Option<SimpleLb>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consistent_hash: Option<ConsistentHash>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locality_lb_setting: Option<LocalityLbSetting>,
    /// Accepted, not applied (slow start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup_duration_secs: Option<serde_json::Value>,
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<serde_json::Value>,
}

/// `loadBalancer.simple`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SimpleLb {
    /// Envoy's default (round robin here, as istiod picks).
    Unspecified,
    /// Deprecated name of `LEAST_REQUEST`.
    LeastConn,
    Random,
    /// Forward to the address the caller asked for (an original-destination cluster).
    Passthrough,
    RoundRobin,
    LeastRequest,
}

/// `loadBalancer.consistentHash`: one hash key, and ring hash (the default) or maglev.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConsistentHash {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_header_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_cookie: Option<HttpCookie>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_source_ip: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_query_parameter_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_hash: Option<RingHashSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maglev: Option<MaglevSettings>,
    /// Deprecated form of `ringHash.minimumRingSize`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_ring_size: Option<u64>,
}

/// `consistentHash.httpCookie`: hash on a cookie, which Envoy sets when `ttl` is given.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpCookie {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<Duration>,
}

/// `consistentHash.ringHash`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RingHashSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_ring_size: Option<u64>,
}

/// `consistentHash.maglev`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MaglevSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_size: Option<u64>,
}

/// `localityLbSetting`: at most one of `distribute`, `failover` (with or without
/// `failoverPriority`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalityLbSetting {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub distribute: Vec<Distribute>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failover: Vec<Failover>,
    /// Labels (or `topology.istio.io/network`-style keys) whose equality with the proxy's ranks
    /// endpoints into priorities.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failover_priority: Vec<String>,
    /// `false` turns locality load balancing off for this rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// `distribute[]`: proxies in `from` (`region/zone/subzone`, `*` allowed as the last part) send
/// traffic to the localities of `to` with these weights (percentages summing to 100).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Distribute {
    #[serde(default)]
    pub from: String,
    #[serde(default)]
    pub to: BTreeMap<String, u32>,
}

/// `failover[]`: when region `from` has no healthy endpoint, region `to` is next.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Failover {
    #[serde(default)]
    pub from: String,
    #[serde(default)]
    pub to: String,
}

/// `connectionPool`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionPoolSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpSettings>,
}

/// `connectionPool.tcp`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TcpSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_timeout: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_keepalive: Option<TcpKeepalive>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connection_duration: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<Duration>,
}

/// `connectionPool.tcp.tcpKeepalive`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TcpKeepalive {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Duration>,
}

/// `connectionPool.http`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http1_max_pending_requests: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2_max_requests: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_requests_per_connection: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h2_upgrade_policy: Option<H2UpgradePolicy>,
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_client_protocol: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_streams: Option<i64>,
}

/// `connectionPool.http.h2UpgradePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum H2UpgradePolicy {
    /// The mesh default (do not upgrade, here).
    Default,
    DoNotUpgrade,
    /// Speak HTTP/2 to the upstream.
    Upgrade,
}

/// `outlierDetection`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutlierDetection {
    /// Deprecated; istiod reads it as a count of consecutive gateway errors (`502`, `503`,
    /// `504`), and so does tributary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_errors: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_external_local_origin_errors: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_local_origin_failures: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_gateway_errors: Option<i64>,
    #[serde(
        default,
        rename = "consecutive5xxErrors",
        skip_serializing_if = "Option::is_none"
    )]
    pub consecutive_5xx_errors: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_ejection_time: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ejection_percent: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_health_percent: Option<i64>,
}

/// `tls`: how the proxy talks to the upstream.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientTlsSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<TlsMode>,
    /// PEM file of the client certificate (`MUTUAL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_certificate: Option<String>,
    /// PEM file of the client key (`MUTUAL`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_key: Option<String>,
    /// PEM file of the CAs that verify the server; without it the server is not verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_certificates: Option<String>,
    /// Accepted, not applied (secrets come from files here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_name: Option<String>,
    /// Names the server certificate must carry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_alt_names: Vec<String>,
    /// SNI sent in the handshake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_verify: Option<bool>,
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_crl: Option<String>,
}

/// `tls.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TlsMode {
    Disable,
    Simple,
    Mutual,
    /// Istio's own mTLS certificates; tributary has no CA (rejected by validation).
    IstioMutual,
}
