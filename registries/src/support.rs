//! What several adapters share, written once: adapters use these modules, and these modules use
//! no adapter (an adapter never imports another's internals).
//!
//! - `backoff`: jittered exponential delays between retries of a failing watch, list or client;
//! - `file_watch`: a directory watched with notify, as a "may have changed" signal (the mock
//!   file, the ServiceEntry directory, the remote-cluster kubeconfig directory);
//! - `pending`: `select!` arms that wait forever when there is no receiver or no deadline;
//! - `rate_limit`: a client-side QPS/burst limit as a tower layer;
//! - `kube_client`: a kube `Client` for one cluster (kubeconfig or in-cluster), rate limited, with
//!   an observer of successful responses (Kubernetes and ServiceEntry CRD sources);
//! - `yaml_locate`: the line of a field in YAML text, for errors found after parsing (mock files,
//!   ServiceEntry manifests).

pub(crate) mod backoff;
pub(crate) mod file_watch;
pub(crate) mod kube_client;
pub(crate) mod pending;
pub(crate) mod rate_limit;
pub(crate) mod yaml_locate;
