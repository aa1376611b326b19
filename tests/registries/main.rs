//! Tier `registries`: each registry adapter end to end. The built `tributary` binary reads a fake
//! Kubernetes API server, a fake Consul (both from `tributary-registries`' `test-util`) or
//! ServiceEntry files, and a real Envoy routes through what it serves. Needs Envoy like the `e2e`
//! tier. `cargo test --test registries consul_e2e::` runs one file.

#![allow(clippy::unwrap_used)]
// A test binary is its own edge: it reads where its tools are from the environment and waits on
// child processes from plain threads; its support items are `pub` for every tier, not an API.
#![allow(unreachable_pub, clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod consul_e2e;
mod kube_e2e;
mod mcp_serve;
mod serviceentry_e2e;
