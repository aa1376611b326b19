//! The cargo-fuzz targets (`fuzz/`, SEC-12) on stable: every seed in `fuzz/corpus/<target>/`
//! (plus any crash files cargo-fuzz left there), built-in seeds, and random and mutated inputs
//! through the same target bodies. Fuzzing proper (coverage-guided, on stable):
//! `scripts/fuzz.sh`, which `scripts/test.sh` runs after the tests.

#![allow(clippy::unwrap_used)]

#[path = "../../fuzz/src/lib.rs"]
mod targets;

use std::path::PathBuf;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::{DeltaDiscoveryRequest, DiscoveryRequest};
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use proptest::prelude::*;
use prost::Message;

use crate::support::type_url::CDS;

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .collect()
}

/// Requests with a node whose metadata nests deeply, huge names, odd type URLs (SEC-12).
fn xds_seeds() -> Vec<Vec<u8>> {
    let mut deep = Value {
        kind: Some(Kind::StringValue("leaf".into())),
    };
    for _ in 0..64 {
        let mut s = Struct::default();
        s.fields.insert("k".into(), deep);
        deep = Value {
            kind: Some(Kind::StructValue(s)),
        };
    }
    let mut meta = Struct::default();
    meta.fields.insert("LISTENER_ADDRESS".into(), deep);
    let node = Node {
        id: "n".into(),
        metadata: Some(meta),
        ..Default::default()
    };
    let sotw = DiscoveryRequest {
        node: Some(node.clone()),
        type_url: CDS.into(),
        resource_names: vec!["*".into(), "a".repeat(70_000), "\u{0}".into()],
        ..Default::default()
    };
    let delta = DeltaDiscoveryRequest {
        node: Some(node),
        type_url: CDS.into(),
        resource_names_subscribe: vec!["*".into(), "x".into()],
        resource_names_unsubscribe: vec!["*".into()],
        ..Default::default()
    };
    vec![sotw.encode_to_vec(), delta.encode_to_vec()]
}

fn replay(target: fn(&[u8]), seeds: &[Vec<u8>]) {
    for s in seeds {
        target(s);
        // Truncations and single-byte flips of every seed.
        for cut in (0..s.len()).step_by((s.len() / 64).max(1)) {
            target(&s[..cut]);
            let mut flipped = s.clone();
            flipped[cut] ^= 0xff;
            target(&flipped);
        }
    }
}

#[test]
fn xds_targets_survive_seeds_and_mutations() {
    // SEC-12
    let mut seeds = xds_seeds();
    seeds.extend(corpus("xds_sotw"));
    seeds.extend(corpus("xds_delta"));
    replay(targets::xds_sotw, &seeds);
    replay(targets::xds_delta, &seeds);
}

#[test]
fn parser_targets_survive_seeds_and_mutations() {
    // SEC-12
    let mock = corpus("mock_file");
    assert!(!mock.is_empty(), "fuzz/corpus/mock_file has seeds");
    replay(targets::mock_file, &mock);
    let config = corpus("config_yaml");
    assert!(!config.is_empty(), "fuzz/corpus/config_yaml has seeds");
    replay(targets::config_yaml, &config);
    let service_entries = corpus("serviceentry_yaml");
    assert!(
        !service_entries.is_empty(),
        "fuzz/corpus/serviceentry_yaml has seeds"
    );
    replay(targets::serviceentry_yaml, &service_entries);
    let consul = corpus("consul_json");
    assert!(!consul.is_empty(), "fuzz/corpus/consul_json has seeds");
    replay(targets::consul_json, &consul);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        // SEC-12
        targets::xds_sotw(&data);
        targets::xds_delta(&data);
        targets::mock_file(&data);
        targets::config_yaml(&data);
        targets::serviceentry_yaml(&data);
        targets::consul_json(&data);
    }
}
