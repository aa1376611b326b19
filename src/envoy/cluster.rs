//! CDS: one `Cluster` per port of every service, named `outbound|<port>||<hostname>`.
//!
//! The cluster type follows the service's resolution: `Static` → EDS over ADS, `Dns` → STRICT_DNS
//! and `DnsRoundRobin` → LOGICAL_DNS with their endpoints inline (no EDS subscription, REG-17),
//! `Passthrough` → ORIGINAL_DST (a port's `target_port` becomes `upstream_port_override`, as istiod
//! does for a ServiceEntry with resolution NONE). HTTP/2 and gRPC ports speak HTTP/2 upstream.

use envoy_types::pb::envoy::config::cluster::v3::Cluster;
use envoy_types::pb::envoy::config::cluster::v3::cluster::{
    ClusterDiscoveryType, DiscoveryType, DnsLookupFamily, EdsClusterConfig, LbConfig, LbPolicy,
    OriginalDstLbConfig,
};
use envoy_types::pb::envoy::config::core::v3::Http2ProtocolOptions;
use envoy_types::pb::envoy::config::endpoint::v3::ClusterLoadAssignment;
use envoy_types::pb::envoy::extensions::upstreams::http::v3::HttpProtocolOptions;
use envoy_types::pb::envoy::extensions::upstreams::http::v3::http_protocol_options::{
    ExplicitHttpConfig, UpstreamProtocolOptions, explicit_http_config::ProtocolConfig,
};
use envoy_types::pb::google::protobuf::UInt32Value;
use tributary_registries::{Resolution, ServicePort};

use super::endpoint::{AddressKind, Target, drafts, group_by_locality, resolve_targets};
use super::naming::cluster_name;
use super::pb::{ads, any, duration};
use super::port_plan::distinct_ports;
use super::{ConfigIssue, EncodedResource, GenerateOptions, ResourceType};
use crate::aggregate::MergedService;

/// The key Envoy looks up upstream HTTP protocol options under.
const HTTP_PROTOCOL_OPTIONS_KEY: &str = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions";

/// The clusters of `svc`, one per distinct port number (a repeated number is reported and skipped,
/// since two clusters with one name are rejected: BUG-14).
pub fn clusters_for(
    svc: &MergedService,
    opts: &GenerateOptions,
    issues: &mut Vec<ConfigIssue>,
) -> Vec<EncodedResource> {
    cluster_protos(svc, opts, issues)
        .into_iter()
        .map(|(_, cluster)| EncodedResource::encode(ResourceType::Cluster, &cluster.name, &cluster))
        .collect()
}

/// What [`clusters_for`] encodes, before encoding, each with its port: traffic rules change these
/// (`crate::traffic`).
pub(crate) fn cluster_protos(
    svc: &MergedService,
    opts: &GenerateOptions,
    issues: &mut Vec<ConfigIssue>,
) -> Vec<(ServicePort, Cluster)> {
    let ports = distinct_ports(&svc.service, Some(issues));
    let targets = match svc.service.resolution {
        Resolution::Dns | Resolution::DnsRoundRobin => {
            resolve_targets(svc, AddressKind::DnsName, issues)
        }
        Resolution::Static | Resolution::Passthrough => Vec::new(),
    };
    ports
        .into_iter()
        .map(|port| (port.clone(), cluster(svc, port, &targets, opts, issues)))
        .collect()
}

