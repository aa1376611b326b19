//! A VirtualService's HTTP routes → the routes of one virtual host, as istiod translates them
//! (`pilot/pkg/networking/core/route/route.go`).
//!
//! Each `http[]` entry becomes one Envoy route per `match` (routes are tried in order, so the
//! VirtualService's order is kept), and translation stops at the first catch-all, after which
//! nothing could match. Matches for another port than the route configuration's are left out, as
//! istiod does. A host with a VirtualService is routed by it alone: a request no route matches is
//! answered 404, as in Istio.

use std::collections::HashMap;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::{DataSource, RuntimeFractionalPercent, data_source};
use envoy_types::pb::envoy::config::route::v3::{
    DirectResponseAction, HeaderMatcher, QueryParameterMatcher, RedirectAction, RetryPolicy, Route,
    RouteAction, RouteMatch, WeightedCluster, header_matcher, query_parameter_matcher,
    redirect_action,
    retry_policy::RetryHostPredicate,
    route, route_action,
    route_action::{HashPolicy, RequestMirrorPolicy, hash_policy},
    route_match,
    weighted_cluster::ClusterWeight,
};
use envoy_types::pb::envoy::extensions::retry::host::previous_hosts::v3::PreviousHostsPredicate;
use envoy_types::pb::envoy::r#type::matcher::v3::{
    RegexMatchAndSubstitute, RegexMatcher, StringMatcher, string_matcher,
};
use envoy_types::pb::google::protobuf::{BoolValue, UInt32Value};
use tributary_registries::rules::{
    Destination, Headers, HttpMatchRequest, HttpRoute, Percent, Rule, StringMatch, VirtualService,
};
use tributary_registries::{Hostname, ServicePort};

use super::RuleIndex;
use super::index::resolve_host;
use crate::aggregate::MergedService;
use crate::envoy::ConfigIssue;

mod filters;

use crate::envoy::naming::{cluster_name, subset_cluster_name};
use crate::envoy::pb::{any, duration};
use filters::{cors_policy, fraction, header_edits, header_options, http_fault};

/// The name of Envoy's fault filter, whose per-route config carries `fault`.
pub(crate) const FAULT_FILTER: &str = "envoy.filters.http.fault";
/// The name of Envoy's CORS filter, whose per-route config carries `corsPolicy`.
pub(crate) const CORS_FILTER: &str = "envoy.filters.http.cors";

/// istiod's default retry conditions, for routes whose VirtualService sets no `retries`.
pub const DEFAULT_RETRY_ON: &str =
    "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes";

/// The status code istiod's default policy retries.
const DEFAULT_RETRIABLE_STATUS: u32 = 503;

/// How many hosts Envoy tries to pick that it has not tried yet, per retry (istiod's value).
const HOST_SELECTION_RETRY_MAX_ATTEMPTS: i64 = 5;

/// Settings for what rules generate that the rules themselves do not say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrafficOptions {
    /// Attempts of the retry policy given to VirtualService routes that set no `retries` (istiod's
    /// default: 2; 0 turns the default policy off).
    pub default_retry_attempts: u32,
}

impl Default for TrafficOptions {
    fn default() -> Self {
        Self {
            default_retry_attempts: 2,
        }
    }
}

/// What routes are generated in the context of: the port of the route configuration, every
/// service (for destination ports) and every rule (for hash policies).
pub struct RouteContext<'a> {
    /// The port of the route configuration being generated.
    pub port: u16,
    /// Every merged service, by hostname (for destination ports).
    pub services: &'a HashMap<Hostname, Arc<MergedService>>,
    /// Every traffic rule (for hash policies).
    pub rules: &'a RuleIndex,
    /// Generation settings for traffic rules.
    pub options: &'a TrafficOptions,
}

