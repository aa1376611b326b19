//! Compiles the Envoy v3 protobuf definitions that `envoy-types` ships (its `proto/` folder) into
//! one file descriptor set, embedded by `src/envoy/json.rs` for the proto3 JSON mapping of Envoy
//! resources (config dumps, REST xDS). `protox` parses them, so building needs no `protoc`.
//!
//! The folder is found through `cargo metadata` (the exact `envoy-types` in Cargo.lock), or given
//! as `ENVOY_PROTO_DIR`.

#![allow(
    clippy::disallowed_methods,
    reason = "a build script's inputs are cargo's environment variables"
)]

use std::error::Error;
use std::path::PathBuf;
use std::process::Command;

/// The roots the descriptor set is built from; everything they import comes along.
const ROOTS: &[&str] = &[
    "envoy/service/discovery/v3/discovery.proto",
    "envoy/service/status/v3/csds.proto",
    "envoy/admin/v3/config_dump.proto",
    "envoy/config/cluster/v3/cluster.proto",
    "envoy/config/endpoint/v3/endpoint.proto",
    "envoy/config/listener/v3/listener.proto",
    "envoy/config/route/v3/route.proto",
    "envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager.proto",
    "envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy.proto",
    "envoy/extensions/filters/http/router/v3/router.proto",
    "envoy/extensions/filters/http/fault/v3/fault.proto",
    "envoy/extensions/filters/http/cors/v3/cors.proto",
    "envoy/extensions/upstreams/http/v3/http_protocol_options.proto",
    "envoy/extensions/transport_sockets/tls/v3/tls.proto",
    "envoy/extensions/load_balancing_policies/round_robin/v3/round_robin.proto",
    "envoy/extensions/load_balancing_policies/least_request/v3/least_request.proto",
    "envoy/extensions/load_balancing_policies/random/v3/random.proto",
    "envoy/extensions/load_balancing_policies/ring_hash/v3/ring_hash.proto",
    "envoy/extensions/load_balancing_policies/maglev/v3/maglev.proto",
];

/// Include folders inside the crate's `proto/`.
const INCLUDES: &[&str] = &[
    "data-plane-api",
    "xds",
    "protoc-gen-validate",
    "googleapis",
    "cel-spec/proto",
    "opentelemetry-proto",
    "client_model",
];

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=ENVOY_PROTO_DIR");
    let proto = envoy_proto_dir()?;
    let includes: Vec<PathBuf> = INCLUDES.iter().map(|i| proto.join(i)).collect();
    let fds = protox::compile(ROOTS, &includes)?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("envoy_descriptor.bin");
    std::fs::write(out, prost::Message::encode_to_vec(&fds))?;
    Ok(())
}

fn envoy_proto_dir() -> Result<PathBuf, Box<dyn Error>> {
    if let Some(dir) = std::env::var_os("ENVOY_PROTO_DIR") {
        return Ok(dir.into());
    }
    let cargo = std::env::var("CARGO")?;
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("Cargo.toml");
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--filter-platform"])
        .arg(std::env::var("TARGET")?)
        .arg("--manifest-path")
        .arg(&manifest)
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "cargo metadata failed (set ENVOY_PROTO_DIR to envoy-types' proto folder): {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let manifest_path = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "envoy-types")
        .and_then(|p| p["manifest_path"].as_str())
        .ok_or("envoy-types is not in `cargo metadata`; set ENVOY_PROTO_DIR")?;
    let dir = PathBuf::from(manifest_path)
        .parent()
        .ok_or("envoy-types' manifest has no folder")?
        .join("proto");
    println!("cargo:rerun-if-changed={}", dir.display());
    Ok(dir)
}
