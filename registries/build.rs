//! Compiles the protobuf APIs with `protox`, so building needs no `protoc`: the project's own (the
//! mock registry's control service) and Istio's vendored MCP and networking protos
//! (`third_party/istio-api`, MCP-over-xDS).

#![allow(
    clippy::disallowed_methods,
    reason = "a build script's inputs are cargo's environment variables"
)]

use std::error::Error;

const PROTO_ROOT: &str = "../proto";
const MOCK_PROTO: &str = "../proto/tributary/mock/v1/mock.proto";
const ISTIO_ROOT: &str = "../third_party/istio-api";
/// The Istio files the types are generated from; what they import comes along.
const ISTIO_PROTOS: &[&str] = &[
    "mcp/v1alpha1/resource.proto",
    "networking/v1alpha3/service_entry.proto",
    "networking/v1alpha3/workload_entry.proto",
    "networking/v1alpha3/destination_rule.proto",
    "networking/v1alpha3/virtual_service.proto",
];

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO_ROOT}");
    println!("cargo:rerun-if-changed={ISTIO_ROOT}");
    let fds = protox::compile([MOCK_PROTO], [PROTO_ROOT])?;
    // The descriptor set, embedded for gRPC server reflection.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("mock_descriptor.bin");
    std::fs::write(out, prost::Message::encode_to_vec(&fds))?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;

    let istio = protox::compile(ISTIO_PROTOS, [ISTIO_ROOT])?;
    // Embedded for the JSON mapping of MCP bodies (`istio_api`).
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("istio_descriptor.bin");
    std::fs::write(out, prost::Message::encode_to_vec(&istio))?;
    // Maps as `BTreeMap`: encoded in key order, so the same object always encodes to the same
    // bytes, and content-derived versions agree across replicas (TRANS-12). A `HashMap` encodes in
    // its per-process random order.
    prost_build::Config::new()
        .btree_map(["."])
        .compile_fds(istio)?;
    Ok(())
}
