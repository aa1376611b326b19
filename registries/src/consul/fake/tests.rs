//! The fake Consul itself: blocking, faults, the agent API.
