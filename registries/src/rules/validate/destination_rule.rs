//! Istio's `ValidateDestinationRule`: host, subsets and every traffic policy.

use std::collections::BTreeSet;

use super::{
    Problems, validate_duration, validate_labels, validate_port, validate_subset_name,
    validate_wildcard_domain,
};
use crate::rules::destination_rule::{
    ClientTlsSettings, ConnectionPoolSettings, DestinationRule, H2UpgradePolicy,
    LoadBalancerSettings, LocalityLbSetting, OutlierDetection, TlsMode, TrafficPolicy,
};
use crate::serviceentry::checks::FieldPath;

/// The largest ring Envoy builds (`ring_hash.maximum_ring_size`'s limit, 8M entries).
const MAX_RING_SIZE: u64 = 8 * 1024 * 1024;

/// The largest maglev table Envoy accepts (a prime); also bounds the primality check.
const MAX_MAGLEV_TABLE: u64 = 5_000_011;

pub(super) fn validate(rule: &DestinationRule, out: &mut Problems) {
    let at = FieldPath::spec();
    out.check(at.key("host"), validate_wildcard_domain(&rule.host));
    if let Some(policy) = &rule.traffic_policy {
        traffic_policy(policy, &at.key("trafficPolicy"), out);
    }
    let mut names = BTreeSet::new();
    for (i, subset) in rule.subsets.iter().enumerate() {
        let at = at.key("subsets").index(i);
        if !names.insert(subset.name.as_str()) {
            out.error(
                at.key("name"),
                format!("duplicate subset names: {}", subset.name),
            );
        }
        out.check(at.key("name"), validate_subset_name(&subset.name));
        validate_labels(&subset.labels, &at.key("labels"), out);
        if let Some(policy) = &subset.traffic_policy {
            traffic_policy(policy, &at.key("trafficPolicy"), out);
        }
    }
    if let Some(selector) = &rule.workload_selector {
        validate_labels(
            &selector.match_labels,
            &at.key("workloadSelector").key("matchLabels"),
            out,
        );
    }
}

fn traffic_policy(policy: &TrafficPolicy, at: &FieldPath, out: &mut Problems) {
    if policy == &TrafficPolicy::default() {
        out.error(at.clone(), "traffic policy must have at least one field");
        return;
    }
    if let Some(lb) = &policy.load_balancer {
        load_balancer(
            lb,
            policy.outlier_detection.is_some(),
            &at.key("loadBalancer"),
            out,
        );
    }
    if let Some(pool) = &policy.connection_pool {
        connection_pool(pool, &at.key("connectionPool"), out);
    }
    if let Some(outlier) = &policy.outlier_detection {
        outlier_detection(outlier, &at.key("outlierDetection"), out);
    }
    if let Some(tls) = &policy.tls {
        client_tls(tls, &at.key("tls"), out);
    }
    let mut ports = BTreeSet::new();
    for (i, port) in policy.port_level_settings.iter().enumerate() {
        let at = at.key("portLevelSettings").index(i);
        let Some(selector) = port.port else {
            out.error(at.key("port"), "portTrafficPolicy must have valid port");
            continue;
        };
        out.check(at.key("port").key("number"), validate_port(selector.number));
        if !ports.insert(selector.number) {
            out.error(
                at.key("port").key("number"),
                format!(
                    "port number {} is listed twice in portLevelSettings",
                    selector.number
                ),
            );
        }
        if port.load_balancer.is_none()
            && port.connection_pool.is_none()
            && port.outlier_detection.is_none()
            && port.tls.is_none()
        {
            out.error(
                at.clone(),
                "port traffic policy must have at least one field",
            );
        }
        if let Some(lb) = &port.load_balancer {
            let has_outlier =
                port.outlier_detection.is_some() || policy.outlier_detection.is_some();
            load_balancer(lb, has_outlier, &at.key("loadBalancer"), out);
        }
        if let Some(pool) = &port.connection_pool {
            connection_pool(pool, &at.key("connectionPool"), out);
        }
        if let Some(outlier) = &port.outlier_detection {
            outlier_detection(outlier, &at.key("outlierDetection"), out);
        }
        if let Some(tls) = &port.tls {
            client_tls(tls, &at.key("tls"), out);
        }
    }
}

