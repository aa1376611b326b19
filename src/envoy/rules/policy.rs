//! A DestinationRule's traffic policy applied to one cluster.
//!
//! The policy that applies to a cluster is istiod's merge: the rule's policy, overridden field by
//! field by its `portLevelSettings` entry for the port, then (for a subset cluster) by the
//! subset's policy and the subset's entry for the port. Each field then maps onto the cluster as
//! istiod maps it (`pilot/pkg/networking/core/cluster_traffic_policy.go`).

use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, CommonLbConfig, DiscoveryType, LbConfig, LbPolicy, MaglevLbConfig,
    RingHashLbConfig,
    common_lb_config::{LocalityConfigSpecifier, LocalityWeightedLbConfig},
};
use envoy_types::pb::envoy::config::cluster::v3::{
    CircuitBreakers, Cluster, OutlierDetection as PbOutlier, UpstreamConnectionOptions,
    circuit_breakers::Thresholds,
};
use envoy_types::pb::envoy::config::core::v3::{
    DataSource, Http1ProtocolOptions, Http2ProtocolOptions,
    HttpProtocolOptions as CommonHttpOptions, TcpKeepalive as PbKeepalive, TransportSocket,
    UpstreamHttpProtocolOptions, data_source, transport_socket,
};
use envoy_types::pb::envoy::extensions::transport_sockets::tls::v3::{
    CertificateValidationContext, CommonTlsContext, SubjectAltNameMatcher, TlsCertificate,
    UpstreamTlsContext, common_tls_context::ValidationContextType,
    subject_alt_name_matcher::SanType,
};
use envoy_types::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
use envoy_types::pb::envoy::extensions::upstreams::http::v3::http_protocol_options::{
    ExplicitHttpConfig, UpstreamProtocolOptions, explicit_http_config::ProtocolConfig,
};
use envoy_types::pb::envoy::r#type::matcher::v3::{StringMatcher, string_matcher};
use envoy_types::pb::envoy::r#type::v3::Percent as PbPercent;
use envoy_types::pb::google::protobuf::{UInt32Value, UInt64Value};
use tributary_registries::rules::{
    ClientTlsSettings, ConnectionPoolSettings, H2UpgradePolicy, LoadBalancerSettings,
    OutlierDetection, SimpleLb, TlsMode, TrafficPolicy,
};
use tributary_registries::{Hostname, ServicePort};

use crate::envoy::pb::{any, duration};

/// The key Envoy looks up upstream HTTP protocol options under.
const HTTP_PROTOCOL_OPTIONS_KEY: &str = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";

/// The name of Envoy's TLS transport socket.
const TLS_TRANSPORT_SOCKET: &str = "envoy.transport_sockets.tls";

/// Istio enforces an outlier-detection condition at 100% once it is configured.
const ENFORCE_ALWAYS: u32 = 100;

/// The policy fields that apply to one cluster, after every override.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Effective<'a> {
    pub load_balancer: Option<&'a LoadBalancerSettings>,
    pub connection_pool: Option<&'a ConnectionPoolSettings>,
    pub outlier_detection: Option<&'a OutlierDetection>,
    pub tls: Option<&'a ClientTlsSettings>,
}

impl<'a> Effective<'a> {
    /// `policy` for `port`, over `base` (each field set in `policy` or its port entry wins).
    pub(crate) fn over(base: Effective<'a>, policy: Option<&'a TrafficPolicy>, port: u16) -> Self {
        let Some(policy) = policy else { return base };
        let mut out = Effective {
            load_balancer: policy.load_balancer.as_ref().or(base.load_balancer),
            connection_pool: policy.connection_pool.as_ref().or(base.connection_pool),
            outlier_detection: policy.outlier_detection.as_ref().or(base.outlier_detection),
            tls: policy.tls.as_ref().or(base.tls),
        };
        if let Some(p) = policy
            .port_level_settings
            .iter()
            .find(|p| p.port.is_some_and(|s| s.number == u32::from(port)))
        {
            out.load_balancer = p.load_balancer.as_ref().or(out.load_balancer);
            out.connection_pool = p.connection_pool.as_ref().or(out.connection_pool);
            out.outlier_detection = p.outlier_detection.as_ref().or(out.outlier_detection);
            out.tls = p.tls.as_ref().or(out.tls);
        }
        out
    }

    /// Applies these settings to `c`, a cluster of `host` on `port`.
    pub(crate) fn apply(&self, c: &mut Cluster, host: &Hostname, port: &ServicePort) {
        if let Some(lb) = self.load_balancer {
            load_balancer(c, lb);
        }
        let pool = self.connection_pool;
        if let Some(tcp) = pool.and_then(|p| p.tcp.as_ref()) {
            if let Some(d) = tcp.connect_timeout {
                c.connect_timeout = Some(duration(d.get()));
            }
            if let Some(k) = &tcp.tcp_keepalive {
                c.upstream_connection_options = Some(UpstreamConnectionOptions {
                    tcp_keepalive: Some(PbKeepalive {
                        keepalive_probes: k.probes.map(|value| UInt32Value { value }),
                        keepalive_time: k.time.map(|d| secs(d.get())),
                        keepalive_interval: k.interval.map(|d| secs(d.get())),
                    }),
                    ..Default::default()
                });
            }
        }
        circuit_breakers(c, pool);
        http_options(c, pool, port);
        if let Some(o) = self.outlier_detection {
            outlier(c, o);
        }
        if let Some(tls) = self.tls {
            client_tls(c, tls, host);
        }
    }
}

