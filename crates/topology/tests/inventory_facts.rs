//! What discovery reports about each function of the bundled fixtures.

mod common;

use common::{addr, discover_bundled, names};
use topology::{CharDevice, DiscoveryConfig, FunctionKind, Netdev, RdmaPort, discover};

fn chardev(path: &str, major: u32, minor: u32) -> CharDevice {
    CharDevice {
        path: path.into(),
        major,
        minor,
    }
}

#[test]
fn mi300x_node_inventory() {
    let (_dir, inv) = discover_bundled("mi300x-8gpu-8nic");
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    let buses = ["04", "24", "44", "64", "84", "a4", "c4", "e4"];
    let expected: Vec<String> = buses.iter().map(|b| format!("0000:{b}:00.0")).collect();
    assert_eq!(names(inv.nics.iter().map(|n| n.address)), expected);
    assert_eq!(inv.gpus.len(), 8);
    for (i, gpu) in inv.gpus.iter().enumerate() {
        assert_eq!(
            (gpu.ids.vendor, gpu.ids.device, gpu.ids.class),
            (0x1002, 0x74a1, 0x120000)
        );
        assert_eq!(gpu.driver.as_deref(), Some("amdgpu"));
        assert_eq!(gpu.location.switch, inv.nics[i].location.switch);
    }
    assert_eq!(
        inv.rdma_cm,
        Some(chardev("/dev/infiniband/rdma_cm", 10, 58))
    );

    let nic = &inv.nics[5]; // 0000:a4:00.0, socket 1, the sixth NIC rendered.
    assert_eq!(
        nic.kind,
        FunctionKind::Pf {
            total_vfs: None,
            vfs: vec![]
        }
    );
    assert_eq!((nic.ids.vendor, nic.ids.device), (0x1dd8, 0x1002));
    assert_eq!(
        (nic.ids.subsystem_vendor, nic.ids.subsystem_device),
        (Some(0x1dd8), Some(0x5201))
    );
    assert_eq!(nic.ids.class, 0x020000);
    assert_eq!(nic.product_name.as_deref(), Some("Pollara 400"));
    assert_eq!(nic.driver.as_deref(), Some("ionic"));
    assert_eq!(nic.location.root, "pci0000:a0");
    assert_eq!(
        names(nic.location.bridges.clone()),
        ["0000:a0:01.1", "0000:a1:00.0", "0000:a2:01.0"]
    );
    assert_eq!(nic.location.switch, Some(addr("0000:a1:00.0")));
    assert_eq!(nic.location.numa_node, Some(1));
    assert_eq!(nic.local_cpus.as_deref(), Some("48-95,144-191"));
    assert_eq!(nic.pcie_link.speed_gts.as_deref(), Some("32.0"));
    assert_eq!(nic.pcie_link.width, Some(16));
    assert_eq!(
        nic.netdevs,
        [Netdev {
            name: "enp164s0".into(),
            mac: Some("02:00:00:a4:00:00".into()),
            mtu: Some(9000),
            speed_mbps: Some(400_000),
            operstate: Some("up".into()),
        }]
    );
    let rdma = &nic.rdma[0];
    assert_eq!(rdma.name, "ionic_5");
    assert_eq!(rdma.firmware_version.as_deref(), Some("1.117.1-a-42"));
    assert_eq!(
        rdma.ports,
        [RdmaPort {
            number: 1,
            state: Some("ACTIVE".into()),
            phys_state: Some("LinkUp".into()),
            rate: Some("400 Gb/sec (4X NDR)".into()),
            link_layer: Some("Ethernet".into()),
        }]
    );
    assert_eq!(
        rdma.uverbs,
        Some(chardev("/dev/infiniband/uverbs5", 231, 197))
    );
    assert_eq!(rdma.umad, [chardev("/dev/infiniband/umad5", 231, 5)]);
    assert_eq!(rdma.issm, [chardev("/dev/infiniband/issm5", 231, 69)]);
}

#[test]
fn shared_switch_reports_a_down_nic_as_down() {
    let (_dir, inv) = discover_bundled("shared-switch");
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    let up = inv.nic(addr("0000:05:00.0")).unwrap();
    assert_eq!(up.netdevs[0].mac.as_deref(), Some("04:90:81:00:05:00"));
    assert_eq!(up.rdma[0].name, "rocep5s0");
    let down = inv.nic(addr("0000:81:00.0")).unwrap();
    assert_eq!(down.location.root, "pci0000:80");
    assert_eq!(names(down.location.bridges.clone()), ["0000:80:01.1"]);
    assert_eq!(down.location.switch, None);
    assert_eq!(down.netdevs[0].operstate.as_deref(), Some("down"));
    assert_eq!(down.netdevs[0].speed_mbps, None);
    assert_eq!(down.rdma[0].ports[0].state.as_deref(), Some("DOWN"));
    assert_eq!(
        down.rdma[0].ports[0].phys_state.as_deref(),
        Some("Disabled")
    );
}