fn load_balancer(lb: &LoadBalancerSettings, has_outlier: bool, at: &FieldPath, out: &mut Problems) {
    if lb.simple.is_some() && lb.consistent_hash.is_some() {
        out.error(
            at.clone(),
            "only one of simple or consistentHash may be set",
        );
    }
    if let Some(hash) = &lb.consistent_hash {
        let at = at.key("consistentHash");
        let keys = [
            hash.http_header_name.is_some(),
            hash.http_cookie.is_some(),
            hash.use_source_ip.unwrap_or(false),
            hash.http_query_parameter_name.is_some(),
        ];
        if keys.iter().filter(|k| **k).count() > 1 {
            out.error(
                at.clone(),
                "only one of httpHeaderName, httpCookie, useSourceIp or httpQueryParameterName \
                 may be set",
            );
        }
        if keys.iter().all(|k| !k) {
            out.error(
                at.clone(),
                "consistentHash needs a hash key: httpHeaderName, httpCookie, useSourceIp or \
                 httpQueryParameterName",
            );
        }
        if let Some(name) = &hash.http_header_name
            && name.is_empty()
        {
            out.error(at.key("httpHeaderName"), "header name cannot be empty");
        }
        if let Some(name) = &hash.http_query_parameter_name
            && name.is_empty()
        {
            out.error(
                at.key("httpQueryParameterName"),
                "query parameter name cannot be empty",
            );
        }
        if let Some(cookie) = &hash.http_cookie {
            if cookie.name.is_empty() {
                out.error(
                    at.key("httpCookie").key("name"),
                    "name required for HttpCookie",
                );
            }
            if let Some(ttl) = cookie.ttl
                && !ttl.get().is_zero()
            {
                out.check(at.key("httpCookie").key("ttl"), validate_duration(ttl));
            }
        }
        if hash.ring_hash.is_some() && hash.maglev.is_some() {
            out.error(at.clone(), "only one of ringHash or maglev may be set");
        }
        let ring = hash
            .ring_hash
            .and_then(|r| r.minimum_ring_size)
            .or(hash.minimum_ring_size);
        if let Some(size) = ring
            && size > MAX_RING_SIZE
        {
            out.error(
                at.key("ringHash").key("minimumRingSize"),
                format!("minimum ring size {size} is larger than Envoy's limit {MAX_RING_SIZE}"),
            );
        }
        if let Some(size) = hash.maglev.and_then(|m| m.table_size)
            && size > MAX_MAGLEV_TABLE
        {
            out.error(
                at.key("maglev").key("tableSize"),
                format!("table size {size} is larger than Envoy's limit {MAX_MAGLEV_TABLE}"),
            );
        } else if let Some(size) = hash.maglev.and_then(|m| m.table_size)
            && !is_prime(size)
        {
            out.error(
                at.key("maglev").key("tableSize"),
                "table size must be a prime number",
            );
        }
    }
    if let Some(locality) = &lb.locality_lb_setting {
        locality_lb(locality, has_outlier, &at.key("localityLbSetting"), out);
    }
}

fn is_prime(n: u64) -> bool {
    n >= 2
        && (2..)
            .take_while(|d| d * d <= n)
            .all(|d| !n.is_multiple_of(d))
}

