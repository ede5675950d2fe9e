//! Test and demo support.

pub mod apiserver;
pub mod fake_kubelet_dp;
pub mod fixture;
pub mod kubelet;
pub mod nri_runtime;
pub mod testbed;
