//! Reads a Linux sysfs tree into an [`Inventory`] of AMD AI NICs (AINIC) and
//! GPUs, with their PCIe position, NUMA node and GPU–NIC affinity.
//!
//! This crate is pure: it reads files below a root directory given by the
//! caller (`/sys` on a node, a generated tree in tests) and does nothing else.
#![deny(missing_docs)]

pub mod affinity;
pub mod discover;
pub mod model;
pub mod pci;
pub mod sysfs;

pub use affinity::{Affinity, classify, nearest_switch};
pub use discover::{DiscoverError, DiscoveryConfig, discover, discover_in, product_name};
pub use model::{
    CharDevice, FunctionKind, Gpu, GpuNicLink, Inventory, Netdev, NicFunction, PcieLink,
    PcieLocation, RdmaDevice, RdmaPort,
};
pub use pci::{ParsePciAddressError, PciAddress, PciIds};