/// Istio's `validateLocalityLbSetting`.
fn locality_lb(lb: &LocalityLbSetting, has_outlier: bool, at: &FieldPath, out: &mut Problems) {
    if !lb.distribute.is_empty() && !lb.failover.is_empty() {
        out.error(
            at.clone(),
            "can not simultaneously specify 'distribute' and 'failover'",
        );
    }
    if !lb.distribute.is_empty() && !lb.failover_priority.is_empty() {
        out.error(
            at.clone(),
            "can not simultaneously specify 'distribute' and 'failoverPriority'",
        );
    }
    let mut sources = BTreeSet::new();
    for (i, d) in lb.distribute.iter().enumerate() {
        let at = at.key("distribute").index(i);
        out.check(at.key("from"), validate_locality(&d.from));
        if !sources.insert(d.from.as_str()) {
            out.error(
                at.key("from"),
                format!("locality {} overlap with previous specified ones", d.from),
            );
        }
        let mut total: u64 = 0;
        for (to, weight) in &d.to {
            out.check(at.key("to").key(to), validate_locality(to));
            if !(1..=100).contains(weight) {
                out.error(
                    at.key("to").key(to),
                    "locality weight must be in range [1, 100]",
                );
            }
            total += u64::from(*weight);
        }
        if total != 100 {
            out.error(
                at.key("to"),
                format!("total locality weight {total} != 100"),
            );
        }
    }
    for (i, f) in lb.failover.iter().enumerate() {
        let at = at.key("failover").index(i);
        if f.from == f.to {
            out.error(
                at.clone(),
                "locality lb failover settings must specify different regions",
            );
        }
        if f.from.contains('/') || f.to.contains('/') {
            out.error(at.clone(), "locality lb failover only specify region");
        }
        if f.from.contains('*') || f.to.contains('*') {
            out.error(
                at.clone(),
                "locality lb failover region should not contain '*' wildcard",
            );
        }
    }
    for (i, key) in lb.failover_priority.iter().enumerate() {
        let at = at.key("failoverPriority").index(i);
        let label = key.split_once('=').map_or(key.as_str(), |(k, _)| k);
        if label.is_empty() {
            out.error(at, "failoverPriority entries must be label keys");
        }
    }
    let fails_over = !lb.failover.is_empty() || !lb.failover_priority.is_empty();
    if fails_over && !has_outlier {
        out.warning(
            at.clone(),
            "outlier detection policy must be provided for failover",
        );
    }
}

/// `region/zone/subzone`, where `*` may only be the last part written.
fn validate_locality(locality: &str) -> Result<(), String> {
    if locality.is_empty() {
        return Err("empty locality".into());
    }
    let parts: Vec<&str> = locality.split('/').collect();
    if parts.len() > 3 {
        return Err(format!(
            "locality {locality} has more than region/zone/subzone"
        ));
    }
    for (i, part) in parts.iter().enumerate() {
        if part.is_empty() {
            return Err(format!("locality {locality} has an empty part"));
        }
        if part.contains('*') && (*part != "*" || i != parts.len() - 1) {
            return Err(format!(
                "locality {locality} wildcard '*' must be a whole part and the last one"
            ));
        }
    }
    Ok(())
}

/// Istio's `validateConnectionPool`.
fn connection_pool(pool: &ConnectionPoolSettings, at: &FieldPath, out: &mut Problems) {
    if pool.tcp.is_none() && pool.http.is_none() {
        out.error(at.clone(), "must have at least one field");
    }
    if let Some(http) = &pool.http {
        let at = at.key("http");
        let non_negative = [
            (http.http1_max_pending_requests, "http1MaxPendingRequests"),
            (http.http2_max_requests, "http2MaxRequests"),
            (http.max_requests_per_connection, "maxRequestsPerConnection"),
            (http.max_retries, "maxRetries"),
            (http.max_concurrent_streams, "maxConcurrentStreams"),
        ];
        for (value, name) in non_negative {
            if let Some(v) = value {
                out.check(at.key(name), int32_non_negative(v, name));
            }
        }
        if let Some(d) = http.idle_timeout {
            out.check(at.key("idleTimeout"), validate_duration(d));
        }
        if http.h2_upgrade_policy == Some(H2UpgradePolicy::Upgrade)
            && http.use_client_protocol == Some(true)
        {
            out.error(
                at.key("useClientProtocol"),
                "use client protocol must not be true when H2UpgradePolicy is UPGRADE",
            );
        }
    }
    if let Some(tcp) = &pool.tcp {
        let at = at.key("tcp");
        if let Some(v) = tcp.max_connections {
            out.check(
                at.key("maxConnections"),
                int32_non_negative(v, "max connections"),
            );
        }
        for (d, name) in [
            (tcp.connect_timeout, "connectTimeout"),
            (tcp.max_connection_duration, "maxConnectionDuration"),
            (tcp.idle_timeout, "idleTimeout"),
        ] {
            if let Some(d) = d {
                out.check(at.key(name), validate_duration(d));
            }
        }
        if let Some(k) = &tcp.tcp_keepalive {
            for (d, name) in [(k.time, "time"), (k.interval, "interval")] {
                if let Some(d) = d {
                    out.check(at.key("tcpKeepalive").key(name), validate_duration(d));
                }
            }
        }
    }
}

