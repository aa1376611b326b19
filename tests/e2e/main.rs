//! Tier `e2e`: real processes on loopback. The built `tributary` binary (server and agent), the
//! real Envoy (`ENVOY_BIN`, else `envoy` on PATH), the proxyless gRPC clients (Python grpcio,
//! Node @grpc/grpc-js-xds). `scripts/test.sh` installs all of them; a missing one fails the test
//! with the command that installs it. `cargo test --test e2e envoy_delta::` runs one file.

#![allow(clippy::unwrap_used)]
// A test binary is its own edge: it reads where its tools are from the environment and waits on
// child processes from plain threads; its support items are `pub` for every tier, not an API.
#![allow(unreachable_pub, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod agent;
mod cli;
mod csds;
mod envoy_delta;
mod envoy_e2e;
mod envoy_tls;
mod envoy_validate;
mod envoy_vhds;
mod operability;
mod proxyless_delta;
mod proxyless_grpc;
mod reload;
mod rest_xds;
mod secrets;
mod supervision;
mod traffic_rules;
