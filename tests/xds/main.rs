//! Tier `xds`: the protocol in process. An xDS server (or the whole pipeline) on loopback inside
//! the test process, scripted gRPC clients, no external program: these run on any machine with a
//! Rust toolchain. `cargo test --test xds` runs them; `cargo test --test xds xds_delta::` one file.

#![allow(clippy::unwrap_used)]
// A test binary is its own edge: it reads where its tools are from the environment and waits on
// child processes from plain threads; its support items are `pub` for every tier, not an API.
#![allow(unreachable_pub, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod fuzz_replay;
mod hardening;
mod hybrid_ports;
mod lifecycle;
mod traffic_rules;
mod transport;
mod vhds;
mod xds_delta;
mod xds_limits;
mod xds_parity;
mod xds_sotw;
mod xds_tls;
