//! Kubernetes registry tests against the fake API server.
