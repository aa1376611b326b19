//! Istio's `ValidateVirtualService`: hosts, gateways, and every HTTP, TLS and TCP route.

use super::{
    Problems, validate_duration, validate_percent, validate_port, validate_regex,
    validate_string_match, validate_subset_name, validate_wildcard_domain,
};
use crate::rules::MESH_GATEWAY;
use crate::rules::common::StringMatch;
use crate::rules::virtual_service::{
    CorsPolicy, Destination, HeaderOperations, Headers, HttpFaultInjection, HttpMatchRequest,
    HttpRoute, RouteDestination, VirtualService,
};
use crate::serviceentry::checks::FieldPath;

/// Redirect codes Envoy can send.
const REDIRECT_CODES: [u32; 5] = [301, 302, 303, 307, 308];

/// Envoy's `x-envoy-retry-on` and `x-envoy-retry-grpc-on` conditions (istiod accepts these plus
/// status codes in `retryOn`).
const RETRY_ON: [&str; 16] = [
    "5xx",
    "gateway-error",
    "reset",
    "reset-before-request",
    "connect-failure",
    "envoy-ratelimited",
    "retriable-4xx",
    "refused-stream",
    "retriable-status-codes",
    "retriable-headers",
    "http3-post-connect-failure",
    "cancelled",
    "deadline-exceeded",
    "internal",
    "resource-exhausted",
    "unavailable",
];

/// HTTP methods a CORS policy may allow (Istio's list).
const CORS_METHODS: [&str; 9] = [
    "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
];

pub(super) fn validate(vs: &VirtualService, out: &mut Problems) {
    let at = FieldPath::spec();
    if vs.hosts.is_empty() {
        out.error(
            at.key("hosts"),
            "virtual service must have at least one host",
        );
    }
    for (i, host) in vs.hosts.iter().enumerate() {
        let at = at.key("hosts").index(i);
        if host == "*" {
            out.error(
                at,
                "wildcard host * is not allowed for virtual services bound to the mesh gateway",
            );
        } else {
            out.check(at, validate_wildcard_domain(host));
        }
    }
    gateways(&vs.gateways, &at.key("gateways"), out);
    if vs.http.is_empty() && vs.tcp.is_empty() && vs.tls.is_empty() {
        out.error(
            at.clone(),
            "http, tcp or tls must be provided in virtual service",
        );
    }
    for (i, route) in vs.http.iter().enumerate() {
        http_route(route, &at.key("http").index(i), out);
    }
    unreachable_http(&vs.http, &at, out);
    for (i, route) in vs.tls.iter().enumerate() {
        let at = at.key("tls").index(i);
        if route.match_.is_empty() {
            out.error(
                at.key("match"),
                "TLS route must have at least one match condition",
            );
        }
        for (j, m) in route.match_.iter().enumerate() {
            let at = at.key("match").index(j);
            if m.sni_hosts.is_empty() {
                out.error(
                    at.key("sniHosts"),
                    "TLS match must have at least one SNI host",
                );
            }
            for (k, sni) in m.sni_hosts.iter().enumerate() {
                let at = at.key("sniHosts").index(k);
                out.check(at.clone(), validate_wildcard_domain(sni));
                if !vs.hosts.iter().any(|h| sni_within(sni, h)) {
                    out.error(
                        at,
                        format!(
                            "the SNI host {sni:?} is not a compatible subset of any of the \
                             virtual service hosts: [{}]",
                            vs.hosts.join(", ")
                        ),
                    );
                }
            }
            if let Some(port) = m.port {
                out.check(at.key("port"), validate_port(port));
            }
            gateways(&m.gateways, &at.key("gateways"), out);
        }
        l4_destinations(&route.route, "TLS", &at.key("route"), out);
    }
    for (i, route) in vs.tcp.iter().enumerate() {
        let at = at.key("tcp").index(i);
        for (j, m) in route.match_.iter().enumerate() {
            let at = at.key("match").index(j);
            if let Some(port) = m.port {
                out.check(at.key("port"), validate_port(port));
            }
            gateways(&m.gateways, &at.key("gateways"), out);
        }
        l4_destinations(&route.route, "TCP", &at.key("route"), out);
    }
}

