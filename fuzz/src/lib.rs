//! Fuzz target bodies (SEC-12): untrusted bytes through request decoding and the per-stream
//! handling that runs before any config is generated (node checks, subscriptions), and through the
//! registry input parsers. None may panic or allocate without bound.
//!
//! Shared by the cargo-fuzz binaries in `fuzz_targets/` and, on stable, by the top-level
//! `tests/fuzz_replay.rs`, which includes this file.

use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use prost::Message;
use tributary::envoy::ResourceType;
use tributary::xds::{NodeInfo, Subscription};
use tributary_registries::mock::MockFile;
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
