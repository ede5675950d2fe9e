//! Synthetic inventories for tests and benchmarks: `n` Pollara PFs, each
//! behind its own PCIe switch with one GPU, each with `v` VFs.
//!
//! Real topologies come from sysfs fixtures (testkit); these exist to
//! reach sizes no fixture has (8 PFs × 256 VFs) without a sysfs tree.
//! [`plain_function`] and [`rdma_cm`] are the building blocks of the
//! smaller hand-placed inventories other unit tests write.

use topology::{
    CharDevice, FunctionKind, Gpu, GpuNicLink, Inventory, Netdev, NicFunction, PciAddress, PciIds,
    PcieLink, PcieLocation, RdmaDevice, RdmaPort,
};

/// PF `i` of a synthetic node: `0000:<0x10 + 0x10·i>:00.0`.
pub fn pf_address(i: usize) -> PciAddress {
    PciAddress {
        domain: 0,
        bus: 0x10 + (i as u8) * 0x10,
        device: 0,
        function: 0,
    }
}

fn gpu_address(i: usize) -> PciAddress {
    PciAddress {
        bus: 0x18 + (i as u8) * 0x10,
        ..pf_address(i)
    }
}

/// VF `j` of PF `i`: on the bus after the PF's, functions packed 8 per device.
pub fn vf_address(i: usize, j: usize) -> PciAddress {
    PciAddress {
        domain: 0,
        bus: 0x11 + (i as u8) * 0x10 + (j / 256) as u8,
        device: ((j % 256) / 8) as u8,
        function: (j % 8) as u8,
    }
}

fn location(i: usize, numa: u32) -> PcieLocation {
    let root_port = PciAddress {
        domain: 0,
        bus: ((i / 4) * 0x80) as u8,
        device: 1 + i as u8,
        function: 1,
    };
    let usp = PciAddress {
        bus: 0x0f + (i as u8) * 0x10,
        device: 0,
        function: 0,
        ..root_port
    };
    let dsp = PciAddress { device: 1, ..usp };
    PcieLocation {
        root: format!("pci0000:{:02x}", (i / 4) * 0x80),
        bridges: vec![root_port, usp, dsp],
        switch: Some(usp),
        numa_node: Some(numa),
    }
}

/// One PF with everything discovery can fill in; `up` sets link and RDMA port state.
pub fn pf(i: usize, vfs: usize, up: bool) -> NicFunction {
    let numa = (i / 4) as u32;
    NicFunction {
        address: pf_address(i),
        kind: FunctionKind::Pf {
            total_vfs: Some(256),
            vfs: (0..vfs).map(|j| vf_address(i, j)).collect(),
        },
        ids: pollara_ids(false),
        product_name: Some("Pollara 400".into()),
        driver: Some("ionic".into()),
        location: location(i, numa),
        local_cpus: Some("0-47".into()),
        pcie_link: PcieLink {
            speed_gts: Some("32.0".into()),
            width: Some(16),
        },
        netdevs: vec![Netdev {
            name: format!("enp{}s0", 16 + i * 16),
            mac: Some(format!("04:90:81:00:00:{i:02x}")),
            mtu: Some(9000),
            speed_mbps: up.then_some(400_000),
            operstate: Some(if up { "up" } else { "down" }.into()),
        }],
        rdma: vec![RdmaDevice {
            name: format!("ionic_{i}"),
            firmware_version: Some("1.110.0-a-62".into()),
            ports: vec![RdmaPort {
                number: 1,
                state: Some(if up { "ACTIVE" } else { "DOWN" }.into()),
                phys_state: Some(if up { "LinkUp" } else { "Disabled" }.into()),
                rate: Some("400 Gb/sec (4X NDR)".into()),
                link_layer: Some("Ethernet".into()),
            }],
            uverbs: None,
            umad: vec![],
            issm: vec![],
        }],
    }
}