/// Only the mesh's sidecars are served: any other gateway is an error, not silently ignored.
fn gateways(gateways: &[String], at: &FieldPath, out: &mut Problems) {
    for (i, g) in gateways.iter().enumerate() {
        if g != MESH_GATEWAY {
            out.error(
                at.index(i),
                format!(
                    "gateway {g:?} is not supported by tributary: only sidecars (\"mesh\") are \
                     served"
                ),
            );
        }
    }
}

/// Whether SNI `sni` is a name `host` covers (equal, or within its wildcard).
fn sni_within(sni: &str, host: &str) -> bool {
    let covers = |pattern: &str, name: &str| match pattern.strip_prefix('*') {
        Some(suffix) => name.ends_with(suffix),
        None => pattern == name,
    };
    covers(host, sni) || (sni.starts_with('*') && covers(host, sni.trim_start_matches('*')))
}

fn http_route(route: &HttpRoute, at: &FieldPath, out: &mut Problems) {
    if route.delegate.is_some() {
        out.error(
            at.key("delegate"),
            "delegate VirtualServices are not supported by tributary",
        );
    }
    let has_route = !route.route.is_empty();
    if !has_route && route.redirect.is_none() && route.direct_response.is_none() {
        out.error(
            at.clone(),
            "HTTP route, redirect or direct response is required",
        );
    }
    if has_route && route.redirect.is_some() {
        out.error(
            at.clone(),
            "HTTP route cannot contain both route and redirect",
        );
    }
    if has_route && route.direct_response.is_some() {
        out.error(
            at.clone(),
            "HTTP route cannot contain both route and direct response",
        );
    }
    if route.redirect.is_some() && route.direct_response.is_some() {
        out.error(
            at.clone(),
            "HTTP route cannot contain both redirect and direct response",
        );
    }
    if route.rewrite.is_some() && route.redirect.is_some() {
        out.error(
            at.clone(),
            "HTTP route rule cannot contain both rewrite and redirect",
        );
    }
    if let Some(redirect) = &route.redirect {
        let at = at.key("redirect");
        if redirect.uri.is_none()
            && redirect.authority.is_none()
            && redirect.scheme.is_none()
            && redirect.port.is_none()
            && redirect.derive_port.is_none()
        {
            out.error(
                at.clone(),
                "redirect must specify URI, authority, scheme, or port",
            );
        }
        if let Some(code) = redirect.redirect_code
            && !REDIRECT_CODES.contains(&code)
        {
            out.error(
                at.key("redirectCode"),
                format!("{code} is not a valid redirect code, must be 301, 302, 303, 307, or 308"),
            );
        }
        if let Some(port) = redirect.port {
            out.check(at.key("port"), validate_port(port));
        }
        if let Some(derive) = &redirect.derive_port
            && !matches!(
                derive.as_str(),
                "FROM_PROTOCOL_DEFAULT" | "FROM_REQUEST_PORT"
            )
        {
            out.error(
                at.key("derivePort"),
                format!(
                    "unknown derivePort {derive}; use FROM_PROTOCOL_DEFAULT or FROM_REQUEST_PORT"
                ),
            );
        }
    }
    if let Some(direct) = &route.direct_response {
        let at = at.key("directResponse");
        if !(200..=599).contains(&direct.status) {
            out.error(
                at.key("status"),
                format!("status {} is not in range 200-599", direct.status),
            );
        }
        if let Some(body) = &direct.body
            && body.string.is_some() == body.bytes.is_some()
        {
            out.error(at.key("body"), "exactly one of string or bytes must be set");
        }
    }
    if let Some(rewrite) = &route.rewrite {
        let at = at.key("rewrite");
        if rewrite.uri.is_none()
            && rewrite.authority.is_none()
            && rewrite.uri_regex_rewrite.is_none()
        {
            out.error(
                at.clone(),
                "rewrite must specify at least one of URI, authority or uriRegexRewrite",
            );
        }
        if rewrite.uri.is_some() && rewrite.uri_regex_rewrite.is_some() {
            out.error(
                at.clone(),
                "rewrite may only contain one of URI or uriRegexRewrite",
            );
        }
        if let Some(re) = &rewrite.uri_regex_rewrite {
            out.check(
                at.key("uriRegexRewrite").key("match"),
                validate_regex(&re.match_),
            );
        }
    }
    for (i, m) in route.match_.iter().enumerate() {
        http_match(m, &at.key("match").index(i), out);
    }
    let mut total: i64 = 0;
    for (i, dest) in route.route.iter().enumerate() {
        let at = at.key("route").index(i);
        destination(&dest.destination, &at.key("destination"), out);
        let weight = dest.weight.unwrap_or(0);
        if weight < 0 {
            out.error(at.key("weight"), format!("weight {weight} < 0"));
        } else if weight > i64::from(i32::MAX) {
            out.error(at.key("weight"), format!("weight {weight} is too large"));
        } else {
            total += weight;
        }
        if let Some(headers) = &dest.headers {
            header_operations(headers, &at.key("headers"), out);
        }
    }
    if route.route.len() > 1 && total == 0 {
        out.error(at.key("route"), "total destination weight = 0");
    }
    if let Some(timeout) = route.timeout
        && !timeout.get().is_zero()
    {
        out.check(at.key("timeout"), validate_duration(timeout));
    }
    if let Some(retries) = &route.retries {
        let at = at.key("retries");
        if retries.attempts < 0 {
            out.error(at.key("attempts"), "attempts cannot be negative");
        }
        if retries.attempts == 0
            && (retries.per_try_timeout.is_some() || retries.retry_on.is_some())
        {
            out.warning(
                at.key("attempts"),
                "http retry policy configured when attempts are set to 0 (disabled)",
            );
        }
        if let Some(d) = retries.per_try_timeout {
            out.check(at.key("perTryTimeout"), validate_duration(d));
        }
        if let Some(on) = &retries.retry_on {
            for policy in on.split(',').map(str::trim) {
                let is_code = policy
                    .parse::<u32>()
                    .is_ok_and(|c| (100..=599).contains(&c));
                if !is_code && !RETRY_ON.contains(&policy) {
                    out.error(
                        at.key("retryOn"),
                        format!("{policy:?} is not a valid retryOn policy"),
                    );
                }
            }
        }
    }
    if let Some(fault) = &route.fault {
        fault_injection(fault, &at.key("fault"), out);
    }
    if route.mirror.is_some() && !route.mirrors.is_empty() {
        out.error(
            at.clone(),
            "HTTP route cannot contain both mirror and mirrors",
        );
    }
    if let Some(mirror) = &route.mirror {
        destination(mirror, &at.key("mirror"), out);
    }
    for (i, m) in route.mirrors.iter().enumerate() {
        let at = at.key("mirrors").index(i);
        destination(&m.destination, &at.key("destination"), out);
        if let Some(p) = m.percentage {
            out.check(at.key("percentage"), validate_percent(p));
        }
    }
    if let Some(p) = route.mirror_percentage {
        out.check(at.key("mirrorPercentage"), validate_percent(p));
    }
    if let Some(p) = route.mirror_percent
        && p > 100
    {
        out.error(
            at.key("mirrorPercent"),
            format!("mirror_percent must have a max value of 100 (it has {p})"),
        );
    }
    if let Some(cors) = &route.cors_policy {
        cors_policy(cors, &at.key("corsPolicy"), out);
    }
    if let Some(headers) = &route.headers {
        header_operations(headers, &at.key("headers"), out);
    }
}

