//! Discovery over a small in-memory tree: one switch with a GPU and an
//! AINIC PF (one VF enabled), plus the RDMA class directories.

use super::*;
use crate::model::{CharDevice, FunctionKind};
use crate::sysfs::MemBackend;
use crate::{Affinity, PciAddress};

const SW: &str = "devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0";
const PF: &str = "devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:01.0/0000:04:00.0";
const VF: &str = "devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:01.0/0000:04:00.1";

fn addr(s: &str) -> PciAddress {
    s.parse().unwrap()
}

fn function(t: MemBackend, dir: &str, ids: [&str; 3]) -> MemBackend {
    let bdf = dir.rsplit('/').next().unwrap();
    t.file(&format!("{dir}/vendor"), ids[0])
        .file(&format!("{dir}/device"), ids[1])
        .file(&format!("{dir}/class"), ids[2])
        .file(&format!("{dir}/subsystem_vendor"), "0x1dd8\n")
        .file(&format!("{dir}/subsystem_device"), "0x5201\n")
        .file(&format!("{dir}/numa_node"), "0\n")
        .file(&format!("{dir}/local_cpulist"), "0-15\n")
        .file(&format!("{dir}/current_link_speed"), "32.0 GT/s PCIe\n")
        .file(&format!("{dir}/current_link_width"), "16\n")
        .link(
            &format!("bus/pci/devices/{bdf}"),
            &format!("../../../{dir}"),
        )
}

fn tree() -> MemBackend {
    let t = MemBackend::new();
    let t = function(
        t,
        &format!("{SW}/0000:03:00.0"),
        ["0x1002", "0x74a1", "0x120000"],
    );
    let t = function(t, PF, ["0x1dd8", "0x1002", "0x020000"]);
    let t = function(t, VF, ["0x1dd8", "0x1003", "0x020000"]);
    // An audio function of the GPU vendor and a bridge: both ignored.
    let t = function(
        t,
        &format!("{SW}/0000:03:00.1"),
        ["0x1002", "0xab00", "0x040300"],
    );
    let t = function(
        t,
        "devices/pci0000:00/0000:00:01.1",
        ["0x1022", "0x14ab", "0x060400"],
    );
    t.file(&format!("{PF}/sriov_totalvfs"), "8\n")
        .link(&format!("{PF}/virtfn0"), "../0000:04:00.1")
        .link(&format!("{VF}/physfn"), "../0000:04:00.0")
        .file(&format!("{VF}/numa_node"), "zero\n")
        .link(
            &format!("{PF}/driver"),
            "../../../../../../bus/pci/drivers/ionic",
        )
        .file(&format!("{PF}/net/enp4s0/address"), "02:00:00:04:00:00\n")
        .file(&format!("{PF}/net/enp4s0/mtu"), "9000\n")
        .file(&format!("{PF}/net/enp4s0/speed"), "400000\n")
        .file(&format!("{PF}/net/enp4s0/operstate"), "up\n")
        .file(&format!("{PF}/infiniband/ionic_0/fw_ver"), "1.2.3\n")
        .file(
            &format!("{PF}/infiniband/ionic_0/ports/1/state"),
            "4: ACTIVE\n",
        )
        .file(
            &format!("{PF}/infiniband/ionic_0/ports/1/phys_state"),
            "5: LinkUp\n",
        )
        .file(
            &format!("{PF}/infiniband/ionic_0/ports/1/rate"),
            "400 Gb/sec (4X NDR)\n",
        )
        .file(
            &format!("{PF}/infiniband/ionic_0/ports/1/link_layer"),
            "Ethernet\n",
        )
        .file("class/infiniband_verbs/abi_version", "6\n")
        .file("class/infiniband_verbs/uverbs0/ibdev", "ionic_0\n")
        .file("class/infiniband_verbs/uverbs0/dev", "231:192\n")
        .file("class/infiniband_mad/umad0/ibdev", "ionic_0\n")
        .file("class/infiniband_mad/umad0/port", "1\n")
        .file("class/infiniband_mad/umad0/dev", "231:0\n")
        .file("class/misc/rdma_cm/dev", "10:58\n")
}