/// The routes of `vs` on `ctx.port`; issues name the VirtualService.
pub fn virtual_service_routes(
    vs: &Rule<VirtualService>,
    ctx: &RouteContext<'_>,
    issues: &mut Vec<ConfigIssue>,
) -> Vec<Route> {
    let mut out = Vec::new();
    let object = format!("VirtualService {}", vs.key());
    for (i, http) in vs.spec.http.iter().enumerate() {
        let field = format!("spec.http[{i}]");
        let matches: Vec<Option<&HttpMatchRequest>> = if http.match_.is_empty() {
            vec![None]
        } else {
            http.match_
                .iter()
                .filter(|m| m.port.is_none_or(|p| p == u32::from(ctx.port)))
                .map(Some)
                .collect()
        };
        let mut catch_all = false;
        for (j, m) in matches.into_iter().enumerate() {
            catch_all |= m.is_none_or(is_catch_all);
            let name = match (&http.name, m.and_then(|m| m.name.as_ref())) {
                (Some(r), Some(m)) => format!("{r}.{m}"),
                (Some(r), None) => r.clone(),
                _ => format!("{}.{}.{i}.{j}", vs.meta.namespace, vs.meta.name),
            };
            let mut r = Route {
                name,
                r#match: Some(route_match(m)),
                ..Default::default()
            };
            action(
                &mut r,
                http,
                &vs.meta.namespace,
                ctx,
                &object,
                &field,
                issues,
            );
            out.push(r);
        }
        if catch_all {
            break;
        }
    }
    out
}

