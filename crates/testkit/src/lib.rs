//! Test and demo support.

pub mod apiserver;
pub mod fixture;
