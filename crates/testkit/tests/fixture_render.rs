//! The fixture renderer: every bundled YAML renders, and the tree is laid
//! out like Linux's sysfs (real directories, relative symlinks).

use std::fs;
use std::path::Path;

use testkit::fixture::{FixtureError, Topology, bundled, bundled_by_name, sriov_node};

fn render(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let yaml = bundled_by_name(name).unwrap();
    Topology::from_yaml(yaml)
        .unwrap()
        .render(dir.path())
        .unwrap();
    dir
}

fn link(root: &Path, rel: &str) -> String {
    fs::read_link(root.join(rel))
        .unwrap()
        .to_str()
        .unwrap()
        .to_string()
}

#[test]
fn every_bundled_fixture_parses_renders_and_is_named_after_itself() {
    assert!(bundled().len() >= 7);
    for (name, yaml) in bundled() {
        let topology = Topology::from_yaml(yaml).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&topology.name, name);
        let dir = tempfile::tempdir().unwrap();
        topology
            .render(dir.path())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert_eq!(bundled()[0].0, "mi300x-8gpu-8nic");
    assert!(bundled_by_name("no-such-node").is_none());
}

#[test]
fn devices_nest_under_the_host_bridge_and_links_are_relative() {
    let dir = render("shared-switch");
    let root = dir.path();
    let nic = "devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:02.0/0000:05:00.0";
    assert!(root.join(nic).is_dir());
    assert_eq!(
        fs::read_to_string(root.join(nic).join("vendor")).unwrap(),
        "0x1dd8\n"
    );
    assert_eq!(
        link(root, "bus/pci/devices/0000:05:00.0"),
        format!("../../../{nic}")
    );
    assert_eq!(
        link(root, &format!("{nic}/driver")),
        "../../../../../../bus/pci/drivers/ionic"
    );
    assert_eq!(
        link(root, "class/net/enp5s0"),
        format!("../../{nic}/net/enp5s0")
    );
    assert_eq!(
        link(root, "class/infiniband/rocep5s0"),
        format!("../../{nic}/infiniband/rocep5s0")
    );
    assert_eq!(
        link(root, "class/infiniband_verbs/uverbs0"),
        format!("../../{nic}/infiniband_verbs/uverbs0")
    );
    assert_eq!(
        link(root, &format!("{nic}/infiniband_verbs/uverbs0/device")),
        "../.."
    );
    assert_eq!(
        fs::read_to_string(root.join("class/infiniband_verbs/uverbs0/dev")).unwrap(),
        "231:192\n"
    );
    assert_eq!(
        fs::read_to_string(root.join("class/infiniband_mad/issm1/dev")).unwrap(),
        "231:65\n"
    );
    assert_eq!(
        fs::read_to_string(root.join("class/misc/rdma_cm/dev")).unwrap(),
        "10:58\n"
    );
}

#[test]
fn vfs_are_siblings_of_their_pf_with_virtfn_and_physfn_links() {
    let dir = render("sriov-vfs");
    let root = dir.path();
    let parent = "devices/pci0000:40/0000:40:01.1/0000:41:00.0/0000:42:01.0";
    assert_eq!(
        link(root, &format!("{parent}/0000:44:00.0/virtfn3")),
        "../0000:44:00.4"
    );
    assert_eq!(
        link(root, &format!("{parent}/0000:44:00.4/physfn")),
        "../0000:44:00.0"
    );
    assert_eq!(
        fs::read_to_string(root.join(parent).join("0000:44:00.4/device")).unwrap(),
        "0x1003\n"
    );
    assert_eq!(
        fs::read_to_string(root.join(parent).join("0000:44:00.0/sriov_numvfs")).unwrap(),
        "4\n"
    );
    assert!(
        root.join(parent)
            .join("0000:44:00.4/net/enp68s0v3")
            .is_dir()
    );
}

#[test]
fn breakage_is_applied() {
    let dir = render("broken");
    let root = dir.path();
    assert_eq!(link(root, "bus/pci/devices/0000:98:00.0"), "0000:98:00.0");
    assert!(!root.join("bus/pci/devices/0000:99:00.0").exists());
    assert!(link(root, "bus/pci/devices/0000:97:00.0").ends_with("../../../../etc"));
    let nic = root.join("bus/pci/devices/0000:04:00.0");
    assert!(!nic.join("numa_node").exists());
}

#[test]
fn invalid_fixtures_are_refused_with_the_reason() {
    let twice = r#"
name: twice
hostBridges:
  - root: pci0000:00
    devices:
      - {bdf: "0000:00:01.0", model: mi300x}
      - {bdf: "0000:00:01.0", model: mi300x}
"#;
    let err = Topology::from_yaml(twice).unwrap_err();
    assert!(matches!(err, FixtureError::Invalid { .. }), "{err}");
    assert!(
        err.to_string().contains("0000:00:01.0 is used twice"),
        "{err}"
    );
    // IDs are always hex, as lspci prints them, quoted or not.
    let plain_id = r#"
name: x
hostBridges:
  - root: pci0000:00
    devices: [{bdf: "0000:00:01.0", vendor: 1002, device: 74a1, class: "0x120000"}]
"#;
    let topology = Topology::from_yaml(plain_id).unwrap();
    let device = &topology.host_bridges[0].devices[0];
    assert_eq!(device.vendor.map(|h| h.0), Some(0x1002));
    assert_eq!(device.device.map(|h| h.0), Some(0x74a1));
    let not_hex = "name: x\nhostBridges: [{root: pci0000:00, devices: [{bdf: \"0000:00:01.0\", vendor: xyz, device: \"1\", class: \"1\"}]}]\n";
    let err = Topology::from_yaml(not_hex).unwrap_err();
    assert!(
        err.to_string().contains("invalid hex number \"xyz\""),
        "{err}"
    );
    let no_identity =
        "name: x\nhostBridges: [{root: pci0000:00, devices: [{bdf: \"0000:00:01.0\"}]}]\n";
    assert!(Topology::from_yaml(no_identity).is_err());
    let bad_root = "name: x\nhostBridges: [{root: pcibus0}]\n";
    assert!(Topology::from_yaml(bad_root).is_err());
}

#[test]
fn the_sriov_builder_places_one_pf_per_host_bridge() {
    // The benchmark uses (8, 256); VF placement across buses is unit-tested.
    let topology = sriov_node(8, 3);
    let dir = tempfile::tempdir().unwrap();
    topology.render(dir.path()).unwrap();
    let functions = fs::read_dir(dir.path().join("bus/pci/devices"))
        .unwrap()
        .count();
    // Per host bridge: root port, switch up + 2 down ports, GPU, PF, 3 VFs.
    assert_eq!(functions, 8 * (1 + 3 + 1 + 1 + 3));
    let last_vf = dir.path().join("bus/pci/devices/0000:e4:00.3");
    assert_eq!(
        fs::read_to_string(last_vf.join("device")).unwrap(),
        "0x1003\n"
    );
    assert_eq!(
        fs::read_to_string(last_vf.join("numa_node")).unwrap(),
        "1\n"
    );
}