#[test]
fn sriov_vfs_are_listed_with_their_parent_and_index() {
    let (_dir, inv) = discover_bundled("sriov-vfs");
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    assert_eq!(
        names(inv.nics.iter().map(|n| n.address)),
        [
            "0000:44:00.0",
            "0000:44:00.1",
            "0000:44:00.2",
            "0000:44:00.3",
            "0000:44:00.4",
            "0000:c1:00.0",
            "0000:c1:00.1",
            "0000:c1:00.2",
            "0000:c2:00.0",
        ]
    );
    let pf = inv.nic(addr("0000:44:00.0")).unwrap();
    let vfs: Vec<_> = (1..=4).map(|f| addr(&format!("0000:44:00.{f}"))).collect();
    assert_eq!(
        pf.kind,
        FunctionKind::Pf {
            total_vfs: Some(8),
            vfs
        }
    );
    let idle = inv.nic(addr("0000:c2:00.0")).unwrap();
    assert_eq!(
        idle.kind,
        FunctionKind::Pf {
            total_vfs: Some(16),
            vfs: vec![]
        }
    );
    let vf = inv.nic(addr("0000:44:00.4")).unwrap();
    assert_eq!(
        vf.kind,
        FunctionKind::Vf {
            physfn: pf.address,
            index: 3
        }
    );
    assert_eq!(vf.ids.device, 0x1003);
    assert_eq!(vf.location, pf.location);
    assert_eq!(vf.netdevs[0].name, "enp68s0v3");
    assert_eq!(vf.rdma[0].name, "ionic_0v3");
    // Render order: PF 44 (uverbs0), its VFs (1-4), PF c1 (5), ...
    assert_eq!(
        vf.rdma[0].uverbs,
        Some(chardev("/dev/infiniband/uverbs4", 231, 196))
    );
    let other = inv.nic(addr("0000:c1:00.2")).unwrap();
    assert_eq!(
        other.kind,
        FunctionKind::Vf {
            physfn: addr("0000:c1:00.0"),
            index: 1
        }
    );
}

#[test]
fn mixed_vendors_allow_list_is_configurable() {
    let (dir, inv) = discover_bundled("mixed-vendors");
    assert!(inv.warnings.is_empty(), "{:?}", inv.warnings);
    assert_eq!(inv.gpus[0].ids.vendor, 0x10de);
    assert_eq!(inv.gpus[0].driver.as_deref(), Some("nvidia"));
    let config = DiscoveryConfig {
        nic_ids: vec![(0x1dd8, 0x1002), (0x15b3, 0x1021)],
        ..DiscoveryConfig::default()
    };
    let inv = discover(dir.path(), &config).unwrap();
    assert_eq!(
        names(inv.nics.iter().map(|n| n.address)),
        ["0000:04:00.0", "0000:05:00.0"]
    );
    let cx7 = &inv.nics[0];
    assert_eq!(cx7.product_name, None);
    assert_eq!(cx7.rdma[0].name, "mlx5_0");
    assert_eq!(
        cx7.rdma[0].uverbs,
        Some(chardev("/dev/infiniband/uverbs0", 231, 192))
    );
    assert_eq!(
        inv.affinity(addr("0000:03:00.0"), cx7.address)
            .unwrap()
            .as_str(),
        "PIX"
    );
    let no_gpus = DiscoveryConfig {
        gpu_vendors: vec![],
        ..DiscoveryConfig::default()
    };
    let inv = discover(dir.path(), &no_gpus).unwrap();
    assert!(inv.gpus.is_empty() && inv.links.is_empty());
}

#[test]
fn nested_switch_nics_report_their_nearest_switch() {
    let (_dir, inv) = discover_bundled("nested-switches");
    let switch = |a: &str| {
        inv.nic(addr(a))
            .unwrap()
            .location
            .switch
            .map(|s| s.to_string())
    };
    assert_eq!(switch("0000:06:00.0").as_deref(), Some("0000:03:00.0"));
    assert_eq!(switch("0000:0a:00.0").as_deref(), Some("0000:07:00.0"));
    assert_eq!(switch("0000:0b:00.0").as_deref(), Some("0000:01:00.0"));
    assert_eq!(switch("0000:0c:00.0"), None);
}