fn int32_non_negative(v: i64, name: &str) -> Result<(), String> {
    if v < 0 {
        return Err(format!("{name} must be non-negative"));
    }
    if v > i64::from(i32::MAX) {
        return Err(format!("{name} {v} is larger than {}", i32::MAX));
    }
    Ok(())
}

/// Istio's `validateOutlierDetection`.
fn outlier_detection(o: &OutlierDetection, at: &FieldPath, out: &mut Problems) {
    if let Some(v) = o.consecutive_errors {
        out.warning(
            at.key("consecutiveErrors"),
            "outlier detection consecutive errors is deprecated, use consecutiveGatewayErrors or \
             consecutive5xxErrors instead",
        );
        if v < 0 {
            out.error(
                at.key("consecutiveErrors"),
                "outlier detection consecutive errors cannot be negative",
            );
        }
    }
    for (v, name) in [
        (o.consecutive_gateway_errors, "consecutiveGatewayErrors"),
        (o.consecutive_5xx_errors, "consecutive5xxErrors"),
        (
            o.consecutive_local_origin_failures,
            "consecutiveLocalOriginFailures",
        ),
    ] {
        if let Some(v) = v {
            out.check(at.key(name), int32_non_negative(v, name));
        }
    }
    if o.consecutive_local_origin_failures.is_some()
        && o.split_external_local_origin_errors != Some(true)
    {
        out.error(
            at.key("consecutiveLocalOriginFailures"),
            "consecutive local origin errors is set but split local origin errors is not set",
        );
    }
    for (d, name) in [
        (o.interval, "interval"),
        (o.base_ejection_time, "baseEjectionTime"),
    ] {
        if let Some(d) = d {
            out.check(at.key(name), validate_duration(d));
        }
    }
    if let Some(p) = o.max_ejection_percent
        && !(0..=100).contains(&p)
    {
        out.error(
            at.key("maxEjectionPercent"),
            "max ejection percent must be in range [0, 100]",
        );
    }
    if let Some(p) = o.min_health_percent
        && !(0..=100).contains(&p)
    {
        out.error(
            at.key("minHealthPercent"),
            "min health percent must be in range [0, 100]",
        );
    }
}

/// Istio's `validateTLS`, plus what tributary does not support.
fn client_tls(tls: &ClientTlsSettings, at: &FieldPath, out: &mut Problems) {
    let mode = tls.mode.unwrap_or(TlsMode::Disable);
    match mode {
        TlsMode::IstioMutual => out.error(
            at.key("mode"),
            "ISTIO_MUTUAL is not supported by tributary (it has no mesh CA); use MUTUAL with \
             certificate files",
        ),
        TlsMode::Mutual if tls.credential_name.is_none() => {
            if tls.client_certificate.as_deref().unwrap_or("").is_empty() {
                out.error(
                    at.key("clientCertificate"),
                    "client certificate required for mutual tls",
                );
            }
            if tls.private_key.as_deref().unwrap_or("").is_empty() {
                out.error(at.key("privateKey"), "private key required for mutual tls");
            }
        }
        _ => {}
    }
    if tls.credential_name.is_some() {
        out.error(
            at.key("credentialName"),
            "credentialName (secrets from Kubernetes) is not supported by tributary; give \
             clientCertificate, privateKey and caCertificates as files",
        );
    }
    if mode == TlsMode::Disable
        && (tls.client_certificate.is_some() || tls.private_key.is_some() || tls.sni.is_some())
    {
        out.warning(
            at.key("mode"),
            "tls settings are ignored when mode is DISABLE",
        );
    }
    for (path, name) in [
        (&tls.client_certificate, "clientCertificate"),
        (&tls.private_key, "privateKey"),
        (&tls.ca_certificates, "caCertificates"),
    ] {
        if let Some(p) = path
            && !p.is_empty()
            && !p.starts_with('/')
        {
            out.error(
                at.key(name),
                format!("{p} is not an absolute path to a file"),
            );
        }
    }
    if tls.insecure_skip_verify == Some(true) {
        out.warning(
            at.key("insecureSkipVerify"),
            "insecureSkipVerify is not applied: the server is verified whenever caCertificates \
             is set",
        );
    }
}