fn cluster(
    svc: &MergedService,
    port: &ServicePort,
    targets: &[Option<Target>],
    opts: &GenerateOptions,
    issues: &mut Vec<ConfigIssue>,
) -> Cluster {
    let name = cluster_name(port.port, &svc.service.hostname);
    let mut c = Cluster {
        name: name.clone(),
        connect_timeout: Some(duration(opts.connect_timeout)),
        ..Default::default()
    };
    let ty = match svc.service.resolution {
        Resolution::Static => {
            c.eds_cluster_config = Some(EdsClusterConfig {
                eds_config: Some(ads()),
                service_name: name.clone(),
            });
            DiscoveryType::Eds
        }
        Resolution::Dns | Resolution::DnsRoundRobin => {
            dns_cluster(&mut c, svc, port, targets, opts, issues)
        }
        Resolution::Passthrough => {
            c.lb_policy = LbPolicy::ClusterProvided as i32;
            if let Some(target) = port.target_port.filter(|t| *t != port.port) {
                c.lb_config = Some(LbConfig::OriginalDstLbConfig(OriginalDstLbConfig {
                    upstream_port_override: Some(UInt32Value {
                        value: u32::from(target),
                    }),
                    ..Default::default()
                }));
            }
            DiscoveryType::OriginalDst
        }
    };
    c.cluster_discovery_type = Some(ClusterDiscoveryType::Type(ty as i32));
    if port.protocol.is_http2_upstream() {
        // The only entry of this map: prost encodes a HashMap in iteration order, which is stable
        // only with a single key. Keep it that way, or the bytes (and versions) stop being stable.
        c.typed_extension_protocol_options
            .insert(HTTP_PROTOCOL_OPTIONS_KEY.to_string(), any(&http2_options()));
    }
    c
}

/// Fills a DNS cluster's inline endpoints and returns its type.
///
/// LOGICAL_DNS takes exactly one host, so extra endpoints are reported and dropped (the first in
/// registry order is kept), and with no endpoint at all the cluster is sent as an empty STRICT_DNS
/// one: still a valid cluster that fails requests fast (`no healthy upstream`), where istiod drops
/// it (`pilot_dns_cluster_without_endpoints`) and leaves routes pointing at nothing. STRICT_DNS
/// itself is valid with no hosts.
fn dns_cluster(
    c: &mut Cluster,
    svc: &MergedService,
    port: &ServicePort,
    targets: &[Option<Target>],
    opts: &GenerateOptions,
    issues: &mut Vec<ConfigIssue>,
) -> DiscoveryType {
    let hostname = &svc.service.hostname;
    let mut eps = drafts(svc, targets, port, opts, issues);
    let mut ty = DiscoveryType::StrictDns;
    if svc.service.resolution == Resolution::DnsRoundRobin {
        if eps.len() > 1 {
            issues.push(ConfigIssue {
                object: hostname.to_string(),
                field: "endpoints".to_string(),
                message: format!(
                    "DNS_ROUND_ROBIN takes one endpoint but {} are usable on port {}; only the \
                     first is served",
                    eps.len(),
                    port.port
                ),
            });
            eps.truncate(1);
        }
        if eps.is_empty() {
            issues.push(ConfigIssue {
                object: hostname.to_string(),
                field: "endpoints".to_string(),
                message: format!(
                    "DNS_ROUND_ROBIN service has no usable endpoint on port {}; served as an empty \
                     cluster (as istiod's pilot_dns_cluster_without_endpoints)",
                    port.port
                ),
            });
        } else {
            ty = DiscoveryType::LogicalDns;
        }
    }
    c.dns_lookup_family = DnsLookupFamily::V4Preferred as i32;
    c.load_assignment = Some(ClusterLoadAssignment {
        cluster_name: c.name.clone(),
        endpoints: group_by_locality(eps, hostname, port, issues),
        ..Default::default()
    });
    ty
}

/// Upstream protocol options forcing HTTP/2 (h2c or h2 by transport), for HTTP2 and gRPC ports.
pub(super) fn http2_options() -> HttpProtocolOptions {
    HttpProtocolOptions {
        upstream_protocol_options: Some(UpstreamProtocolOptions::ExplicitHttpConfig(
            ExplicitHttpConfig {
                protocol_config: Some(ProtocolConfig::Http2ProtocolOptions(
                    Http2ProtocolOptions::default(),
                )),
            },
        )),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
