//! The inventory: what discovery found on one node, as plain data.
//!
//! Every other crate consumes these types; none of them knows where the data
//! came from. Optional fields are `None` when sysfs did not say (missing or
//! unparsable file), never a guessed default.

use serde::{Deserialize, Serialize};

use crate::affinity::Affinity;
use crate::pci::{PciAddress, PciIds};

/// Everything discovered on one node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    /// AINIC functions (PFs and VFs), sorted by PCI address.
    pub nics: Vec<NicFunction>,
    /// GPUs, sorted by PCI address.
    pub gpus: Vec<Gpu>,
    /// The affinity of every GPU–NIC pair, GPU-major then NIC, both by address.
    pub links: Vec<GpuNicLink>,
    /// `/dev/infiniband/rdma_cm`, when the RDMA connection manager is present.
    pub rdma_cm: Option<CharDevice>,
    /// Problems met while reading, one line each (also logged as warnings).
    pub warnings: Vec<String>,
}

/// Where a PCI function sits in the PCIe tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PcieLocation {
    /// The host bridge directory under `/sys/devices` (e.g. `pci0000:00`):
    /// the value of `resource.kubernetes.io/pcieRoot`.
    pub root: String,
    /// Bridges between the host bridge and the function, root port first.
    pub bridges: Vec<PciAddress>,
    /// Upstream port of the nearest PCIe switch above the function, if any.
    pub switch: Option<PciAddress>,
    /// NUMA node; `None` when sysfs says -1 or nothing usable. A VF's is
    /// its PF's (Linux gives it the PF's).
    pub numa_node: Option<u32>,
}

/// Negotiated PCIe link of a function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PcieLink {
    /// Transfer rate in GT/s as sysfs reports it (e.g. `32.0`), if readable.
    pub speed_gts: Option<String>,
    /// Lane count (e.g. 16), if readable.
    pub width: Option<u32>,
}

/// A character device node, with the numbers from sysfs `dev`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CharDevice {
    /// Path inside the container and on the host, e.g. `/dev/infiniband/uverbs0`.
    pub path: String,
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

/// Whether a NIC function is a physical function or an SR-IOV virtual function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum FunctionKind {
    /// A physical function.
    Pf {
        /// `sriov_totalvfs`, when SR-IOV capable and readable.
        total_vfs: Option<u32>,
        /// Enabled VFs found through `virtfnN` links, in N order.
        vfs: Vec<PciAddress>,
    },
    /// A virtual function.
    Vf {
        /// The parent PF, from the `physfn` link.
        physfn: PciAddress,
        /// N of the parent's `virtfnN` link that points here.
        index: u32,
    },
}

/// A network interface of a NIC function (`net/<ifname>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Netdev {
    /// Interface name, e.g. `enp12s0`.
    pub name: String,
    /// MAC address, lowercase colon form.
    pub mac: Option<String>,
    /// MTU in bytes.
    pub mtu: Option<u32>,
    /// Link speed in Mb/s; `None` when unknown (sysfs says -1 or link down).
    pub speed_mbps: Option<u64>,
    /// `operstate` (`up`, `down`, `unknown`, …).
    pub operstate: Option<String>,
}

/// One port of an RDMA device (`infiniband/<ibdev>/ports/N`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RdmaPort {
    /// Port number (1-based, as the kernel numbers them).
    pub number: u32,
    /// `state` without the numeric prefix, e.g. `ACTIVE`, `DOWN`.
    pub state: Option<String>,
    /// `phys_state` without the numeric prefix, e.g. `LinkUp`; on a VF, the
    /// PF's port of the same number (the physical port is the PF's).
    pub phys_state: Option<String>,
    /// `rate`, e.g. `400 Gb/sec (4X NDR)`.
    pub rate: Option<String>,
    /// `link_layer`, e.g. `Ethernet`; on a VF, as `phys_state`.
    pub link_layer: Option<String>,
}

/// An RDMA device of a NIC function, with the char devices that give access to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RdmaDevice {
    /// Kernel name (`ionic_0`, or a udev-renamed `rocep12s0`).
    pub name: String,
    /// `fw_ver` of the device, when present; on a VF, the adapter's, as its
    /// PF's first RDMA device reports it.
    pub firmware_version: Option<String>,
    /// Ports, by number.
    pub ports: Vec<RdmaPort>,
    /// The verbs device (`/dev/infiniband/uverbsN`).
    pub uverbs: Option<CharDevice>,
    /// MAD devices (`/dev/infiniband/umadN`), one per port.
    pub umad: Vec<CharDevice>,
    /// Subnet-management devices (`/dev/infiniband/issmN`), one per port.
    pub issm: Vec<CharDevice>,
}

/// One AINIC PCI function and everything Linux says about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NicFunction {
    /// PCI address.
    pub address: PciAddress,
    /// PF or VF, with the SR-IOV relations.
    pub kind: FunctionKind,
    /// Identity registers.
    pub ids: PciIds,
    /// Marketing name derived from the subsystem IDs (e.g. `Pollara 400`).
    pub product_name: Option<String>,
    /// Bound kernel driver (`ionic`), when bound.
    pub driver: Option<String>,
    /// Position in the PCIe tree and NUMA node.
    pub location: PcieLocation,
    /// `local_cpulist`, e.g. `0-47,96-143`; a VF's is its PF's.
    pub local_cpus: Option<String>,
    /// Negotiated PCIe link; a VF's is its PF's (a VF has no link of its
    /// own: its link registers are reserved).
    pub pcie_link: PcieLink,
    /// Network interfaces, by name.
    pub netdevs: Vec<Netdev>,
    /// RDMA devices, by name.
    pub rdma: Vec<RdmaDevice>,
}

/// What kind of GPU function a GPU is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gpu {
    /// PCI address.
    pub address: PciAddress,
    /// Identity registers.
    pub ids: PciIds,
    /// Bound kernel driver (`amdgpu`, `nvidia`), when bound.
    pub driver: Option<String>,
    /// Position in the PCIe tree and NUMA node.
    pub location: PcieLocation,
}

/// The affinity between one GPU and one NIC function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuNicLink {
    /// The GPU.
    pub gpu: PciAddress,
    /// The NIC function.
    pub nic: PciAddress,
    /// How close they are.
    #[serde(rename = "type")]
    pub affinity: Affinity,
}

impl NicFunction {
    /// True for a physical function.
    pub fn is_pf(&self) -> bool {
        matches!(self.kind, FunctionKind::Pf { .. })
    }
}

impl Inventory {
    /// The NIC function at `address`.
    pub fn nic(&self, address: PciAddress) -> Option<&NicFunction> {
        self.nics.iter().find(|n| n.address == address)
    }

    /// The affinity of `gpu` and `nic`, if both are in the inventory.
    pub fn affinity(&self, gpu: PciAddress, nic: PciAddress) -> Option<Affinity> {
        self.links
            .iter()
            .find(|l| l.gpu == gpu && l.nic == nic)
            .map(|l| l.affinity)
    }

    /// The GPU closest to `nic` and its affinity class; the lowest GPU
    /// address wins a tie. `None` when the node has no GPU.
    pub fn nearest_gpu(&self, nic: PciAddress) -> Option<(PciAddress, Affinity)> {
        self.links
            .iter()
            .filter(|l| l.nic == nic)
            .min_by_key(|l| (l.affinity, l.gpu))
            .map(|l| (l.gpu, l.affinity))
    }
}
