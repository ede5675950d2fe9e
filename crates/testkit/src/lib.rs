//! Test and demo support.

pub mod apiserver;
