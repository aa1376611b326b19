//! PLACEHOLDER: the shared registry conformance harness lands here.
