//! The names the driver publishes: driver, attributes, capacities, taints,
//! device names and slice names. These strings are the contract with
//! DeviceClasses, claims and the allocator; change them only on purpose.

use topology::{FunctionKind, NicFunction, PciAddress};

/// Default driver name (`spec.driver` of every slice).
pub const DEFAULT_DRIVER: &str = "ainic.amd.com";

/// Domain of the upstream standard attributes.
pub const STANDARD_DOMAIN: &str = "resource.kubernetes.io";

/// `resource.kubernetes.io/pcieRoot`: string `pci<domain>:<bus>`.
pub const ATTR_PCIE_ROOT: &str = "resource.kubernetes.io/pcieRoot";
/// `resource.kubernetes.io/pciBusID`: string, extended BDF `0000:0c:00.0`.
pub const ATTR_PCI_BUS_ID: &str = "resource.kubernetes.io/pciBusID";
/// `resource.kubernetes.io/numaNode`: the NUMA node. Upstream defines it as
/// an int list behind `DRAListTypeAttributes` (1.36+); the 1.34 API has no
/// list values, so it is published as an int, which list-aware matching
/// treats as a one-element list.
pub const ATTR_NUMA_NODE_STD: &str = "resource.kubernetes.io/numaNode";

/// The driver's own attributes (unqualified; published as `<driver>/<id>`).
pub mod attr {
    /// `"pf"` or `"vf"`.
    pub const TYPE: &str = "type";
    /// PCI vendor ID, four lowercase hex digits (`1dd8`).
    pub const PCI_VENDOR_ID: &str = "pciVendorID";
    /// PCI device ID, four lowercase hex digits (`1002`).
    pub const PCI_DEVICE_ID: &str = "pciDeviceID";
    /// Marketing name (`Pollara 400`), when known.
    pub const PRODUCT_NAME: &str = "productName";
    /// Network interface name, when the function has one.
    pub const IF_NAME: &str = "ifName";
    /// MAC address, lowercase colon form.
    pub const MAC: &str = "mac";
    /// MTU in bytes (int).
    pub const MTU: &str = "mtu";
    /// Link speed in Gb/s (int), when known.
    pub const LINK_SPEED_GBPS: &str = "linkSpeedGbps";
    /// RDMA device name (`ionic_0`, `rocep12s0`).
    pub const RDMA_DEVICE: &str = "rdmaDevice";
    /// Firmware version string of the RDMA device.
    pub const FIRMWARE_VERSION: &str = "firmwareVersion";
    /// NUMA node (int), when known.
    pub const NUMA_NODE: &str = "numaNode";
    /// BDF of the upstream port of the nearest PCIe switch above the function.
    pub const PCIE_SWITCH: &str = "pcieSwitch";
    /// BDF of the GPU with the best affinity (lowest BDF on ties).
    pub const NEAREST_GPU: &str = "nearestGPU";
    /// Affinity class to that GPU: `PIX`, `PXB`, `PHB`, `NODE`, `SYS`.
    pub const GPU_AFFINITY: &str = "gpuAffinity";
    /// BDF of the parent PF (VFs only).
    pub const PHYSFN: &str = "physfn";
    /// N of the parent's `virtfnN` (VFs only, int).
    pub const VF_INDEX: &str = "vfIndex";
    /// Rail number (int).
    pub const RAIL: &str = "rail";
    /// Fabric partition / domain (string).
    pub const FABRIC: &str = "fabric";
    /// Leaf switch the port is cabled to, when known.
    pub const LEAF_SWITCH: &str = "leafSwitch";
    /// Tenant the NIC is fenced to (fabric config or node label), when
    /// one is set; the shipped classes leave such devices to that tenant's
    /// classes.
    pub const TENANT: &str = "tenant";
    /// True on PFs published for sharing (consumable capacity).
    pub const SHARED: &str = "shared";
    /// The extended resource (`amd.com/nic`, `amd.com/vnic`) the device
    /// serves through DRA; only on nodes switched to DRA for them.
    pub const EXTENDED_RESOURCE: &str = "extendedResource";

    /// Every driver attribute name above.
    pub const ALL: [&str; 22] = [
        TYPE,
        PCI_VENDOR_ID,
        PCI_DEVICE_ID,
        PRODUCT_NAME,
        IF_NAME,
        MAC,
        MTU,
        LINK_SPEED_GBPS,
        RDMA_DEVICE,
        FIRMWARE_VERSION,
        NUMA_NODE,
        PCIE_SWITCH,
        NEAREST_GPU,
        GPU_AFFINITY,
        PHYSFN,
        VF_INDEX,
        RAIL,
        FABRIC,
        LEAF_SWITCH,
        TENANT,
        SHARED,
        EXTENDED_RESOURCE,
    ];
}

/// The extended resource PFs serve, by the classic device plugin or by DRA.
pub const EXTENDED_NIC: &str = "amd.com/nic";
/// The extended resource VFs serve.
pub const EXTENDED_VNIC: &str = "amd.com/vnic";
/// Node label (under the driver domain) that switches a node's extended
/// resources to DRA: `dra`, or `classic` (the default).
pub const LABEL_EXTENDED_RESOURCES: &str = "extended-resources";

