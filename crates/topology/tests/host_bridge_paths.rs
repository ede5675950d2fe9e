//! Host bridges that are not directly below `devices/`: Hyper-V virtual PCI
//! (Azure GPU VMs) puts every passed-through function on its own host
//! bridge below the VMBus device, e.g.
//! `devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/<guid>/pci0041:00/0041:00:00.0`.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use topology::{Affinity, DiscoveryConfig, PciAddress, discover};

const VMBUS: &str = "devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00";

/// A function at `vmbus-guid/pci<domain>:00/<bdf>` with its bus link.
fn vpci_function(root: &Path, guid: &str, bdf: &str, ids: (&str, &str, &str), numa: &str) {
    let domain = &bdf[..4];
    let rel = format!("{VMBUS}/{guid}/pci{domain}:00/{bdf}");
    let dir = root.join(&rel);
    fs::create_dir_all(&dir).unwrap();
    let (vendor, device, class) = ids;
    for (file, value) in [
        ("vendor", vendor),
        ("device", device),
        ("class", class),
        ("subsystem_vendor", vendor),
        ("subsystem_device", "0x0000"),
        ("numa_node", numa),
        ("current_link_speed", "32.0 GT/s PCIe"),
        ("current_link_width", "16"),
        ("local_cpulist", "0-47"),
    ] {
        fs::write(dir.join(file), format!("{value}\n")).unwrap();
    }
    let devices = root.join("bus/pci/devices");
    fs::create_dir_all(&devices).unwrap();
    symlink(format!("../../../{rel}"), devices.join(bdf)).unwrap();
}

fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

#[test]
fn hyperv_vpci_functions_are_found_and_classified() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let gpu = ("0x1002", "0x74b5", "0x120000");
    let nic = ("0x1dd8", "0x1002", "0x020000");
    vpci_function(
        root,
        "00000041-0000-0000-0000-000000000000",
        "0041:00:00.0",
        gpu,
        "0",
    );
    vpci_function(
        root,
        "00000042-0000-0000-0000-000000000000",
        "0042:00:00.0",
        nic,
        "0",
    );
    vpci_function(
        root,
        "00000043-0000-0000-0000-000000000000",
        "0043:00:00.0",
        nic,
        "1",
    );

    let inv = discover(root, &DiscoveryConfig::default()).unwrap();
    assert_eq!(inv.gpus.len(), 1, "{:#?}", inv.warnings);
    assert_eq!(inv.nics.len(), 2, "{:#?}", inv.warnings);
    assert_eq!(inv.gpus[0].location.root, "pci0041:00");
    assert!(inv.gpus[0].location.bridges.is_empty());
    let g = addr("0041:00:00.0");
    assert_eq!(inv.affinity(g, addr("0042:00:00.0")), Some(Affinity::Node));
    assert_eq!(inv.affinity(g, addr("0043:00:00.0")), Some(Affinity::Sys));
    assert_eq!(
        inv.nearest_gpu(addr("0042:00:00.0")),
        Some((g, Affinity::Node))
    );
}