#[test]
fn reads_gpu_pf_vf_and_their_affinity() {
    let inv = discover_in(&Sysfs::new(tree()), &DiscoveryConfig::default()).unwrap();
    assert_eq!(inv.gpus.len(), 1);
    assert_eq!(inv.gpus[0].address, addr("0000:03:00.0"));
    assert_eq!(inv.gpus[0].location.switch, Some(addr("0000:01:00.0")));
    let pf = &inv.nics[0];
    assert_eq!(pf.address, addr("0000:04:00.0"));
    assert_eq!(
        pf.kind,
        FunctionKind::Pf {
            total_vfs: Some(8),
            vfs: vec![addr("0000:04:00.1")]
        }
    );
    assert_eq!(pf.product_name.as_deref(), Some("Pollara 400"));
    assert_eq!(pf.driver.as_deref(), Some("ionic"));
    assert_eq!(pf.pcie_link.speed_gts.as_deref(), Some("32.0"));
    assert_eq!(pf.netdevs[0].speed_mbps, Some(400_000));
    let rdma = &pf.rdma[0];
    assert_eq!(rdma.ports[0].state.as_deref(), Some("ACTIVE"));
    assert_eq!(
        rdma.uverbs,
        Some(CharDevice {
            path: "/dev/infiniband/uverbs0".into(),
            major: 231,
            minor: 192
        })
    );
    assert_eq!(rdma.umad.len(), 1);
    assert!(rdma.issm.is_empty());
    let vf = &inv.nics[1];
    assert_eq!(
        vf.kind,
        FunctionKind::Vf {
            physfn: pf.address,
            index: 0
        }
    );
    // What a VF shares with its PF is the PF's: the VF's own (garbage)
    // numa_node is not read.
    assert_eq!(vf.location.numa_node, Some(0));
    assert_eq!(vf.local_cpus, pf.local_cpus);
    assert_eq!(vf.pcie_link, pf.pcie_link);
    assert_eq!(vf.ids.class, pf.ids.class);
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    assert_eq!(
        inv.rdma_cm.as_ref().map(|c| (c.major, c.minor)),
        Some((10, 58))
    );
    assert_eq!(
        inv.affinity(inv.gpus[0].address, pf.address),
        Some(Affinity::Pix)
    );
    assert_eq!(inv.links.len(), 2);
}

#[test]
fn a_root_without_pci_devices_is_an_error() {
    let err = discover_in(
        &Sysfs::new(MemBackend::new().dir("class")),
        &DiscoveryConfig::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("bus/pci/devices"), "{err}");
}

#[test]
fn a_custom_allow_list_replaces_the_default() {
    let config = DiscoveryConfig {
        nic_ids: vec![(0x1dd8, 0x1003)],
        ..DiscoveryConfig::default()
    };
    let inv = discover_in(&Sysfs::new(tree()), &config).unwrap();
    let found: Vec<PciAddress> = inv.nics.iter().map(|n| n.address).collect();
    assert_eq!(found, [addr("0000:04:00.1")]);
}

#[test]
fn an_entry_leading_to_another_function_is_skipped() {
    let tree = tree().link("bus/pci/devices/0000:09:00.0", &format!("../../../{PF}"));
    let inv = discover_in(&Sysfs::new(tree), &DiscoveryConfig::default()).unwrap();
    assert_eq!(inv.nics.len(), 2);
    assert!(
        inv.warnings
            .iter()
            .any(|w| w.starts_with("0000:09:00.0: bus/pci/devices entry leads to")),
        "{:?}",
        inv.warnings
    );
}

#[test]
fn a_vf_inherits_from_its_pf_and_a_bad_pf_file_is_warned_once() {
    let t = tree()
        .file(&format!("{PF}/numa_node"), "zero\n")
        .file(
            &format!("{VF}/infiniband/ionic_1/ports/1/state"),
            "4: ACTIVE\n",
        )
        .file(
            &format!("{VF}/infiniband/ionic_1/ports/1/phys_state"),
            "3: Disabled\n",
        )
        .file(
            &format!("{VF}/infiniband/ionic_1/ports/1/rate"),
            "100 Gb/sec\n",
        )
        .file(&format!("{VF}/infiniband/ionic_1/fw_ver"), "9.9.9\n");
    let inv = discover_in(&Sysfs::new(t), &DiscoveryConfig::default()).unwrap();
    let (pf, vf) = (&inv.nics[0], &inv.nics[1]);
    assert_eq!((pf.location.numa_node, vf.location.numa_node), (None, None));
    // The adapter's firmware is the PF's RDMA device's.
    assert_eq!(vf.rdma[0].name, "ionic_1");
    assert_eq!(vf.rdma[0].firmware_version.as_deref(), Some("1.2.3"));
    // The port's logical state and rate are the VF's, the physical port
    // (its state, its link layer) the PF's.
    let (pf_port, vf_port) = (&pf.rdma[0].ports[0], &vf.rdma[0].ports[0]);
    assert_eq!(vf_port.state.as_deref(), Some("ACTIVE"));
    assert_eq!(vf_port.rate.as_deref(), Some("100 Gb/sec"));
    assert_eq!(vf_port.phys_state, pf_port.phys_state);
    assert_eq!(vf_port.link_layer.as_deref(), Some("Ethernet"));
    assert_eq!(inv.warnings.len(), 1, "{:?}", inv.warnings);
    assert!(inv.warnings[0].starts_with("0000:04:00.0: invalid numa_node \"zero\""));
}

#[test]
fn a_vf_of_a_pf_without_a_class_is_skipped_naming_the_pf() {
    let t = tree().file(&format!("{PF}/class"), "nonsense\n");
    let inv = discover_in(&Sysfs::new(t), &DiscoveryConfig::default()).unwrap();
    assert!(inv.nics.is_empty(), "{:?}", inv.nics);
    assert_eq!(inv.warnings.len(), 2, "{:?}", inv.warnings);
    assert!(inv.warnings[1].contains("0000:04:00.1: its PF 0000:04:00.0 has no usable class"));
}

