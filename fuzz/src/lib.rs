//! Fuzz target bodies (SEC-12): untrusted bytes through request decoding and the per-stream
//! handling that runs before any config is generated (node checks, subscriptions), and through the
//! registry input parsers. None may panic or allocate without bound.
//!
//! Shared by the cargo-fuzz binaries in `fuzz_targets/` and, on stable, by the top-level
//! `tests/xds/fuzz_replay.rs`, which includes this file.

use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use prost::Message;
use tributary::envoy::ResourceType;
use tributary::xds::{NodeInfo, Subscription};
use tributary_registries::consul::{self, ConsulConfig, Mapping};
use tributary_registries::mock::MockFile;
use tributary_registries::serviceentry::{self, ServiceEntryConfig};
use tributary_registries::{ClusterId, Origin, RegistryId};

/// A SotW request: decode, check the node, apply the subscription (twice, as a first request and
/// as a later one).
pub fn xds_sotw(data: &[u8]) {
    let Ok(req) = DiscoveryRequest::decode(data) else {
        return;
    };
    let _ = NodeInfo::from_first(req.node.as_ref());
    if let Some(ty) = ResourceType::from_type_url(&req.type_url) {
        let mut sub = Subscription::default();
        let _ = sub.apply_sotw(ty, &req.resource_names);
        let _ = sub.apply_sotw(ty, &req.resource_names);
        for name in &req.resource_names {
            let _ = sub.covers(name);
        }
    }
}

/// A delta request: decode, check the node, apply subscribe/unsubscribe as first and later request.
pub fn xds_delta(data: &[u8]) {
    let Ok(req) = DeltaDiscoveryRequest::decode(data) else {
        return;
    };
    let _ = NodeInfo::from_first(req.node.as_ref());
    if let Some(ty) = ResourceType::from_type_url(&req.type_url) {
        let mut sub = Subscription::default();
        let (s, u) = (
            &req.resource_names_subscribe,
            &req.resource_names_unsubscribe,
        );
        let _ = sub.apply_delta(ty, true, s, u);
        let _ = sub.apply_delta(ty, false, u, s);
    }
}

/// A mock registry file: parse, then validate and convert every service.
pub fn mock_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(file) = serde_yaml::from_str::<MockFile>(text) else {
        return;
    };
    let origin = Origin {
        registry: RegistryId::new("fuzz"),
        cluster: ClusterId::new("fuzz"),
    };
    for s in &file.services {
        let _ = s.to_state(&origin);
    }
}

/// tributary's own config file.
pub fn config_yaml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = tributary::config::Config::from_yaml(text);
    }
}

/// A ServiceEntry manifest file (multi-document YAML of ServiceEntry / WorkloadEntry objects):
/// split, parse, validate (REG-11) and convert, as the registry's directory source reads a file.
pub fn serviceentry_yaml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let config = ServiceEntryConfig::default();
    let _ = serviceentry::read_manifest(&config, std::path::Path::new("fuzz.yaml"), text);
}

/// A Consul answer, decoded and converted as the Consul registry does. The first byte picks the
/// endpoint: even is `/v1/catalog/services` (every name through the hostname template), odd is
/// `/v1/health/service/<name>` (converted once as a new service and once more with that result as
/// what was served before, the sticky-port path).
pub fn consul_json(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let config = ConsulConfig::default();
    if selector % 2 == 0 {
        if let Ok(list) = consul::parse_service_list(body) {
            for name in list.keys() {
                let _ = config.hostname(name);
            }
        }
        return;
    }
    let Ok(entries) = consul::parse_health(body) else {
        return;
    };
    let name = entries
        .first()
        .map_or("fuzz", |e| e.service.service.as_str());
    let Ok(hostname) = config.hostname(name).or_else(|_| config.hostname("fuzz")) else {
        return;
    };
    let mapping = Mapping::new(&config);
    let first = mapping.convert(&hostname, &entries, None);
    let _ = mapping.convert(&hostname, &entries, first.state.as_ref());
    let _ = mapping.convert(
        &hostname,
        &entries[entries.len() / 2..],
        first.state.as_ref(),
    );
}
