//! Tests of the running Consul registry against the fake Consul.
