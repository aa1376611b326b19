//! Tests of the xDS config source.
