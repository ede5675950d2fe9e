//! Test and demo support.

// A test harness: it may block (child processes, sleeps); clippy.toml's
// disallowed methods are for the shipped code.
#![allow(clippy::disallowed_methods)]

pub mod apiserver;
pub mod fake_kubelet_dp;
pub mod fixture;
pub mod kubelet;
pub mod netns;
pub mod nri_runtime;
pub mod testbed;
