//! The DRA device model of ainic-dra: what the driver publishes and how it
//! reads its configuration.
//!
//! Pure functions from an [`topology::Inventory`] (plus configuration) to
//! Kubernetes objects; no I/O beyond what the caller hands in.
//!
//! - [`ModelConfig`] (validated from [`ModelOptions`]) and [`FeatureGates`];
//! - [`build_slices`] → [`SliceSet`]: the node's ResourceSlices;
//! - [`validate::check_slice`] / [`validate::check_pool`]: the API rules;
//! - [`fabric`]: rail / fabric / leaf switch from config file, labels, LLDP;
//! - [`deviceclass`]: the DeviceClasses shipped with the driver;
//! - [`health`]: NIC health from hardware counter rates, with hysteresis.
#![deny(missing_docs)]

pub mod admission;
pub mod capacity;
pub mod cdi;
pub mod claim;
pub mod classic;
pub mod config;
mod device;
pub mod deviceclass;
pub mod dropped;
pub mod fabric;
pub mod gates;
pub mod health;
mod index;
pub mod names;
pub mod netdev;
pub mod nic_config;
pub mod partitions;
pub mod plan;
pub mod sample;
pub mod slices;
pub mod tenancy;
pub mod validate;

pub use config::{ConfigError, ModelConfig, ModelOptions, PfWithVfs};
pub use gates::{FeatureGate, FeatureGateError, FeatureGates, Release};
pub use k8s_release::UnsupportedRelease;
pub use slices::{InvalidSlices, SliceSet, build_slices, build_slices_checked};