#[test]
fn a_vf_is_identified_by_its_pf_when_the_pf_names_its_vf_device() {
    // The VF's own vendor and device are not read: Linux copies them from
    // the PF's vendor and `sriov_vf_device`.
    let t = tree()
        .file(&format!("{PF}/sriov_vf_device"), "1003\n")
        .file(&format!("{VF}/vendor"), "0xzz\n")
        .file(&format!("{VF}/device"), "0xzz\n");
    let inv = discover_in(&Sysfs::new(t), &DiscoveryConfig::default()).unwrap();
    let vf = &inv.nics[1];
    assert_eq!((vf.ids.vendor, vf.ids.device), (0x1dd8, 0x1003));
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);

    // Without it, the VF's own files are read (and a bad one warned).
    let t = tree().file(&format!("{VF}/device"), "0xzz\n");
    let inv = discover_in(&Sysfs::new(t), &DiscoveryConfig::default()).unwrap();
    assert_eq!(inv.nics.len(), 1);
    assert!(
        inv.warnings[0].starts_with("0000:04:00.1: invalid device"),
        "{:?}",
        inv.warnings
    );
}

/// Adds a MAD entry of `ionic_0` to `t`, with `port` when given.
fn mad(t: MemBackend, name: &str, port: Option<&str>, minor: u32) -> MemBackend {
    let dir = format!("class/infiniband_mad/{name}");
    let t = t
        .file(&format!("{dir}/ibdev"), "ionic_0\n")
        .file(&format!("{dir}/dev"), &format!("231:{minor}\n"));
    match port {
        Some(port) => t.file(&format!("{dir}/port"), port),
        None => t,
    }
}

/// The umad paths of the PF's RDMA device, and the warnings.
fn umad_paths(t: MemBackend) -> (Vec<String>, Vec<String>) {
    let inv = discover_in(&Sysfs::new(t), &DiscoveryConfig::default()).unwrap();
    let umad = &inv.nics[0].rdma[0].umad;
    (umad.iter().map(|c| c.path.clone()).collect(), inv.warnings)
}

#[test]
fn mad_devices_of_a_device_with_several_ports_are_ordered_by_port() {
    // The tree's umad0 serves port 1 of ionic_0.
    let t = mad(
        mad(tree(), "umad5", Some("2\n"), 5),
        "umad6",
        Some("1\n"),
        6,
    );
    let (paths, warnings) = umad_paths(t);
    let expected = ["umad0", "umad6", "umad5"].map(|n| format!("/dev/infiniband/{n}"));
    assert_eq!(paths, expected);
    assert!(warnings.is_empty(), "{warnings:?}");

    // Where the order is needed, a port that does not read costs its entry.
    let t = mad(mad(tree(), "umad5", None, 5), "umad6", Some("1\n"), 6);
    let (paths, warnings) = umad_paths(t);
    assert_eq!(paths, ["/dev/infiniband/umad0", "/dev/infiniband/umad6"]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].starts_with("class/infiniband_mad/umad5: cannot read port: missing"));
}

/// Adds a verbs entry whose class link leads into `function`, as the
/// kernel makes them.
fn linked_verbs(t: MemBackend, function: &str, name: &str, ibdev: &str, minor: u32) -> MemBackend {
    let dir = format!("{function}/infiniband_verbs/{name}");
    t.file(&format!("{dir}/ibdev"), &format!("{ibdev}\n"))
        .file(&format!("{dir}/dev"), &format!("231:{minor}\n"))
        .file(
            &format!("{function}/infiniband/{ibdev}/ports/1/state"),
            "4: ACTIVE\n",
        )
        .link(
            &format!("class/infiniband_verbs/{name}"),
            &format!("../../{dir}"),
        )
}

#[test]
fn a_verbs_entry_belongs_to_the_function_its_link_names() {
    // The PF has three RDMA devices: ionic_0 (its class entry is a plain
    // directory: found by name), ionic_7 and ionic_9 (found by the PF's
    // directory, then told apart by name). The VF has one: its entry's
    // link decides, whatever its `ibdev` says.
    let t = linked_verbs(tree(), PF, "uverbs7", "ionic_7", 7);
    let t = linked_verbs(t, PF, "uverbs9", "ionic_9", 9);
    let t = linked_verbs(t, VF, "uverbs1", "ionic_1", 1)
        .file(&format!("{VF}/infiniband_verbs/uverbs1/ibdev"), "stale\n");
    let inv = discover_in(&Sysfs::new(t), &DiscoveryConfig::default()).unwrap();
    let minors = |nic: &NicFunction| -> Vec<(String, Option<u32>)> {
        let minor = |d: &crate::model::RdmaDevice| d.uverbs.as_ref().map(|c| c.minor);
        nic.rdma
            .iter()
            .map(|d| (d.name.clone(), minor(d)))
            .collect()
    };
    let expected = [("ionic_0", 192), ("ionic_7", 7), ("ionic_9", 9)];
    assert_eq!(
        minors(&inv.nics[0]),
        expected.map(|(n, m)| (n.to_string(), Some(m)))
    );
    assert_eq!(minors(&inv.nics[1]), [("ionic_1".to_string(), Some(1))]);
}