/// VF `j` of PF `i` (no netdev: VFs are often bound to vfio or unused).
pub fn vf(i: usize, j: usize) -> NicFunction {
    let parent = pf(i, 0, true);
    NicFunction {
        address: vf_address(i, j),
        kind: FunctionKind::Vf {
            physfn: pf_address(i),
            index: j as u32,
        },
        ids: pollara_ids(true),
        netdevs: vec![],
        rdma: vec![],
        ..parent
    }
}

/// PCI IDs of a Pollara 400 PF (device `1002`) or VF (device `1003`).
pub fn pollara_ids(vf: bool) -> PciIds {
    PciIds {
        vendor: 0x1dd8,
        device: if vf { 0x1003 } else { 0x1002 },
        subsystem_vendor: Some(0x1dd8),
        subsystem_device: Some(0x5201),
        class: 0x020000,
    }
}

/// A Pollara function with only what hand-written tests look at: `address`
/// and `kind`, netdev `netdev` (MTU 9000, 400 Gb/s, up) and RDMA device
/// `ionic_<n>` (port 1 active) with `uverbs<n>`, `umad<n>` and `issm<n>`
/// char devices. It hangs straight off root `pci0000:00` on NUMA node 0,
/// with no CPU list, link speed, MAC or firmware version.
pub fn plain_function(
    address: PciAddress,
    kind: FunctionKind,
    netdev: String,
    n: u32,
) -> NicFunction {
    let infiniband = |name: &str, minor: u32| CharDevice {
        path: format!("/dev/infiniband/{name}{n}"),
        major: 231,
        minor,
    };
    NicFunction {
        address,
        ids: pollara_ids(matches!(kind, FunctionKind::Vf { .. })),
        kind,
        product_name: Some("Pollara 400".into()),
        driver: Some("ionic".into()),
        location: PcieLocation {
            root: "pci0000:00".into(),
            bridges: vec![],
            switch: None,
            numa_node: Some(0),
        },
        local_cpus: None,
        pcie_link: PcieLink {
            speed_gts: None,
            width: None,
        },
        netdevs: vec![Netdev {
            name: netdev,
            mac: None,
            mtu: Some(9000),
            speed_mbps: Some(400_000),
            operstate: Some("up".into()),
        }],
        rdma: vec![RdmaDevice {
            name: format!("ionic_{n}"),
            firmware_version: None,
            ports: vec![RdmaPort {
                number: 1,
                state: Some("ACTIVE".into()),
                phys_state: Some("LinkUp".into()),
                rate: None,
                link_layer: Some("Ethernet".into()),
            }],
            uverbs: Some(infiniband("uverbs", 192 + n)),
            umad: vec![infiniband("umad", n)],
            issm: vec![infiniband("issm", 64 + n)],
        }],
    }
}

/// The `/dev/infiniband/rdma_cm` char device (10:58).
pub fn rdma_cm() -> CharDevice {
    CharDevice {
        path: "/dev/infiniband/rdma_cm".into(),
        major: 10,
        minor: 58,
    }
}

/// A node with `pfs` PFs (all links up), each with `vfs` VFs and one GPU on
/// the same switch.
pub fn inventory(pfs: usize, vfs: usize) -> Inventory {
    let mut nics = Vec::new();
    let mut gpus = Vec::new();
    for i in 0..pfs {
        nics.push(pf(i, vfs, true));
        nics.extend((0..vfs).map(|j| vf(i, j)));
        let mut loc = location(i, (i / 4) as u32);
        loc.bridges[2].device = 2;
        gpus.push(Gpu {
            address: gpu_address(i),
            ids: PciIds {
                vendor: 0x1002,
                device: 0x74a1,
                subsystem_vendor: None,
                subsystem_device: None,
                class: 0x120000,
            },
            driver: Some("amdgpu".into()),
            location: loc,
        });
    }
    nics.sort_by_key(|n| n.address);
    let mut links = Vec::new();
    for g in &gpus {
        for n in &nics {
            links.push(GpuNicLink {
                gpu: g.address,
                nic: n.address,
                affinity: topology::classify(&g.location, &n.location),
            });
        }
    }
    Inventory {
        nics,
        gpus,
        links,
        rdma_cm: None,
        warnings: vec![],
    }
}
