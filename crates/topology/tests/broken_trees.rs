//! Bad trees: warnings and partial inventories, never a panic, never a
//! read outside the root, and an error only when the root is unusable.

mod common;

use std::fs;
use std::path::Path;
use std::sync::OnceLock;

use common::{addr, discover_bundled, names, render};
use proptest::prelude::*;
use topology::sysfs::{MemBackend, Sysfs};
use topology::{DiscoveryConfig, FunctionKind, discover, discover_in};

#[test]
fn broken_fixture_gives_a_partial_inventory_and_one_warning_per_defect() {
    let (_dir, inv) = discover_bundled("broken");
    assert_eq!(
        names(inv.nics.iter().map(|n| n.address)),
        [
            "0000:04:00.0",
            "0000:04:00.1",
            "0000:05:00.0",
            "0000:06:00.0",
            "0000:81:00.0"
        ]
    );
    assert_eq!(names(inv.gpus.iter().map(|g| g.address)), ["0000:03:00.0"]);

    let no_numa = inv.nic(addr("0000:04:00.0")).unwrap();
    assert_eq!(no_numa.location.numa_node, None);
    // The dangling virtfn1 costs that VF only.
    assert_eq!(
        no_numa.kind,
        FunctionKind::Pf {
            total_vfs: Some(4),
            vfs: vec![addr("0000:04:00.1")]
        }
    );
    let garbage = inv.nic(addr("0000:05:00.0")).unwrap();
    assert_eq!(garbage.pcie_link.speed_gts, None);
    assert_eq!(garbage.pcie_link.width, Some(16));
    assert_eq!(garbage.netdevs[0].mtu, None);
    assert_eq!(garbage.netdevs[0].operstate.as_deref(), Some("up"));
    let unbound = inv.nic(addr("0000:06:00.0")).unwrap();
    assert_eq!(unbound.driver, None);
    assert!(unbound.netdevs.is_empty() && unbound.rdma.is_empty());
    let unknown_numa = inv.nic(addr("0000:81:00.0")).unwrap();
    assert_eq!(unknown_numa.location.numa_node, None);
    assert_eq!(unknown_numa.local_cpus.as_deref(), Some("0-31"));

    let expected = [
        ("0000:04:00.0", "cannot read numa_node: missing"),
        ("0000:04:00.0", "cannot resolve virtfn1 link"),
        ("0000:05:00.0", "invalid current_link_speed \"fast\""),
        ("0000:05:00.0", "invalid net/enp5s0/mtu \"jumbo\""),
        ("0000:07:00.0", "invalid vendor \"0xzz\""),
        ("0000:97:00.0", "leads out of the sysfs root"),
        ("0000:98:00.0", "(a loop)"),
        ("0000:99:00.0", "does not exist"),
    ];
    for (device, text) in expected {
        assert!(
            inv.warnings
                .iter()
                .any(|w| w.starts_with(device) && w.contains(text)),
            "no warning {device}: …{text}… in {:#?}",
            inv.warnings
        );
    }
    assert_eq!(inv.warnings.len(), expected.len(), "{:#?}", inv.warnings);
}

#[test]
fn a_root_without_pci_devices_is_an_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let err = discover(&missing, &DiscoveryConfig::default()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&missing.join("bus/pci/devices").display().to_string()),
        "{text}"
    );

    // bus/pci/devices itself pointing out of the root is refused too.
    fs::create_dir_all(dir.path().join("bus/pci")).unwrap();
    std::os::unix::fs::symlink("../../..", dir.path().join("bus/pci/devices")).unwrap();
    assert!(discover(dir.path(), &DiscoveryConfig::default()).is_err());
}

