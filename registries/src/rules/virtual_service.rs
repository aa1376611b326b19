//! `VirtualService.spec` as written (istio/api `networking/v1alpha3/virtual_service.proto` in its
//! JSON form). These types only carry what was written; every check is in `validate`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::common::{Duration, Percent, PortSelector, StringMatch};

/// `VirtualService.spec`: how requests to `hosts` are routed.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualService {
    /// Full names, short names (read in the rule's namespace) or wildcards.
    #[serde(default)]
    pub hosts: Vec<String>,
    /// Only `mesh` (the default when empty) is served here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<String>,
    /// HTTP routes, first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http: Vec<HttpRoute>,
    /// TLS routes by SNI, first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tls: Vec<TlsRoute>,
    /// TCP routes, first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tcp: Vec<TcpRoute>,
    /// Stored and shown, not applied: every proxy sees every rule.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub export_to: Vec<String>,
}

/// `http[]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRoute {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Any one of these matches (OR); each is an AND of its conditions. Empty: every request.
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    pub match_: Vec<HttpMatchRequest>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub route: Vec<HttpRouteDestination>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect: Option<HttpRedirect>,
    /// A fixed answer: `{status, body: {string | bytes}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direct_response: Option<DirectResponse>,
    /// Accepted, rejected by validation (delegate VirtualServices are not supported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegate: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewrite: Option<HttpRewrite>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<HttpRetry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<HttpFaultInjection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror: Option<Destination>,
    /// Several mirrors, each with its own percentage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<HttpMirrorPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_percentage: Option<Percent>,
    /// Deprecated integer form of `mirrorPercentage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mirror_percent: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cors_policy: Option<CorsPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<Headers>,
}

/// `http[].match[]`: every condition set must hold.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpMatchRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<StringMatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<StringMatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<StringMatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority: Option<StringMatch>,
    /// Header name (lower case) → how its value must match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, StringMatch>,
    /// The listener port the request came in on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// Accepted, not applied (every proxy gets the same routes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub source_labels: BTreeMap<String, String>,
    /// Only `mesh` is served here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub query_params: BTreeMap<String, StringMatch>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_uri_case: Option<bool>,
    /// Header name → a match that must **not** hold (an empty match: the header is absent).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub without_headers: BTreeMap<String, StringMatch>,
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_namespace: Option<String>,
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stat_prefix: Option<String>,
}

/// `destination`: a service (and optionally a subset and port) traffic goes to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    #[serde(default)]
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subset: Option<String>,
    /// Needed when the service has more than one port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<PortSelector>,
}

/// `http[].route[]`: a weighted destination with its own header edits.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteDestination {
    #[serde(default)]
    pub destination: Destination,
    /// Relative weight; all omitted means equal shares (one destination takes everything).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<Headers>,
}

/// `tcp[].route[]` / `tls[].route[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteDestination {
    #[serde(default)]
    pub destination: Destination,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
}

/// `redirect`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRedirect {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// `FROM_PROTOCOL_DEFAULT` or `FROM_REQUEST_PORT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derive_port: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// 301 (the default), 302, 303, 307 or 308.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redirect_code: Option<u32>,
}

/// `directResponse`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectResponse {
    #[serde(default)]
    pub status: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<DirectResponseBody>,
}

/// `directResponse.body`: `string` or `bytes` (base64).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectResponseBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub string: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<String>,
}

/// `rewrite`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRewrite {
    /// Replaces the matched prefix (or the whole path for an exact or regex match).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authority: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri_regex_rewrite: Option<RegexRewrite>,
}

/// `rewrite.uriRegexRewrite`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RegexRewrite {
    #[serde(default, rename = "match")]
    pub match_: String,
    #[serde(default)]
    pub rewrite: String,
}

/// `retries`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpRetry {
    /// 0 turns retries off.
    #[serde(default)]
    pub attempts: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_try_timeout: Option<Duration>,
    /// Comma-separated Envoy retry conditions and status codes (`5xx,gateway-error,503`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_on: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_remote_localities: Option<bool>,
}

/// `fault`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpFaultInjection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<Delay>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort: Option<Abort>,
}

/// `fault.delay`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Delay {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixed_delay: Option<Duration>,
    /// Accepted, rejected by validation (Istio does not implement it either).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exponential_delay: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<Percent>,
    /// Deprecated integer form of `percentage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<i64>,
}

/// `fault.abort`: one of `httpStatus`, `grpcStatus`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Abort {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<i64>,
    /// A gRPC status name (`UNAVAILABLE`) or number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_status: Option<String>,
    /// Accepted, rejected by validation (Istio does not implement it either).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http2_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<Percent>,
}

/// `mirrors[]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpMirrorPolicy {
    #[serde(default)]
    pub destination: Destination,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percentage: Option<Percent>,
}

/// `corsPolicy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CorsPolicy {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_origins: Vec<StringMatch>,
    /// Deprecated exact-origin form of `allowOrigins`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_origin: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_methods: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expose_headers: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<Duration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_credentials: Option<bool>,
    /// `FORWARD` (the default) or `IGNORE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmatched_preflights: Option<String>,
}

/// `headers`: edits to the request (before it is forwarded) and to the response.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Headers {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<HeaderOperations>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<HeaderOperations>,
}

/// `headers.request` / `headers.response`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeaderOperations {
    /// Overwrite these headers.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, String>,
    /// Append these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub add: BTreeMap<String, String>,
    /// Remove these headers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

/// `tls[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsRoute {
    #[serde(default, rename = "match")]
    pub match_: Vec<TlsMatchAttributes>,
    #[serde(default)]
    pub route: Vec<RouteDestination>,
}

/// `tls[].match[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsMatchAttributes {
    /// Required: the SNI values this route takes (wildcards allowed).
    #[serde(default)]
    pub sni_hosts: Vec<String>,
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destination_subnets: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub source_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<String>,
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_namespace: Option<String>,
}

/// `tcp[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TcpRoute {
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    pub match_: Vec<L4MatchAttributes>,
    #[serde(default)]
    pub route: Vec<RouteDestination>,
}

/// `tcp[].match[]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct L4MatchAttributes {
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub destination_subnets: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_subnet: Option<String>,
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub source_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<String>,
    /// Accepted, not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_namespace: Option<String>,
}