/// Whole seconds, at least 1, as Envoy's keepalive settings take them.
fn secs(d: std::time::Duration) -> UInt32Value {
    UInt32Value {
        value: u32::try_from(d.as_secs()).unwrap_or(u32::MAX).max(1),
    }
}

fn u32_value(v: i64) -> UInt32Value {
    UInt32Value {
        value: u32::try_from(v.max(0)).unwrap_or(u32::MAX),
    }
}

fn load_balancer(c: &mut Cluster, lb: &LoadBalancerSettings) {
    if let Some(simple) = lb.simple {
        c.lb_policy = match simple {
            SimpleLb::Unspecified | SimpleLb::RoundRobin => LbPolicy::RoundRobin,
            SimpleLb::LeastConn | SimpleLb::LeastRequest => LbPolicy::LeastRequest,
            SimpleLb::Random => LbPolicy::Random,
            SimpleLb::Passthrough => {
                // istiod: the caller's original destination, no endpoints from EDS.
                c.cluster_discovery_type = Some(ClusterDiscoveryType::Type(
                    DiscoveryType::OriginalDst as i32,
                ));
                c.eds_cluster_config = None;
                c.load_assignment = None;
                LbPolicy::ClusterProvided
            }
        } as i32;
    }
    if let Some(l) = &lb.locality_lb_setting
        && l.enabled != Some(false)
        && !l.distribute.is_empty()
    {
        // istiod: `distribute` weighs localities, which Envoy honours only with this set.
        c.common_lb_config = Some(CommonLbConfig {
            locality_config_specifier: Some(LocalityConfigSpecifier::LocalityWeightedLbConfig(
                LocalityWeightedLbConfig::default(),
            )),
            ..c.common_lb_config.take().unwrap_or_default()
        });
    }
    if let Some(hash) = &lb.consistent_hash {
        if let Some(maglev) = hash.maglev {
            c.lb_policy = LbPolicy::Maglev as i32;
            c.lb_config = Some(LbConfig::MaglevLbConfig(MaglevLbConfig {
                table_size: maglev.table_size.map(|value| UInt64Value { value }),
            }));
        } else {
            c.lb_policy = LbPolicy::RingHash as i32;
            let size = hash
                .ring_hash
                .and_then(|r| r.minimum_ring_size)
                .or(hash.minimum_ring_size);
            c.lb_config = Some(LbConfig::RingHashLbConfig(RingHashLbConfig {
                minimum_ring_size: size.map(|value| UInt64Value { value }),
                ..Default::default()
            }));
        }
    }
}

/// `connectionPool` limits → the default-priority thresholds (istiod sets only what is written,
/// Envoy's defaults stand for the rest).
fn circuit_breakers(c: &mut Cluster, pool: Option<&ConnectionPoolSettings>) {
    let Some(pool) = pool else { return };
    let tcp = pool.tcp.as_ref();
    let http = pool.http.as_ref();
    let t = Thresholds {
        max_connections: tcp.and_then(|t| t.max_connections).map(u32_value),
        max_pending_requests: http
            .and_then(|h| h.http1_max_pending_requests)
            .map(u32_value),
        max_requests: http.and_then(|h| h.http2_max_requests).map(u32_value),
        max_retries: http.and_then(|h| h.max_retries).map(u32_value),
        ..Default::default()
    };
    if t != Thresholds::default() {
        c.circuit_breakers = Some(CircuitBreakers {
            thresholds: vec![t],
            ..Default::default()
        });
    }
}

/// Idle timeout, requests per connection, connection duration and the HTTP/2 upgrade, in the
/// cluster's upstream HTTP protocol options (HTTP ports only).
fn http_options(c: &mut Cluster, pool: Option<&ConnectionPoolSettings>, port: &ServicePort) {
    if !port.protocol.is_http() {
        return;
    }
    let http = pool.and_then(|p| p.http.as_ref());
    let tcp = pool.and_then(|p| p.tcp.as_ref());
    let common = CommonHttpOptions {
        idle_timeout: http.and_then(|h| h.idle_timeout).map(|d| duration(d.get())),
        max_connection_duration: tcp
            .and_then(|t| t.max_connection_duration)
            .map(|d| duration(d.get())),
        max_requests_per_connection: http
            .and_then(|h| h.max_requests_per_connection)
            .filter(|n| *n > 0)
            .map(u32_value),
        ..Default::default()
    };
    let upgrade = http.and_then(|h| h.h2_upgrade_policy) == Some(H2UpgradePolicy::Upgrade);
    let streams = http.and_then(|h| h.max_concurrent_streams).map(u32_value);
    let h2 = port.protocol.is_http2_upstream() || upgrade;
    if common == CommonHttpOptions::default() && !upgrade && streams.is_none() {
        return;
    }
    let protocol_config = if h2 {
        ProtocolConfig::Http2ProtocolOptions(Http2ProtocolOptions {
            max_concurrent_streams: streams,
            ..Default::default()
        })
    } else {
        ProtocolConfig::HttpProtocolOptions(Http1ProtocolOptions::default())
    };
    let options = HttpProtocolOptions {
        common_http_protocol_options: (common != CommonHttpOptions::default()).then_some(common),
        upstream_protocol_options: Some(UpstreamProtocolOptions::ExplicitHttpConfig(
            ExplicitHttpConfig {
                protocol_config: Some(protocol_config),
            },
        )),
        upstream_http_protocol_options: None::<UpstreamHttpProtocolOptions>,
        ..Default::default()
    };
    // The only key of this map, so its encoding stays deterministic (see `cluster.rs`).
    c.typed_extension_protocol_options.clear();
    c.typed_extension_protocol_options
        .insert(HTTP_PROTOCOL_OPTIONS_KEY.to_string(), any(&options));
}