/// Node label prefix (under the driver domain) of a sticky shared PF's
/// tenant binding: `<driver>/bound-tenant.<device>` = tenant. Kept by the
/// controller while a claim of that tenant holds a share of the device.
pub const LABEL_BOUND_TENANT_PREFIX: &str = "bound-tenant.";

/// Binding condition of a sticky shared PF: the controller bound the PF to
/// the claim's tenant (the scheduler binds the pod only once it is true).
pub const CONDITION_TENANT_BOUND: &str = "tenant-bound";
/// Binding failure condition: the PF is bound to another tenant.
pub const CONDITION_TENANT_CONFLICT: &str = "tenant-conflict";

/// Capacity names (unqualified; published as `<driver>/<id>`).
pub mod capacity {
    /// Link bandwidth in bits/s.
    pub const BANDWIDTH: &str = "bandwidth";
    /// RDMA queue pairs, when known or configured.
    pub const QUEUE_PAIRS: &str = "queuePairs";
}

/// Taint key (under the driver domain) for devices whose link or RDMA port
/// is down, or whose hardware error counters cross their `unhealthy`
/// thresholds (effect `NoSchedule`).
pub const TAINT_UNHEALTHY: &str = "unhealthy";

/// Taint key (under the driver domain) for devices whose hardware error
/// counters cross their `degraded` thresholds (effect `None`:
/// informational, from Kubernetes 1.35).
pub const TAINT_DEGRADED: &str = "degraded";

/// Name of the counter every PF/VF counter set holds.
pub const COUNTER_FUNCTIONS: &str = "functions";

/// `s` as a label value (a taint's value): characters other than
/// `[A-Za-z0-9_.-]` become `-`, leading and trailing non-alphanumerics go,
/// at most 63 characters.
pub fn label_value(s: &str) -> String {
    let mapped: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// `<driver>/<id>`.
pub fn qualified(driver: &str, id: &str) -> String {
    format!("{driver}/{id}")
}

/// The device name of a NIC function: `pf-0000-0c-00-0` / `vf-0000-0c-00-2`.
/// A DNS label derived only from the PCI address, so it survives reboots.
pub fn device_name(nic: &NicFunction) -> String {
    let prefix = match nic.kind {
        FunctionKind::Pf { .. } => "pf",
        FunctionKind::Vf { .. } => "vf",
    };
    format!("{prefix}-{}", address_label(nic.address))
}

/// A PCI address as a DNS-label fragment: `0000-0c-00-0`.
pub fn address_label(a: PciAddress) -> String {
    format!(
        "{:04x}-{:02x}-{:02x}-{:x}",
        a.domain, a.bus, a.device, a.function
    )
}

/// The name of the `index`-th slice of `node`'s pool:
/// `<node>-<driver>-<index>`, made a valid DNS subdomain (lowercase,
/// `[a-z0-9.-]`, ≤253; a long node name is shortened and a hash added).
pub fn slice_name(node: &str, driver: &str, index: usize) -> String {
    let clean: String = node
        .to_ascii_lowercase()
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '.' | '-' => c,
            _ => '-',
        })
        .collect();
    let tail = format!("-{driver}-{index}");
    const MAX: usize = 253;
    let mut head = clean.trim_matches(|c| c == '-' || c == '.').to_string();
    if head.len() + tail.len() > MAX || head != node {
        // Different node names must not collide after cleaning or cutting.
        let hash = format!("{:08x}", fnv1a(node.as_bytes()) as u32);
        head.truncate(MAX - tail.len() - hash.len() - 1);
        let head = head.trim_end_matches(['-', '.']);
        return if head.is_empty() {
            format!("{hash}{tail}")
        } else {
            format!("{head}-{hash}{tail}")
        };
    }
    format!("{head}{tail}")
}

pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_names_are_plain_for_plain_nodes() {
        assert_eq!(
            slice_name("node-a", DEFAULT_DRIVER, 2),
            "node-a-ainic.amd.com-2"
        );
    }

    #[test]
    fn slice_names_of_odd_nodes_are_valid_and_distinct() {
        let a = slice_name("Node_A", DEFAULT_DRIVER, 0);
        let b = slice_name("node-a", DEFAULT_DRIVER, 0);
        assert_ne!(a, b);
        assert!(crate::validate::format::is_dns_subdomain(&a), "{a}");
        let long = "n".repeat(300);
        let name = slice_name(&long, DEFAULT_DRIVER, 10);
        assert!(name.len() <= 253);
        assert!(crate::validate::format::is_dns_subdomain(&name), "{name}");
    }

    #[test]
    fn address_labels_are_dns_labels() {
        let a: PciAddress = "10ab:ff:1f.7".parse().unwrap();
        assert_eq!(address_label(a), "10ab-ff-1f-7");
    }
}