#[test]
fn non_utf8_files_cost_only_their_attribute() {
    let dir = render("shared-switch");
    let nic = dir.path().join("bus/pci/devices/0000:05:00.0");
    fs::write(nic.join("numa_node"), [0xff, 0xfe, b'\n']).unwrap();
    fs::write(
        dir.path().join("bus/pci/devices/0000:03:00.0/class"),
        [0x80],
    )
    .unwrap();
    let inv = discover(dir.path(), &DiscoveryConfig::default()).unwrap();
    assert_eq!(names(inv.gpus.iter().map(|g| g.address)), ["0000:04:00.0"]);
    assert_eq!(
        inv.nic(addr("0000:05:00.0")).unwrap().location.numa_node,
        None
    );
    assert_eq!(inv.warnings.len(), 2, "{:#?}", inv.warnings);
}

#[test]
fn attribute_links_out_of_the_root_are_not_followed() {
    let dir = render("shared-switch");
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("numa"), "0\n").unwrap();
    let nic = dir.path().join("bus/pci/devices/0000:05:00.0");
    let numa = nic.join("numa_node");
    fs::remove_file(&numa).unwrap();
    std::os::unix::fs::symlink(outside.path().join("numa"), &numa).unwrap();
    let inv = discover(dir.path(), &DiscoveryConfig::default()).unwrap();
    assert_eq!(
        inv.nic(addr("0000:05:00.0")).unwrap().location.numa_node,
        None
    );
    assert_eq!(inv.warnings.len(), 1, "{:#?}", inv.warnings);
    assert!(
        inv.warnings[0].contains("leads out of the sysfs root"),
        "{:#?}",
        inv.warnings
    );

    // A link that stays inside the root is followed.
    fs::remove_file(&numa).unwrap();
    std::os::unix::fs::symlink("../../0000:02:01.0/0000:04:00.0/numa_node", &numa).unwrap();
    let inv = discover(dir.path(), &DiscoveryConfig::default()).unwrap();
    assert!(inv.warnings.is_empty(), "{:#?}", inv.warnings);
    assert_eq!(
        inv.nic(addr("0000:05:00.0")).unwrap().location.numa_node,
        Some(0)
    );
}

/// Copies a rendered tree into memory, links kept as links.
fn load(root: &Path, rel: &str, mut tree: MemBackend, files: &mut Vec<String>) -> MemBackend {
    for entry in fs::read_dir(root.join(rel)).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let path = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            let target = fs::read_link(entry.path()).unwrap();
            tree = tree.link(&path, target.to_str().unwrap());
        } else if kind.is_dir() {
            tree = load(root, &path, tree.dir(&path), files);
        } else {
            tree = tree.file(&path, &fs::read_to_string(entry.path()).unwrap());
            files.push(path);
        }
    }
    tree
}

/// The `sriov-vfs` tree in memory and its regular files, rendered once.
fn sriov_tree() -> &'static (MemBackend, Vec<String>) {
    static TREE: OnceLock<(MemBackend, Vec<String>)> = OnceLock::new();
    TREE.get_or_init(|| {
        let dir = render("sriov-vfs");
        let mut files = Vec::new();
        let tree = load(dir.path(), "", MemBackend::new(), &mut files);
        (tree, files)
    })
}

/// Content that looks almost like sysfs values, or anything at all.
fn garbage() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9a-fx:. \\-A-Z/]{0,16}\n?",
        any::<String>(),
        Just(String::new()),
        Just("-1\n".to_string()),
        Just("4294967296\n".to_string()),
    ]
}

/// A link target that may dangle, loop, climb out or point anywhere.
fn target() -> impl Strategy<Value = String> {
    "(\\.\\./){0,8}[a-z0-9:./]{0,12}"
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn garbage_files_and_links_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), garbage(), any::<bool>(), target()), 1..8)
    ) {
        let (tree, files) = sriov_tree();
        let mut tree = tree.clone();
        for (index, content, as_link, target) in &edits {
            let path = index.get(files);
            tree = if *as_link { tree.link(path, target) } else { tree.file(path, content) };
        }
        let inv = discover_in(&Sysfs::new(tree), &DiscoveryConfig::default()).unwrap();
        prop_assert_eq!(inv.links.len(), inv.gpus.len() * inv.nics.len());
        prop_assert!(inv.nics.windows(2).all(|w| w[0].address < w[1].address));
    }
}
