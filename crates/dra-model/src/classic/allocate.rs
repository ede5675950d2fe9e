//! What `Allocate` gives one container: RDMA char devices (or the CDI
//! devices that carry them), and the environment.
//!
//! Environment:
//! - `PCIDEVICE_<RESOURCE>` (e.g. `PCIDEVICE_AMD_COM_NIC`): the allocated
//!   PCI addresses, comma-separated, as the SR-IOV device plugin sets it.
//! - the same variables the DRA path puts in its CDI specs, so a workload
//!   reads one set of names under either path: `NCCL_IB_HCA` (RDMA devices
//!   in NCCL/RCCL exact-match form, `=rocep12s0,rocep13s0`, so collectives
//!   use exactly these NICs), `AINIC_RDMA_DEVICES`, `AINIC_NETDEVS`,
//!   `AINIC_PCI_ADDRESSES` and `AINIC_DEVICES` (the DRA device names,
//!   `pf-0000-0c-00-0`), all comma-separated in address order.
//!
//! Char devices per function: `uverbsN`, plus `umadN` / `issmN` when the
//! config asks; and `/dev/infiniband/rdma_cm` once per container. With CDI
//! enabled the container gets CDI device names instead: one per function
//! (`amd.com/ainic=classic-pf-0000-0c-00-0`) and one for `rdma_cm`
//! (`amd.com/ainic=classic-rdma-cm`); the node agent writes the spec that
//! defines them from [`function_char_devices`].

use std::collections::BTreeMap;

use topology::{CharDevice, Inventory, NicFunction, PciAddress};

use super::assign::ResourceDevices;
use super::config::CharDeviceOptions;
use crate::names::device_name;

/// CDI kind shared with the DRA path.
pub const CDI_KIND: &str = "amd.com/ainic";
/// CDI device name of `/dev/infiniband/rdma_cm` in the classic spec.
pub const CDI_RDMA_CM_DEVICE: &str = "classic-rdma-cm";

/// How `Allocate` answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocateOptions {
    /// Optional char devices.
    pub char_devices: CharDeviceOptions,
    /// Answer with CDI device names instead of device specs.
    pub cdi_enabled: bool,
}

/// A device node for the container runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceNode {
    /// Path in the container.
    pub container_path: String,
    /// Path on the host.
    pub host_path: String,
    /// cgroup permissions, `rw`.
    pub permissions: String,
}

/// The answer for one container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerAllocation {
    /// Environment variables.
    pub envs: BTreeMap<String, String>,
    /// Device nodes (empty with CDI).
    pub device_nodes: Vec<DeviceNode>,
    /// Fully qualified CDI device names (only with CDI).
    pub cdi_devices: Vec<String>,
}

/// Why a container's devices cannot be allocated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    /// The ID is not a device of this resource.
    #[error("device {id:?} is not offered as {resource}")]
    NotOffered {
        /// The ID as the kubelet sent it.
        id: String,
        /// The resource asked for.
        resource: String,
    },
}

/// The CDI device name of `nic` in the classic spec: `classic-` and the
/// DRA device name, so it can never collide with a claim's device.
pub fn cdi_device_name(nic: &NicFunction) -> String {
    format!("classic-{}", device_name(nic))
}

/// The char devices that give a container the RDMA devices of `nic`.
pub fn function_char_devices(nic: &NicFunction, options: CharDeviceOptions) -> Vec<CharDevice> {
    let mut out = Vec::new();
    for rdma in &nic.rdma {
        out.extend(rdma.uverbs.iter().cloned());
        if options.umad {
            out.extend(rdma.umad.iter().cloned());
        }
        if options.issm {
            out.extend(rdma.issm.iter().cloned());
        }
    }
    out
}

/// The answer for a container given `ids` of `resource`.
pub fn container_allocation(
    inventory: &Inventory,
    resource: &ResourceDevices,
    ids: &[String],
    options: AllocateOptions,
) -> Result<ContainerAllocation, AllocateError> {
    let mut nics: Vec<&NicFunction> = Vec::with_capacity(ids.len());
    for id in ids {
        let not_offered = || AllocateError::NotOffered {
            id: id.clone(),
            resource: resource.name.to_string(),
        };
        let address: PciAddress = id.parse().map_err(|_| not_offered())?;
        if !resource.devices.iter().any(|d| d.address == address) {
            return Err(not_offered());
        }
        nics.push(inventory.nic(address).ok_or_else(not_offered)?);
    }
    nics.sort_by_key(|n| n.address);
    nics.dedup_by_key(|n| n.address);
    let mut out = ContainerAllocation {
        envs: environment(resource, &nics),
        ..ContainerAllocation::default()
    };
    if options.cdi_enabled {
        if inventory.rdma_cm.is_some() {
            out.cdi_devices
                .push(format!("{CDI_KIND}={CDI_RDMA_CM_DEVICE}"));
        }
        out.cdi_devices.extend(
            nics.iter()
                .map(|n| format!("{CDI_KIND}={}", cdi_device_name(n))),
        );
    } else {
        let chars = inventory.rdma_cm.iter().cloned().chain(
            nics.iter()
                .flat_map(|n| function_char_devices(n, options.char_devices)),
        );
        out.device_nodes = chars
            .map(|c| DeviceNode {
                container_path: c.path.clone(),
                host_path: c.path,
                permissions: "rw".into(),
            })
            .collect();
    }
    Ok(out)
}

