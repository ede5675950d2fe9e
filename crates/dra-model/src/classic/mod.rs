//! The classic kubelet device plugin path (`amd.com/nic`, `amd.com/vnic`),
//! as pure logic: which devices each extended resource offers, how they look
//! to the kubelet, which set of them to prefer, and what a container gets.
//!
//! The node agent serves the kubelet device plugin API `v1beta1` from the
//! same [`topology::Inventory`] as the DRA path. This module knows nothing of
//! sockets or gRPC; the binary turns its values into protobuf messages.
//!
//! - [`config`]: the YAML config (resource names, device selectors, the
//!   devices left to DRA), parsed and validated before anything acts on it.
//! - [`assign`](mod@assign): the split of one inventory between the classic resources and
//!   DRA; a device matched twice is an error naming it.
//! - [`device`]: the per-device view the kubelet sees (ID, health, NUMA node)
//!   plus the placement facts the scoring uses.
//! - [`preferred`]: `GetPreferredAllocation` scoring.
//! - [`allocate`]: what `Allocate` returns for one container (char devices,
//!   environment, CDI device names).

pub mod allocate;
pub mod assign;
pub mod config;
pub mod device;
pub mod preferred;
mod selector;

#[cfg(test)]
pub(crate) mod testing;

pub use allocate::{
    AllocateError, AllocateOptions, CDI_KIND, CDI_RDMA_CM_DEVICE, ContainerAllocation, DeviceNode,
    cdi_device_name, container_allocation, function_char_devices,
};
pub use assign::{Assignment, Overlap, OverlapError, ResourceDevices, assign, dra_share};
pub use config::{CharDeviceOptions, ClassicConfig, ConfigError, ResourceName, ResourceSpec};
pub use device::{ClassicDevice, DeviceRole, Health, PfFacts};
pub use preferred::{PreferenceError, SetCost, preferred_allocation};
pub use selector::DeviceSelector;