/// istiod's `applyOutlierDetection`.
fn outlier(c: &mut Cluster, o: &OutlierDetection) {
    let mut out = PbOutlier {
        interval: o.interval.map(|d| duration(d.get())),
        base_ejection_time: o.base_ejection_time.map(|d| duration(d.get())),
        max_ejection_percent: o.max_ejection_percent.map(u32_value),
        split_external_local_origin_errors: o.split_external_local_origin_errors == Some(true),
        ..Default::default()
    };
    if let Some(n) = o.consecutive_local_origin_failures {
        out.consecutive_local_origin_failure = Some(u32_value(n));
        out.enforcing_consecutive_local_origin_failure = Some(UInt32Value {
            value: if n > 0 { ENFORCE_ALWAYS } else { 0 },
        });
    }
    // The deprecated field counts gateway errors only (istio/api#617).
    if let Some(n) = o.consecutive_errors.filter(|n| *n > 0) {
        out.consecutive_gateway_failure = Some(u32_value(n));
        out.enforcing_consecutive_gateway_failure = Some(UInt32Value {
            value: ENFORCE_ALWAYS,
        });
        out.enforcing_consecutive_5xx = Some(UInt32Value { value: 0 });
    }
    if let Some(n) = o.consecutive_gateway_errors {
        out.consecutive_gateway_failure = Some(u32_value(n));
        out.enforcing_consecutive_gateway_failure = Some(UInt32Value {
            value: if n > 0 { ENFORCE_ALWAYS } else { 0 },
        });
    }
    if let Some(n) = o.consecutive_5xx_errors {
        out.consecutive_5xx = Some(u32_value(n));
        out.enforcing_consecutive_5xx = Some(UInt32Value {
            value: if n > 0 { ENFORCE_ALWAYS } else { 0 },
        });
    }
    if let Some(p) = o.min_health_percent {
        c.common_lb_config = Some(CommonLbConfig {
            healthy_panic_threshold: Some(PbPercent { value: p as f64 }),
            ..c.common_lb_config.take().unwrap_or_default()
        });
    }
    c.outlier_detection = Some(out);
}

/// `tls` → an upstream TLS transport socket (DISABLE: none). SNI is the rule's, else the
/// service's hostname.
fn client_tls(c: &mut Cluster, tls: &ClientTlsSettings, host: &Hostname) {
    let mode = tls.mode.unwrap_or(TlsMode::Disable);
    if matches!(mode, TlsMode::Disable | TlsMode::IstioMutual) {
        c.transport_socket = None;
        return;
    }
    let file = |path: &str| DataSource {
        specifier: Some(data_source::Specifier::Filename(path.to_string())),
        ..Default::default()
    };
    let mut common = CommonTlsContext::default();
    if mode == TlsMode::Mutual
        && let (Some(cert), Some(key)) = (&tls.client_certificate, &tls.private_key)
    {
        common.tls_certificates = vec![TlsCertificate {
            certificate_chain: Some(file(cert)),
            private_key: Some(file(key)),
            ..Default::default()
        }];
    }
    if let Some(ca) = tls.ca_certificates.as_deref().filter(|c| !c.is_empty()) {
        common.validation_context_type = Some(ValidationContextType::ValidationContext(
            CertificateValidationContext {
                trusted_ca: Some(file(ca)),
                match_typed_subject_alt_names: tls
                    .subject_alt_names
                    .iter()
                    .map(|san| SubjectAltNameMatcher {
                        san_type: SanType::Dns as i32,
                        r#matcher: Some(StringMatcher {
                            match_pattern: Some(string_matcher::MatchPattern::Exact(san.clone())),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            },
        ));
    }
    let context = UpstreamTlsContext {
        common_tls_context: Some(common),
        sni: tls
            .sni
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| host.to_string()),
        ..Default::default()
    };
    c.transport_socket = Some(TransportSocket {
        name: TLS_TRANSPORT_SOCKET.to_string(),
        config_type: Some(transport_socket::ConfigType::TypedConfig(any(&context))),
    });
}
