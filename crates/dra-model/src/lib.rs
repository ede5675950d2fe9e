//! The DRA device model of ainic-dra: what the driver publishes and how it
//! reads its configuration.
//!
//! Pure functions from an [`topology::Inventory`] (plus configuration) to
//! Kubernetes objects; no I/O beyond what the caller hands in.
#![deny(missing_docs)]

pub mod classic;

pub mod nic_config;
