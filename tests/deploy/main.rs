//! deploy/, checked with the tools of the ecosystem (rules DEPLOY-n in docs/deploy.md):
//!
//! - `chart`: the Helm chart rendered by real Helm (Helm's Go SDK through helm-sdkpy) with its
//!   defaults and with every option, `helm lint`, the structure of what it renders, and
//!   kubernetes-validate over the renders and deploy/kubernetes/*.yaml.
//! - `container`: the Containerfile passes hadolint, caches dependencies in their own layer, and
//!   `.dockerignore` keeps build outputs, VCS data and fuzz artifacts out of the context.
//! - `systemd`: every unit in deploy/systemd passes `systemd-analyze verify` and rates below 2.0 in
//!   `systemd-analyze security`; the example config parses.
//!
//! The tools come from scripts/deploy/install-tools.sh (scripts/test.sh runs it).
//! `TRIBUTARY_BLESS=1 cargo test --test deploy` rewrites deploy/kubernetes/tributary.yaml.

#![allow(clippy::unwrap_used)]
// A test binary is its own edge: it reads where its tools are from the environment and waits on
// child processes from plain threads; its support items are `pub` for every tier, not an API.
#![allow(unreachable_pub, clippy::disallowed_methods)]

mod chart;
mod container;
mod systemd;
mod tools;

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
