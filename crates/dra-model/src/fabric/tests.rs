//! Precedence and conflicts of fabric sources.

use super::*;
use crate::sample;

const NODE: &str = "node-a";
const DRIVER: &str = "ainic.amd.com";

fn addr(i: usize) -> PciAddress {
    sample::pf_address(i)
}

#[test]
fn defaults_are_ordinal_rail_and_default_fabric() {
    let inv = sample::inventory(3, 2);
    let r = resolve(&inv, &FabricSources::default(), NODE, DRIVER);
    for i in 0..3 {
        let f = &r.facts[&addr(i)];
        assert_eq!(f.rail, i as u32);
        assert_eq!(f.fabric, DEFAULT_FABRIC);
        assert_eq!(f.leaf_switch, None);
    }
    // VFs take their PF's facts.
    assert_eq!(r.facts[&sample::vf_address(2, 1)].rail, 2);
    assert!(r.conflicts.is_empty());
}

#[test]
fn file_beats_labels_beats_lldp_and_conflicts_are_recorded() {
    let inv = sample::inventory(2, 0);
    let file = FabricFile::parse(
        "defaults: {fabric: pod}\nnodes:\n  node-a:\n    nics:\n      \"0000:10:00.0\": {rail: 7, leafSwitch: leaf-file}\n",
        "fabric.yaml",
    )
    .unwrap();
    let lldp = LldpNeighbors::parse(
        r#"{"lldp":[{"interface":[
            {"name":"enp16s0","chassis":[{"name":[{"value":"leaf-lldp-0"}]}]},
            {"name":"enp32s0","chassis":[{"name":[{"value":"leaf-lldp-1"}]}]}]}]}"#,
        "lldp.json",
    )
    .unwrap();
    let labels = BTreeMap::from([
        (
            "ainic.amd.com/fabric".to_string(),
            "pod-from-label".to_string(),
        ),
        ("ainic.amd.com/rail.enp32s0".to_string(), "5".to_string()),
    ]);
    let sources = FabricSources {
        file: Some(file),
        node_labels: labels,
        lldp: Some(lldp),
    };
    let r = resolve(&inv, &sources, NODE, DRIVER);
    let pf0 = &r.facts[&addr(0)];
    assert_eq!(
        (pf0.rail, pf0.fabric.as_str(), pf0.leaf_switch.as_deref()),
        (7, "pod", Some("leaf-file"))
    );
    let pf1 = &r.facts[&addr(1)];
    assert_eq!(
        (pf1.rail, pf1.fabric.as_str(), pf1.leaf_switch.as_deref()),
        (5, "pod", Some("leaf-lldp-1"))
    );
    let text = r.conflicts.join("\n");
    assert!(
        text.contains("leaf-file") && text.contains("leaf-lldp-0"),
        "{text}"
    );
    assert!(text.contains("pod-from-label"), "{text}");
}

#[test]
fn other_nodes_entries_do_not_apply() {
    let inv = sample::inventory(1, 0);
    let file = FabricFile::parse("nodes:\n  node-b:\n    fabric: elsewhere\n", "f.yaml").unwrap();
    let sources = FabricSources {
        file: Some(file),
        ..FabricSources::default()
    };
    let r = resolve(&inv, &sources, NODE, DRIVER);
    assert_eq!(r.facts[&addr(0)].fabric, DEFAULT_FABRIC);
}

#[test]
fn nics_are_found_by_interface_name_and_bad_label_rails_are_reported() {
    let inv = sample::inventory(2, 0);
    let file = FabricFile::parse(
        "nodes:\n  node-a:\n    nics:\n      enp32s0: {rail: 9}\n",
        "f.yaml",
    )
    .unwrap();
    let labels = BTreeMap::from([("ainic.amd.com/rail.enp16s0".to_string(), "x".to_string())]);
    let sources = FabricSources {
        file: Some(file),
        node_labels: labels,
        lldp: None,
    };
    let r = resolve(&inv, &sources, NODE, DRIVER);
    assert_eq!(r.facts[&addr(1)].rail, 9);
    assert_eq!(r.facts[&addr(0)].rail, 0, "bad label ignored, ordinal kept");
    assert!(r.conflicts.iter().any(|c| c.contains("not a number")));
}

#[test]
fn tenant_comes_from_nic_then_node_then_label_and_vfs_inherit_it() {
    let inv = sample::inventory(3, 1);
    let file = FabricFile::parse(
        "nodes:\n  node-a:\n    tenant: team-a\n    nics:\n      \"0000:20:00.0\": {tenant: team-b}\n",
        "fabric.yaml",
    )
    .unwrap();
    let labels = BTreeMap::from([("ainic.amd.com/tenant".to_string(), "team-c".to_string())]);
    let sources = FabricSources {
        file: Some(file),
        node_labels: labels.clone(),
        lldp: None,
    };
    let r = resolve(&inv, &sources, NODE, DRIVER);
    let tenant = |a: PciAddress| r.facts[&a].tenant.clone();
    assert_eq!(tenant(addr(0)).as_deref(), Some("team-a"));
    assert_eq!(tenant(addr(1)).as_deref(), Some("team-b"));
    assert_eq!(tenant(sample::vf_address(1, 0)).as_deref(), Some("team-b"));
    assert!(
        r.conflicts
            .iter()
            .any(|c| c.contains("tenant \"team-b\"") && c.contains("\"team-c\" from node label")),
        "{:?}",
        r.conflicts
    );
    // Without the file the node label fences every NIC; without either, none.
    let only_label = FabricSources {
        node_labels: labels,
        ..FabricSources::default()
    };
    let r = resolve(&inv, &only_label, NODE, DRIVER);
    assert_eq!(r.facts[&addr(2)].tenant.as_deref(), Some("team-c"));
    let r = resolve(&inv, &FabricSources::default(), NODE, DRIVER);
    assert_eq!(r.facts[&addr(2)].tenant, None);
}
