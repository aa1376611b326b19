//! tributary: a multi-registry aggregation gateway that serves Envoy over xDS.
//!
//! This crate owns everything that is not platform-specific, left to right:
//! registries (from `tributary-registries`) → [`aggregate`] (merge + debounce) → [`snapshot`]
//! (immutable, built incrementally, swapped with `arc-swap`) → `xds` (ADS server) → Envoy, with
//! `admin` (readiness, metrics, debug views) on the side, [`tls`] (mTLS for the xDS port) and
//! [`control_api`] (the mock registry's control API, on its own listener). [`envoy`] turns the model into Envoy
//! resources.
//!
//! It does not talk to any platform (that is `tributary-registries`) and holds no mutable state
//! outside the tasks that own it.

#![forbid(unsafe_code)]

pub mod admin;
pub mod agent;
pub mod aggregate;
pub mod bootstrap;
pub mod cli;
pub mod config;
pub mod control_api;
mod demo;
pub mod envoy;
pub mod mcp;
pub mod runtime;
pub mod snapshot;
pub mod tls;
pub mod xds;
