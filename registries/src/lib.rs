//! tributary's abstract service model and the platform adapters ("registries") that fill it.
//!
//! This crate owns:
//! - [`model`]: plain data for services and endpoints, with every field Envoy will need;
//! - the [`Registry`] trait: a registry runs as its own task and reports what it knows through a
//!   [`RegistrySink`] as batches of [`Change`]s keyed by hostname, plus a "synced" signal once its
//!   initial listing is complete, plus its health;
//! - the adapters themselves, one folder each: [`mock`], [`kubernetes`], [`consul`] and
//!   [`serviceentry`], each owning its config (serde, validation, environment) and a `build`;
//! - [`istio_api`]: Istio's MCP and networking protos (generated) and the bridge between an MCP
//!   body and the YAML-shaped types;
//! - [`RegistryConfig`]: one variant per adapter ([`AdapterConfig`]), what the config file's
//!   `registries:` list holds;
//! - `support` (private): what several adapters share (retry backoff, rate limits, the kube client,
//!   file watching, YAML line lookup), so that no adapter imports another's internals;
//! - `test_util` (tests and the `test-util` feature): the conformance test every adapter passes.
//!
//! It does **not** merge registries, debounce, build Envoy resources or speak xDS: that is the
//! `tributary` crate, which depends on this one and never the other way round. A new registry is one
//! folder here, plus one line in [`RegistryConfig`]'s list; `tributary` takes the whole list as it is
//! (`docs/architecture.md`, "Adding a registry").

#![forbid(unsafe_code)]

mod config;
pub mod config_source;
pub mod config_store;
pub mod consul;
pub mod duration;
pub mod istio_api;
pub mod kubernetes;
pub mod metrics;
pub mod mock;
pub mod model;
mod registry;
#[allow(
    missing_docs,
    reason = "serde mirrors of Istio's DestinationRule and VirtualService fields (Istio's API reference documents them); their own docs are still to write"
)]
pub mod rules;
pub mod serviceentry;
mod support;
#[cfg(any(test, feature = "test-util"))]
pub mod test_util;

pub use config::{
    AdapterConfig, BuiltRegistry, RegistryConfig, RegistryConfigError, RegistryFactory,
};
pub use model::{
    ClusterId, Endpoint, Health, Hostname, HostnameError, Locality, MeshLocation, Origin, Protocol,
    RegistryId, Resolution, Service, ServicePort, ServiceState,
};
pub use registry::{
    Change, Registry, RegistryError, RegistryEvent, RegistryMessage, RegistrySink, RegistryStatus,
    Rejection,
};
