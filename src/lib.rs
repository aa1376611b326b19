//! tributary: a multi-registry aggregation gateway that serves Envoy over xDS.
//!
//! This crate owns everything that is not platform-specific, left to right:
//! registries (from `tributary-registries`) → `aggregate` (merge + debounce) → `snapshot`
//! (immutable, built incrementally, swapped with `arc-swap`) → `xds` (ADS server) → Envoy, with
//! `admin` (readiness, metrics, debug views) on the side, `tls` (mTLS for the xDS port) and
//! `control_api` (the mock registry's control API, on its own listener). `envoy` turns the model
//! into Envoy resources.
//!
//! It does not talk to any platform (that is `tributary-registries`) and holds no mutable state
//! outside the tasks that own it.
//!
//! The API is the `pub use` block below: the command line ([`Cli`]), the config ([`Config`]),
//! running the control plane ([`run`], [`start`] → [`Running`]) and the Envoy bootstrap that points
//! at it ([`BootstrapOptions`], [`render_bootstrap`]). The modules are private. The `test-util`
//! feature, which tests/, benches/ and fuzz/ turn on, makes them public so that those reach
//! internals by their module paths (`tributary::xds::XdsServer`); nothing else should use it.

#![forbid(unsafe_code)]
// Without `test-util` the modules are private, so their `pub` items (public for the test builds)
// are unreachable, and what only tests call or import is unused: expected in that build. The
// `test-util` build (clippy's `--all-targets`) still reports every private item and plain import
// that nothing uses.
#![cfg_attr(
    not(feature = "test-util"),
    allow(unreachable_pub, dead_code, unused_imports)
)]

/// Declares each module public with `test-util` and private without it.
macro_rules! internal_modules {
    ($($name:ident),+ $(,)?) => {
        $(
            #[cfg(feature = "test-util")]
            pub mod $name;
            #[cfg(not(feature = "test-util"))]
            mod $name;
        )+
    };
}

internal_modules!(
    admin,
    agent,
    aggregate,
    bootstrap,
    cli,
    config,
    control_api,
    envoy,
    mcp,
    runtime,
    snapshot,
    tls,
    xds,
);
mod demo;

pub use bootstrap::{BootstrapOptions, BootstrapTls, render as render_bootstrap};
pub use cli::{Cli, Command};
pub use config::{Config, ConfigError, Overrides};
pub use runtime::{ConfigSource, Running, run, start, start_reloadable};
pub use xds::LISTENER_ADDRESS_KEY;