fn environment(resource: &ResourceDevices, nics: &[&NicFunction]) -> BTreeMap<String, String> {
    let list = |items: Vec<String>| items.join(",");
    let addresses = list(nics.iter().map(|n| n.address.to_string()).collect());
    let rdma = list(
        nics.iter()
            .flat_map(|n| n.rdma.iter().map(|r| r.name.clone()))
            .collect(),
    );
    let netdevs = list(
        nics.iter()
            .flat_map(|n| n.netdevs.iter().map(|d| d.name.clone()))
            .collect(),
    );
    let names = list(nics.iter().map(|n| device_name(n)).collect());
    BTreeMap::from([
        (resource.name.pci_env_name(), addresses.clone()),
        ("NCCL_IB_HCA".to_string(), format!("={rdma}")),
        ("AINIC_RDMA_DEVICES".to_string(), rdma),
        ("AINIC_NETDEVS".to_string(), netdevs),
        ("AINIC_PCI_ADDRESSES".to_string(), addresses),
        ("AINIC_DEVICES".to_string(), names),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classic::assign::assign;
    use crate::classic::config::ClassicConfig;
    use crate::classic::testing::two_socket_node;

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn raw_device_specs_and_env() {
        let inv = two_socket_node();
        let a = assign(&ClassicConfig::default(), &inv);
        let nic = a.resource("amd.com/nic").unwrap();
        let got = container_allocation(
            &inv,
            nic,
            &ids(&["0000:2c:00.0", "0000:0c:00.0"]),
            AllocateOptions::default(),
        )
        .unwrap();
        assert_eq!(
            got.envs["PCIDEVICE_AMD_COM_NIC"],
            "0000:0c:00.0,0000:2c:00.0"
        );
        assert_eq!(got.envs["AINIC_RDMA_DEVICES"], "ionic_96,ionic_352");
        assert_eq!(got.envs["NCCL_IB_HCA"], "=ionic_96,ionic_352");
        assert_eq!(got.envs["AINIC_NETDEVS"], "eth0cf0,eth2cf0");
        assert_eq!(got.envs["AINIC_PCI_ADDRESSES"], "0000:0c:00.0,0000:2c:00.0");
        assert_eq!(got.envs["AINIC_DEVICES"], "pf-0000-0c-00-0,pf-0000-2c-00-0");
        let paths: Vec<&str> = got
            .device_nodes
            .iter()
            .map(|d| d.host_path.as_str())
            .collect();
        assert_eq!(
            paths,
            [
                "/dev/infiniband/rdma_cm",
                "/dev/infiniband/uverbs96",
                "/dev/infiniband/uverbs352"
            ]
        );
        assert!(got.device_nodes.iter().all(|d| d.permissions == "rw"));
        assert!(got.cdi_devices.is_empty());
    }

    #[test]
    fn optional_char_devices_follow_the_config() {
        let inv = two_socket_node();
        let a = assign(&ClassicConfig::default(), &inv);
        let vnic = a.resource("amd.com/vnic").unwrap();
        let options = AllocateOptions {
            char_devices: CharDeviceOptions {
                umad: true,
                issm: true,
            },
            cdi_enabled: false,
        };
        let got = container_allocation(&inv, vnic, &ids(&["0000:0c:00.1"]), options).unwrap();
        let paths: Vec<&str> = got
            .device_nodes
            .iter()
            .map(|d| d.container_path.as_str())
            .collect();
        assert_eq!(
            paths,
            [
                "/dev/infiniband/rdma_cm",
                "/dev/infiniband/uverbs97",
                "/dev/infiniband/umad97",
                "/dev/infiniband/issm97"
            ]
        );
        assert_eq!(got.envs["PCIDEVICE_AMD_COM_VNIC"], "0000:0c:00.1");
    }

    #[test]
    fn cdi_names_replace_device_specs() {
        let inv = two_socket_node();
        let a = assign(&ClassicConfig::default(), &inv);
        let nic = a.resource("amd.com/nic").unwrap();
        let options = AllocateOptions {
            cdi_enabled: true,
            ..AllocateOptions::default()
        };
        let got = container_allocation(&inv, nic, &ids(&["0000:0c:00.0"]), options).unwrap();
        assert!(got.device_nodes.is_empty());
        assert_eq!(
            got.cdi_devices,
            [
                "amd.com/ainic=classic-rdma-cm",
                "amd.com/ainic=classic-pf-0000-0c-00-0"
            ]
        );
        assert_eq!(got.envs["PCIDEVICE_AMD_COM_NIC"], "0000:0c:00.0");
    }

    #[test]
    fn devices_of_another_resource_are_refused() {
        let inv = two_socket_node();
        let a = assign(&ClassicConfig::default(), &inv);
        let nic = a.resource("amd.com/nic").unwrap();
        let err = container_allocation(
            &inv,
            nic,
            &ids(&["0000:0c:00.1"]),
            AllocateOptions::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "device \"0000:0c:00.1\" is not offered as amd.com/nic"
        );
    }
}