fn http_match(m: &HttpMatchRequest, at: &FieldPath, out: &mut Problems) {
    for (value, name) in [
        (&m.uri, "uri"),
        (&m.scheme, "scheme"),
        (&m.method, "method"),
        (&m.authority, "authority"),
    ] {
        if let Some(v) = value {
            validate_string_match(v, false, &at.key(name), out);
        }
    }
    for (map, name) in [
        (&m.headers, "headers"),
        (&m.without_headers, "withoutHeaders"),
    ] {
        for (header, value) in map {
            let at = at.key(name).key(header);
            if header.is_empty() || !is_header_name(header) {
                out.error(at.clone(), format!("header name {header:?} is not valid"));
            } else if header.bytes().any(|b| b.is_ascii_uppercase()) {
                out.error(
                    at.clone(),
                    format!("header match {header} must be lowercase"),
                );
            }
            validate_string_match(value, true, &at, out);
        }
    }
    for (param, value) in &m.query_params {
        let at = at.key("queryParams").key(param);
        if value.prefix.is_some() {
            out.error(
                at.clone(),
                "only exact and regex matches are supported for query parameters",
            );
        }
        validate_string_match(value, true, &at, out);
    }
    if let Some(port) = m.port {
        out.check(at.key("port"), validate_port(port));
    }
    gateways(&m.gateways, &at.key("gateways"), out);
}

