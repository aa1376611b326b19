//! Compiles the project's own protobuf APIs (today: the mock registry's control service) with
//! `protox`, so building needs no `protoc`.

#![allow(
    clippy::disallowed_methods,
    reason = "a build script's inputs are cargo's environment variables"
)]

use std::error::Error;

const PROTO_ROOT: &str = "../proto";
const MOCK_PROTO: &str = "../proto/tributary/mock/v1/mock.proto";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO_ROOT}");
    let fds = protox::compile([MOCK_PROTO], [PROTO_ROOT])?;
    // The descriptor set, embedded for gRPC server reflection.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("mock_descriptor.bin");
    std::fs::write(out, prost::Message::encode_to_vec(&fds))?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
