//! Test and demo support.
