//! Hand-built inventories for the unit tests of the classic path.
//!
//! Each function gets a PCIe position from a root name and a switch number:
//! functions with the same root and switch number share a switch; `None`
//! puts a function straight on its own root port. The functions themselves
//! are [`sample::plain_function`]s.

use topology::{FunctionKind, Inventory, NicFunction, PciAddress, PcieLocation, nearest_switch};

use crate::sample;

fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

fn location(address: PciAddress, numa: u32, root: &str, switch: Option<u8>) -> PcieLocation {
    let root_bus = u8::from_str_radix(&root[root.len() - 2..], 16).unwrap();
    let bdf = |bus: u8, dev: u8| PciAddress {
        domain: 0,
        bus,
        device: dev,
        function: 0,
    };
    let bridges = match switch {
        Some(s) => vec![
            bdf(root_bus, s + 1),
            bdf(root_bus + s * 4 + 1, 0),
            bdf(root_bus + s * 4 + 2, address.device % 32),
        ],
        None => vec![bdf(root_bus, 16 + address.bus % 16)],
    };
    PcieLocation {
        root: root.to_string(),
        switch: nearest_switch(&bridges),
        bridges,
        numa_node: Some(numa),
    }
}

/// A function at `address` with netdev `eth<bus>f<function>` and RDMA
/// device `ionic_<bus·8 + function>`; its caller places it.
fn function(address: PciAddress, kind: FunctionKind) -> NicFunction {
    let n = u32::from(address.bus) * 8 + u32::from(address.function);
    let netdev = format!("eth{:02x}f{}", address.bus, address.function);
    sample::plain_function(address, kind, netdev, n)
}

/// A PF at `address` on NUMA node `numa`, below `root`, under `switch`.
pub(crate) fn pf(address: &str, numa: u32, root: &str, switch: Option<u8>) -> NicFunction {
    let address = addr(address);
    let mut f = function(
        address,
        FunctionKind::Pf {
            total_vfs: Some(8),
            vfs: vec![],
        },
    );
    f.location = location(address, numa, root, switch);
    f
}

/// VF number `index` of `physfn`, placed like its PF.
pub(crate) fn vf(
    address: &str,
    physfn: &str,
    index: u32,
    numa: u32,
    root: &str,
    switch: Option<u8>,
) -> NicFunction {
    let address = addr(address);
    let mut f = function(
        address,
        FunctionKind::Vf {
            physfn: addr(physfn),
            index,
        },
    );
    f.location = location(address, numa, root, switch);
    f
}

/// An inventory holding `nics` (sorted, PF `vfs` lists filled in) and an
/// `rdma_cm` char device.
pub(crate) fn inventory(mut nics: Vec<NicFunction>) -> Inventory {
    nics.sort_by_key(|n| n.address);
    let vfs: Vec<(PciAddress, PciAddress)> = nics
        .iter()
        .filter_map(|n| match n.kind {
            FunctionKind::Vf { physfn, .. } => Some((physfn, n.address)),
            FunctionKind::Pf { .. } => None,
        })
        .collect();
    for nic in &mut nics {
        if let FunctionKind::Pf { vfs: list, .. } = &mut nic.kind {
            list.extend(
                vfs.iter()
                    .filter(|(p, _)| *p == nic.address)
                    .map(|(_, v)| *v),
            );
        }
    }
    Inventory {
        nics,
        rdma_cm: Some(sample::rdma_cm()),
        ..Inventory::default()
    }
}

/// MI300X-like node: 8 PFs, 4 per NUMA node, each socket with two roots.
/// On NUMA 0, PFs 0c and 0d share switch 0 of root `pci0000:00`; 2c is on
/// switch 1 of the same root; 4c sits on root `pci0000:40`. NUMA 1 mirrors
/// it with one PF per switch. Every PF has two VFs.
pub(crate) fn two_socket_node() -> Inventory {
    let table: [(&str, u32, &str, u8); 8] = [
        ("0000:0c:00", 0, "pci0000:00", 0),
        ("0000:0d:00", 0, "pci0000:00", 0),
        ("0000:2c:00", 0, "pci0000:00", 1),
        ("0000:4c:00", 0, "pci0000:40", 0),
        ("0000:8c:00", 1, "pci0000:80", 0),
        ("0000:9c:00", 1, "pci0000:80", 1),
        ("0000:ac:00", 1, "pci0000:80", 2),
        ("0000:cc:00", 1, "pci0000:c0", 0),
    ];
    let mut nics = Vec::new();
    for (slot, numa, root, switch) in table {
        let physfn = format!("{slot}.0");
        nics.push(pf(&physfn, numa, root, Some(switch)));
        for i in 0..2u32 {
            let address = format!("{slot}.{}", i + 1);
            nics.push(vf(&address, &physfn, i, numa, root, Some(switch)));
        }
    }
    inventory(nics)
}