/// The default route of a service with no VirtualService but a consistent-hash DestinationRule:
/// everything to its cluster, hashed as the rule says.
pub(crate) fn default_route_with_hash(
    svc: &MergedService,
    port: &ServicePort,
    hash: Vec<HashPolicy>,
) -> Route {
    Route {
        name: "default".to_string(),
        r#match: Some(route_match(None)),
        action: Some(route::Action::Route(RouteAction {
            cluster_specifier: Some(route_action::ClusterSpecifier::Cluster(cluster_name(
                port.port,
                &svc.service.hostname,
            ))),
            timeout: Some(duration(std::time::Duration::ZERO)),
            hash_policy: hash,
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn is_catch_all(m: &HttpMatchRequest) -> bool {
    let prefix_root = m
        .uri
        .as_ref()
        .is_none_or(|u| u.prefix.as_deref() == Some("/") && u.exact.is_none() && u.regex.is_none());
    prefix_root
        && m.headers.is_empty()
        && m.without_headers.is_empty()
        && m.query_params.is_empty()
        && m.method.is_none()
        && m.authority.is_none()
        && m.scheme.is_none()
}

fn route_match(m: Option<&HttpMatchRequest>) -> RouteMatch {
    let mut out = RouteMatch {
        path_specifier: Some(route_match::PathSpecifier::Prefix("/".into())),
        ..Default::default()
    };
    let Some(m) = m else { return out };
    if let Some(uri) = &m.uri {
        out.path_specifier = Some(if let Some(exact) = &uri.exact {
            route_match::PathSpecifier::Path(exact.clone())
        } else if let Some(re) = &uri.regex {
            route_match::PathSpecifier::SafeRegex(regex(re))
        } else {
            route_match::PathSpecifier::Prefix(uri.prefix.clone().unwrap_or_else(|| "/".into()))
        });
    }
    if m.ignore_uri_case == Some(true) {
        out.case_sensitive = Some(BoolValue { value: false });
    }
    for (name, value) in [
        (":method", &m.method),
        (":authority", &m.authority),
        (":scheme", &m.scheme),
    ] {
        if let Some(v) = value {
            out.headers.push(header_matcher(name, v, false));
        }
    }
    for (name, v) in &m.headers {
        out.headers.push(header_matcher(name, v, false));
    }
    for (name, v) in &m.without_headers {
        out.headers.push(header_matcher(name, v, true));
    }
    for (name, v) in &m.query_params {
        out.query_parameters.push(QueryParameterMatcher {
            name: name.clone(),
            query_parameter_match_specifier: Some(match string_matcher_of(v) {
                Some(sm) => query_parameter_matcher::QueryParameterMatchSpecifier::StringMatch(sm),
                None => query_parameter_matcher::QueryParameterMatchSpecifier::PresentMatch(true),
            }),
        });
    }
    out
}

fn regex(re: &str) -> RegexMatcher {
    RegexMatcher {
        regex: re.to_string(),
        ..Default::default()
    }
}

/// Istio's `StringMatch` as Envoy's; `None` for an empty match (presence).
fn string_matcher_of(m: &StringMatch) -> Option<StringMatcher> {
    let pattern = if let Some(e) = &m.exact {
        string_matcher::MatchPattern::Exact(e.clone())
    } else if let Some(p) = &m.prefix {
        string_matcher::MatchPattern::Prefix(p.clone())
    } else if let Some(r) = &m.regex {
        string_matcher::MatchPattern::SafeRegex(regex(r))
    } else {
        return None;
    };
    Some(StringMatcher {
        match_pattern: Some(pattern),
        ..Default::default()
    })
}

fn header_matcher(name: &str, m: &StringMatch, invert: bool) -> HeaderMatcher {
    HeaderMatcher {
        name: name.to_string(),
        invert_match: invert,
        header_match_specifier: Some(match string_matcher_of(m) {
            Some(sm) => header_matcher::HeaderMatchSpecifier::StringMatch(sm),
            None => header_matcher::HeaderMatchSpecifier::PresentMatch(true),
        }),
        ..Default::default()
    }
}

/// Fills the route's action and per-route settings from `http`.
fn action(
    r: &mut Route,
    http: &HttpRoute,
    namespace: &str,
    ctx: &RouteContext<'_>,
    object: &str,
    field: &str,
    issues: &mut Vec<ConfigIssue>,
) {
    if let Some(headers) = &http.headers {
        header_edits(r, headers);
    }
    if let Some(redirect) = &http.redirect {
        let code = match redirect.redirect_code.unwrap_or(301) {
            302 => redirect_action::RedirectResponseCode::Found,
            303 => redirect_action::RedirectResponseCode::SeeOther,
            307 => redirect_action::RedirectResponseCode::TemporaryRedirect,
            308 => redirect_action::RedirectResponseCode::PermanentRedirect,
            _ => redirect_action::RedirectResponseCode::MovedPermanently,
        };
        r.action = Some(route::Action::Redirect(RedirectAction {
            host_redirect: redirect.authority.clone().unwrap_or_default(),
            port_redirect: redirect.port.unwrap_or(0),
            response_code: code as i32,
            path_rewrite_specifier: redirect
                .uri
                .clone()
                .map(redirect_action::PathRewriteSpecifier::PathRedirect),
            scheme_rewrite_specifier: redirect
                .scheme
                .clone()
                .map(redirect_action::SchemeRewriteSpecifier::SchemeRedirect),
            ..Default::default()
        }));
        return;
    }
    if let Some(direct) = &http.direct_response {
        let body = direct.body.as_ref().map(|b| DataSource {
            specifier: Some(match (&b.string, &b.bytes) {
                (Some(s), _) => data_source::Specifier::InlineString(s.clone()),
                (None, Some(bytes)) => data_source::Specifier::InlineString(bytes.clone()),
                (None, None) => data_source::Specifier::InlineString(String::new()),
            }),
            ..Default::default()
        });
        r.action = Some(route::Action::DirectResponse(DirectResponseAction {
            status: direct.status,
            body,
            ..Default::default()
        }));
        return;
    }
    let mut a = RouteAction {
        timeout: Some(duration(
            http.timeout
                .map(|d| d.get())
                .unwrap_or(std::time::Duration::ZERO),
        )),
        ..Default::default()
    };
    let dests: Vec<(String, u32, Option<&Headers>, Hostname)> = http
        .route
        .iter()
        .enumerate()
        .filter_map(|(i, d)| {
            let (cluster, host, _) = match destination_cluster(&d.destination, namespace, ctx) {
                Ok(c) => c,
                Err(message) => {
                    issues.push(ConfigIssue {
                        object: object.to_string(),
                        field: format!("{field}.route[{i}].destination"),
                        message,
                    });
                    return None;
                }
            };
            if let Some(subset) = &d.destination.subset
                && !subset_defined(ctx.rules, &host, subset)
            {
                // Routed anyway, as istiod does: the route is right once the rule comes.
                issues.push(ConfigIssue {
                    object: object.to_string(),
                    field: format!("{field}.route[{i}].destination.subset"),
                    message: format!(
                        "no DestinationRule defines subset {subset} of {host}; requests routed \
                         to it fail (503) until one does"
                    ),
                });
            }
            let weight = u32::try_from(d.weight.unwrap_or(0).max(0)).unwrap_or(u32::MAX);
            Some((cluster, weight, d.headers.as_ref(), host))
        })
        .collect();
    let total: u64 = dests.iter().map(|d| u64::from(d.1)).sum();
    a.cluster_specifier = Some(match dests.as_slice() {
        [] => {
            // Every destination was unusable: answer 503 rather than route somewhere else.
            r.action = Some(route::Action::DirectResponse(DirectResponseAction {
                status: 503,
                ..Default::default()
            }));
            return;
        }
        [(cluster, _, None, _)] => route_action::ClusterSpecifier::Cluster(cluster.clone()),
        _ => route_action::ClusterSpecifier::WeightedClusters(WeightedCluster {
            clusters: dests
                .iter()
                .filter(|d| d.1 > 0 || total == 0)
                .map(|(cluster, weight, headers, _)| {
                    let mut cw = ClusterWeight {
                        name: cluster.clone(),
                        weight: Some(UInt32Value {
                            value: if total == 0 { 1 } else { *weight },
                        }),
                        ..Default::default()
                    };
                    if let Some(h) = headers {
                        if let Some(req) = &h.request {
                            let (add, remove) = header_options(req);
                            cw.request_headers_to_add = add;
                            cw.request_headers_to_remove = remove;
                        }
                        if let Some(resp) = &h.response {
                            let (add, remove) = header_options(resp);
                            cw.response_headers_to_add = add;
                            cw.response_headers_to_remove = remove;
                        }
                    }
                    cw
                })
                .collect(),
            ..Default::default()
        }),
    });
    // Hash on what the destination's DestinationRule says, when every destination agrees.
    let hashes: Vec<Vec<HashPolicy>> = dests
        .iter()
        .map(|d| hash_policy_for(ctx.rules, &d.3))
        .collect();
    if let Some(first) = hashes.first()
        && hashes.iter().all(|h| h == first)
    {
        a.hash_policy = first.clone();
    }
    if let Some(rewrite) = &http.rewrite {
        if let Some(uri) = &rewrite.uri {
            a.prefix_rewrite = uri.clone();
        }
        if let Some(re) = &rewrite.uri_regex_rewrite {
            a.regex_rewrite = Some(RegexMatchAndSubstitute {
                pattern: Some(regex(&re.match_)),
                substitution: re.rewrite.clone(),
            });
        }
        if let Some(authority) = &rewrite.authority {
            a.host_rewrite_specifier = Some(
                route_action::HostRewriteSpecifier::HostRewriteLiteral(authority.clone()),
            );
        }
    }
    a.retry_policy = retry_policy(http, ctx.options);
    let mirrors: Vec<(&Destination, Option<Percent>)> = match &http.mirror {
        Some(m) => vec![(
            m,
            http.mirror_percentage
                .or(http.mirror_percent.map(|p| Percent {
                    value: f64::from(p),
                })),
        )],
        None => http
            .mirrors
            .iter()
            .map(|m| (&m.destination, m.percentage))
            .collect(),
    };
    for (i, (dest, percent)) in mirrors.into_iter().enumerate() {
        match destination_cluster(dest, namespace, ctx) {
            Ok((cluster, ..)) => a.request_mirror_policies.push(RequestMirrorPolicy {
                cluster,
                runtime_fraction: Some(RuntimeFractionalPercent {
                    default_value: Some(fraction(percent.map_or(100.0, |p| p.value))),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            Err(message) => issues.push(ConfigIssue {
                object: object.to_string(),
                field: format!("{field}.mirror[{i}]"),
                message,
            }),
        }
    }
    r.action = Some(route::Action::Route(a));
    // Two keys make the map's order vary; the route configuration is encoded in key order
    // (`envoy::route::canonical`), so the bytes (and the version) stay the same.
    if let Some(fault) = &http.fault {
        r.typed_per_filter_config
            .insert(FAULT_FILTER.to_string(), any(&http_fault(fault)));
    }
    if let Some(cors) = &http.cors_policy {
        r.typed_per_filter_config
            .insert(CORS_FILTER.to_string(), any(&cors_policy(cors)));
    }
}

/// The cluster a destination names, its hostname and port.
pub(super) fn destination_cluster(
    d: &Destination,
    namespace: &str,
    ctx: &RouteContext<'_>,
) -> Result<(String, Hostname, u16), String> {
    let full = resolve_host(&d.host, namespace);
    let host = Hostname::new(&full).map_err(|e| format!("destination host {}: {e}", d.host))?;
    let port = match d.port {
        Some(p) => u16::try_from(p.number).map_err(|_| format!("port {} is invalid", p.number))?,
        None => match ctx.services.get(&host).map(|s| s.service.ports.as_slice()) {
            Some([only]) => only.port,
            _ => ctx.port,
        },
    };
    let cluster = match d.subset.as_deref() {
        Some(subset) => subset_cluster_name(port, subset, &host),
        None => cluster_name(port, &host),
    };
    Ok((cluster, host, port))
}

/// Whether `host`'s DestinationRule defines `subset`.
fn subset_defined(rules: &RuleIndex, host: &Hostname, subset: &str) -> bool {
    rules
        .destination_rule(host)
        .is_some_and(|r| r.spec.subsets.iter().any(|s| s.name == subset))
}

/// The hash policy of `host`'s DestinationRule (consistent hashing only), as istiod builds it.
pub(crate) fn hash_policy_for(rules: &RuleIndex, host: &Hostname) -> Vec<HashPolicy> {
    let Some(hash) = rules.destination_rule(host).and_then(|r| {
        r.spec
            .traffic_policy
            .as_ref()?
            .load_balancer
            .as_ref()?
            .consistent_hash
            .as_ref()
    }) else {
        return Vec::new();
    };
    let policy = if let Some(h) = &hash.http_header_name {
        hash_policy::PolicySpecifier::Header(hash_policy::Header {
            header_name: h.clone(),
            ..Default::default()
        })
    } else if let Some(c) = &hash.http_cookie {
        hash_policy::PolicySpecifier::Cookie(hash_policy::Cookie {
            name: c.name.clone(),
            path: c.path.clone().unwrap_or_default(),
            ttl: c.ttl.map(|d| duration(d.get())),
            ..Default::default()
        })
    } else if hash.use_source_ip == Some(true) {
        hash_policy::PolicySpecifier::ConnectionProperties(hash_policy::ConnectionProperties {
            source_ip: true,
        })
    } else if let Some(q) = &hash.http_query_parameter_name {
        hash_policy::PolicySpecifier::QueryParameter(hash_policy::QueryParameter {
            name: q.clone(),
        })
    } else {
        return Vec::new();
    };
    vec![HashPolicy {
        policy_specifier: Some(policy),
        ..Default::default()
    }]
}

/// The route's `retries`, or istiod's default policy when it sets none.
fn retry_policy(http: &HttpRoute, options: &TrafficOptions) -> Option<RetryPolicy> {
    let (attempts, retry_on, per_try) = match &http.retries {
        Some(r) if r.attempts <= 0 => return None,
        Some(r) => (
            u32::try_from(r.attempts).unwrap_or(u32::MAX),
            r.retry_on
                .clone()
                .unwrap_or_else(|| DEFAULT_RETRY_ON.into()),
            r.per_try_timeout,
        ),
        None if options.default_retry_attempts == 0 => return None,
        None => (
            options.default_retry_attempts,
            DEFAULT_RETRY_ON.into(),
            None,
        ),
    };
    // Status codes in `retryOn` are retried through `retriable-status-codes`, as istiod does.
    let mut conditions: Vec<&str> = Vec::new();
    let mut codes: Vec<u32> = Vec::new();
    for part in retry_on.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<u32>() {
            Ok(code) => codes.push(code),
            Err(_) => conditions.push(part),
        }
    }
    if http.retries.is_none() {
        codes.push(DEFAULT_RETRIABLE_STATUS);
    }
    if !codes.is_empty() && !conditions.contains(&"retriable-status-codes") {
        conditions.push("retriable-status-codes");
    }
    Some(RetryPolicy {
        retry_on: conditions.join(","),
        num_retries: Some(UInt32Value { value: attempts }),
        per_try_timeout: per_try.map(|d| duration(d.get())),
        retriable_status_codes: codes,
        retry_host_predicate: vec![RetryHostPredicate {
            name: "envoy.retry_host_predicates.previous_hosts".to_string(),
            config_type: Some(
                envoy_types::pb::envoy::config::route::v3::retry_policy::retry_host_predicate::ConfigType::TypedConfig(
                    any(&PreviousHostsPredicate::default()),
                ),
            ),
        }],
        host_selection_retry_max_attempts: HOST_SELECTION_RETRY_MAX_ATTEMPTS,
        ..Default::default()
    })
}
