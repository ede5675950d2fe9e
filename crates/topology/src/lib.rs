//! Reads a Linux sysfs tree into an [`Inventory`] of AMD AI NICs (AINIC) and
//! GPUs, with their PCIe position, NUMA node and GPU–NIC affinity.
//!
//! This crate is pure: it reads files below a root directory given by the
//! caller (`/sys` on a node, a generated tree in tests) and does nothing else.
//!
//! ```no_run
//! use std::path::Path;
//! use topology::{DiscoveryConfig, discover};
//!
//! let inventory = discover(Path::new("/sys"), &DiscoveryConfig::default())?;
//! for nic in &inventory.nics {
//!     let nearest = inventory.nearest_gpu(nic.address);
//!     println!("{} {:?} nearest GPU {nearest:?}", nic.address, nic.product_name);
//! }
//! for warning in &inventory.warnings {
//!     eprintln!("warning: {warning}");
//! }
//! # Ok::<(), topology::DiscoverError>(())
//! ```
//!
//! [`discover()`] reads through [`sysfs::Sysfs`], which never leaves the
//! root: files are opened with `openat2(RESOLVE_BENEATH)`, the kernel
//! refusing any step out of it, and every other path is resolved link by
//! link by hand, with the same checks; [`discover_in`] takes any
//! [`sysfs::Backend`], such as the in-memory [`sysfs::MemBackend`] of tests.
#![deny(missing_docs)]

pub mod affinity;
pub mod counters;
pub mod discover;
pub mod model;
pub mod pci;
pub mod sysfs;

pub use affinity::{Affinity, classify, nearest_switch};
pub use counters::{
    CounterBase, CounterName, CounterPlan, CounterReading, PlannedCounter, read_counters,
};
pub use discover::{
    DiscoverError, DiscoveryConfig, Recheck, discover, discover_in, product_name, recheck,
};
pub use model::{
    CharDevice, FunctionKind, Gpu, GpuNicLink, Inventory, Netdev, NicFunction, PcieLink,
    PcieLocation, RdmaDevice, RdmaPort,
};
pub use pci::{ParsePciAddressError, PciAddress, PciIds};
