//! The cheap rescan: it sees every change of a fact it re-reads, exactly
//! when a full discovery would see one, and nothing when nothing moved.

mod common;

use std::path::Path;

use common::render;
use topology::{DiscoveryConfig, Inventory, NicFunction, Recheck, discover, recheck};

fn discovered(root: &Path) -> Inventory {
    discover(root, &DiscoveryConfig::default()).unwrap()
}

/// The files the recheck reads for `pf`, each with a value unlike any the
/// fixtures hold, relative to the root.
fn unannounced_files(pf: &NicFunction) -> Vec<(String, &'static str)> {
    let dir = format!("bus/pci/devices/{}", pf.address);
    let mut files = vec![
        (format!("{dir}/current_link_speed"), "2.5 GT/s PCIe\n"),
        (format!("{dir}/current_link_width"), "1\n"),
        (format!("{dir}/numa_node"), "7\n"),
        (format!("{dir}/local_cpulist"), "200-201\n"),
    ];
    for n in &pf.netdevs {
        let at = |f: &str| format!("{dir}/net/{}/{f}", n.name);
        files.push((at("operstate"), "dormant\n"));
        files.push((at("mtu"), "1280\n"));
        files.push((at("speed"), "10\n"));
        files.push((at("address"), "02:00:00:00:00:42\n"));
    }
    for d in &pf.rdma {
        files.push((format!("{dir}/infiniband/{}/fw_ver", d.name), "0.0.1\n"));
        for p in &d.ports {
            let at = |f: &str| format!("{dir}/infiniband/{}/ports/{}/{f}", d.name, p.number);
            files.push((at("state"), "2: INIT\n"));
            files.push((at("phys_state"), "3: Disabled\n"));
            files.push((at("rate"), "1 Gb/sec (1X SDR)\n"));
            files.push((at("link_layer"), "Unknown\n"));
        }
    }
    files
}

fn pfs(inventory: &Inventory) -> Vec<NicFunction> {
    inventory
        .nics
        .iter()
        .filter(|n| n.is_pf())
        .cloned()
        .collect()
}

#[test]
fn nothing_changed_reads_unchanged() {
    for name in ["mi300x-8gpu-8nic", "sriov-vfs", "broken"] {
        let dir = render(name);
        let held = discovered(dir.path());
        assert_eq!(recheck(dir.path(), &held), Recheck::Unchanged, "{name}");
    }
}

#[test]
fn each_fact_it_reads_is_seen_changed_when_discovery_sees_it_changed() {
    for name in ["mi300x-8gpu-8nic", "sriov-vfs"] {
        let dir = render(name);
        let held = discovered(dir.path());
        let pfs = pfs(&held);
        assert!(!pfs.is_empty(), "{name}");
        let mut checked = 0;
        for pf in &pfs {
            for (file, value) in unannounced_files(pf) {
                let path = dir.path().join(&file);
                let before = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{name}: {file} is in the fixture: {e}"));
                std::fs::write(&path, value).unwrap();
                assert_ne!(discovered(dir.path()), held, "{name}: {file} matters");
                match recheck(dir.path(), &held) {
                    Recheck::Changed { function, .. } => {
                        assert_eq!(function, pf.address, "{name}: {file}")
                    }
                    Recheck::Unchanged => panic!("{name}: {file} changed unseen"),
                }
                std::fs::write(&path, before).unwrap();
                assert_eq!(recheck(dir.path(), &held), Recheck::Unchanged, "{file}");
                checked += 1;
            }
        }
        assert!(checked >= pfs.len() * 9, "{name}: {checked} files");
    }
}

#[test]
fn a_vanished_file_is_a_change_and_garbage_that_stays_garbage_is_not() {
    let dir = render("mi300x-8gpu-8nic");
    let held = discovered(dir.path());
    let pf = &pfs(&held)[0];
    let rdma = &pf.rdma[0];
    let fw = format!(
        "bus/pci/devices/{}/infiniband/{}/fw_ver",
        pf.address, rdma.name
    );
    assert!(rdma.firmware_version.is_some());
    std::fs::remove_file(dir.path().join(&fw)).unwrap();
    assert_eq!(
        recheck(dir.path(), &held),
        Recheck::Changed {
            function: pf.address,
            what: format!("firmware of {}", rdma.name)
        }
    );

    // A garbage width is held as unknown (with discovery's warning); read
    // again it is still unknown, so the rescan stays cheap.
    let width = dir
        .path()
        .join(format!("bus/pci/devices/{}/current_link_width", pf.address));
    std::fs::write(width, "sixteen\n").unwrap();
    let held = discovered(dir.path());
    assert!(
        held.warnings
            .iter()
            .any(|w| w.contains("current_link_width"))
    );
    assert_eq!(recheck(dir.path(), &held), Recheck::Unchanged);
}

#[test]
fn a_renamed_netdev_is_a_change() {
    let dir = render("mi300x-8gpu-8nic");
    let held = discovered(dir.path());
    let pf = &pfs(&held)[0];
    let mut renamed = held.clone();
    let at = renamed.nics.iter().position(|n| n.address == pf.address);
    renamed.nics[at.unwrap()].netdevs[0].name = "gone0".into();
    assert_eq!(
        recheck(dir.path(), &renamed),
        Recheck::Changed {
            function: pf.address,
            what: "netdev gone0".into()
        }
    );
}

/// The documented limit: a VF's own files are left to the events and to
/// the periodic full rediscovery.
#[test]
fn a_vfs_port_is_not_read() {
    let dir = render("sriov-vfs");
    let held = discovered(dir.path());
    let vf = held
        .nics
        .iter()
        .find(|n| !n.is_pf() && !n.rdma.is_empty())
        .expect("a VF with an RDMA device");
    let rdma = &vf.rdma[0];
    let state = format!(
        "bus/pci/devices/{}/infiniband/{}/ports/{}/state",
        vf.address, rdma.name, rdma.ports[0].number
    );
    std::fs::write(dir.path().join(state), "1: DOWN\n").unwrap();
    assert_ne!(discovered(dir.path()), held);
    assert_eq!(recheck(dir.path(), &held), Recheck::Unchanged);
}