/// An RFC 7230 token, which header names are.
fn is_header_name(name: &str) -> bool {
    name.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn destination(d: &Destination, at: &FieldPath, out: &mut Problems) {
    if d.host.is_empty() {
        out.error(at.key("host"), "destination.host is required");
    } else if d.host.contains('*') {
        out.error(
            at.key("host"),
            format!(
                "invalid destination host {}: wildcards are not allowed",
                d.host
            ),
        );
    } else {
        out.check(at.key("host"), validate_wildcard_domain(&d.host));
    }
    if let Some(subset) = &d.subset {
        out.check(at.key("subset"), validate_subset_name(subset));
    }
    if let Some(port) = d.port {
        out.check(at.key("port").key("number"), validate_port(port.number));
    }
}

fn l4_destinations(routes: &[RouteDestination], kind: &str, at: &FieldPath, out: &mut Problems) {
    if routes.is_empty() {
        out.error(at.clone(), format!("{kind} route is required"));
    }
    let mut total: i64 = 0;
    for (i, r) in routes.iter().enumerate() {
        let at = at.index(i);
        destination(&r.destination, &at.key("destination"), out);
        let weight = r.weight.unwrap_or(0);
        if weight < 0 {
            out.error(at.key("weight"), format!("weight {weight} < 0"));
        } else {
            total = total.saturating_add(weight);
        }
    }
    if routes.len() > 1 && total == 0 {
        out.error(at.clone(), "total destination weight = 0");
    }
}

/// Istio's `validateHTTPFaultInjection`.
fn fault_injection(fault: &HttpFaultInjection, at: &FieldPath, out: &mut Problems) {
    if fault.abort.is_none() && fault.delay.is_none() {
        out.error(
            at.clone(),
            "HTTP fault injection must have an abort and/or a delay",
        );
    }
    if let Some(abort) = &fault.abort {
        let at = at.key("abort");
        if let Some(p) = abort.percentage {
            out.check(at.key("percentage"), validate_percent(p));
        }
        if abort.http2_error.is_some() {
            out.error(
                at.key("http2Error"),
                "HTTP/2 abort fault injection not supported yet",
            );
        }
        match (abort.http_status, &abort.grpc_status) {
            (Some(_), Some(_)) => out.error(
                at.clone(),
                "only one of httpStatus or grpcStatus may be set",
            ),
            (Some(status), None) => {
                if !(200..=599).contains(&status) {
                    out.error(
                        at.key("httpStatus"),
                        format!("HTTP status {status} is not in range 200-599"),
                    );
                }
            }
            (None, Some(grpc)) => {
                if grpc_status_code(grpc).is_none() {
                    out.error(
                        at.key("grpcStatus"),
                        format!("{grpc:?} is not a gRPC status name or number"),
                    );
                }
            }
            (None, None) if abort.http2_error.is_none() => {
                out.error(at.clone(), "abort needs httpStatus or grpcStatus")
            }
            (None, None) => {}
        }
    }
    if let Some(delay) = &fault.delay {
        let at = at.key("delay");
        if let Some(p) = delay.percentage {
            out.check(at.key("percentage"), validate_percent(p));
        }
        if let Some(p) = delay.percent
            && !(0..=100).contains(&p)
        {
            out.error(
                at.key("percent"),
                format!("percentage {p} is not in range 0..100"),
            );
        }
        match (delay.fixed_delay, delay.exponential_delay) {
            (_, Some(_)) => out.error(
                at.key("exponentialDelay"),
                "exponentialDelay not supported yet",
            ),
            (Some(d), None) => out.check(at.key("fixedDelay"), validate_duration(d)),
            (None, None) => out.error(at.key("fixedDelay"), "delay needs fixedDelay"),
        }
    }
}

/// The numeric gRPC status a name (`UNAVAILABLE`) or number (`14`) stands for; `None` for
/// anything else. Validation and the fault filter's translation both read it.
pub fn grpc_status_code(status: &str) -> Option<u32> {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    if let Ok(n) = status.parse::<u32>() {
        return (n < 17).then_some(n);
    }
    NAMES
        .iter()
        .position(|n| *n == status)
        .and_then(|i| u32::try_from(i).ok())
}

/// Istio's `validateCORSPolicy`.
fn cors_policy(cors: &CorsPolicy, at: &FieldPath, out: &mut Problems) {
    for (i, origin) in cors.allow_origins.iter().enumerate() {
        validate_string_match(origin, false, &at.key("allowOrigins").index(i), out);
    }
    for (i, method) in cors.allow_methods.iter().enumerate() {
        if !CORS_METHODS.contains(&method.as_str()) {
            out.error(
                at.key("allowMethods").index(i),
                format!("{method:?} is not a supported HTTP method"),
            );
        }
    }
    for (list, name) in [
        (&cors.allow_headers, "allowHeaders"),
        (&cors.expose_headers, "exposeHeaders"),
    ] {
        for (i, header) in list.iter().enumerate() {
            if header != "*" && (header.is_empty() || !is_header_name(header)) {
                out.error(
                    at.key(name).index(i),
                    format!("{header:?} is not a valid HTTP header name"),
                );
            }
        }
    }
    if let Some(age) = cors.max_age {
        let d = age.get();
        if d.subsec_nanos() != 0 {
            out.error(
                at.key("maxAge"),
                "max_age duration is accurate only to seconds precision",
            );
        }
    }
    if let Some(u) = &cors.unmatched_preflights
        && !matches!(u.as_str(), "FORWARD" | "IGNORE" | "UNSPECIFIED")
    {
        out.error(
            at.key("unmatchedPreflights"),
            format!("unknown unmatchedPreflights {u}; use FORWARD or IGNORE"),
        );
    }
}

/// Istio's `validateHTTPHeaderOperations` names: valid header names, and no pseudo-headers or
/// `Host` (use `rewrite.authority`).
fn header_operations(headers: &Headers, at: &FieldPath, out: &mut Problems) {
    for (ops, name) in [
        (&headers.request, "request"),
        (&headers.response, "response"),
    ] {
        let Some(HeaderOperations { set, add, remove }) = ops else {
            continue;
        };
        let at = at.key(name);
        let names = set
            .keys()
            .map(|k| (k, at.key("set").key(k)))
            .chain(add.keys().map(|k| (k, at.key("add").key(k))))
            .chain(
                remove
                    .iter()
                    .enumerate()
                    .map(|(i, k)| (k, at.key("remove").index(i))),
            );
        for (header, at) in names {
            let lower = header.to_ascii_lowercase();
            if header.is_empty() || !is_header_name(header) {
                out.error(at, format!("invalid header name {header:?}"));
            } else if lower == "host" || lower.starts_with(':') {
                out.error(
                    at,
                    format!("invalid header {header}: use rewrite.authority"),
                );
            }
        }
    }
}

/// Istio's unreachable-rule analysis: a rule after one that matches everything is never used.
fn unreachable_http(routes: &[HttpRoute], at: &FieldPath, out: &mut Problems) {
    let catch_all = |r: &HttpRoute| {
        r.match_.is_empty()
            || r.match_.iter().any(|m| {
                m == &HttpMatchRequest::default()
                    || m == &HttpMatchRequest {
                        uri: Some(StringMatch {
                            prefix: Some("/".into()),
                            ..StringMatch::default()
                        }),
                        ..HttpMatchRequest::default()
                    }
            })
    };
    if let Some(first) = routes.iter().position(catch_all) {
        for i in first + 1..routes.len() {
            out.warning(
                at.key("http").index(i),
                format!("rule {i} not used (only the last rule can have no matches)"),
            );
        }
    }
}
