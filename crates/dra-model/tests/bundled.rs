//! Slices for every bundled topology, under every gate combination and
//! policy, pass the validator, and carry the standard attributes upstream
//! defines with the values discovery found.

use dra_model::names::{self, ATTR_NUMA_NODE_STD, ATTR_PCI_BUS_ID, ATTR_PCIE_ROOT};
use dra_model::validate::check_pool_for;
use dra_model::{
    FeatureGate, FeatureGates, ModelConfig, ModelOptions, PfWithVfs, Release, build_slices,
};
use testkit::fixture::{Topology, bundled};
use topology::{DiscoveryConfig, Inventory, discover};

fn inventories() -> Vec<(&'static str, Inventory)> {
    bundled()
        .iter()
        .map(|(name, yaml)| {
            let dir = tempfile::tempdir().unwrap();
            Topology::from_yaml(yaml)
                .unwrap()
                .render(dir.path())
                .unwrap();
            let inv = discover(dir.path(), &DiscoveryConfig::default()).unwrap();
            (*name, inv)
        })
        .collect()
}

/// Every gate combination, for 1.34 (counters beside devices) and 1.37
/// (counters in slices of their own).
fn gate_sets() -> Vec<FeatureGates> {
    let gates = [
        FeatureGate::DraConsumableCapacity,
        FeatureGate::DraPartitionableDevices,
        FeatureGate::DraDeviceTaints,
    ];
    let releases = [Release::OLDEST, Release::NEWEST];
    (0..16u8)
        .map(|mask| {
            let base = FeatureGates::for_release(releases[usize::from(mask >> 3)]);
            gates
                .iter()
                .enumerate()
                .fold(base, |g, (i, gate)| g.with(*gate, mask & (1 << i) != 0))
        })
        .collect()
}

#[test]
fn every_bundled_topology_yields_valid_slices_under_every_gate_and_policy() {
    let inventories = inventories();
    assert!(inventories.len() >= 5, "bundled topologies missing");
    for (name, inv) in &inventories {
        assert!(!inv.nics.is_empty(), "{name}: no NICs discovered");
        for gates in gate_sets() {
            for policy in [PfWithVfs::Auto, PfWithVfs::VfsOnly, PfWithVfs::PfOnly] {
                for shared in [vec![], vec!["*".to_string()]] {
                    let mut o = ModelOptions::new("node-a");
                    o.gates = gates.clone();
                    o.pf_with_vfs = policy;
                    o.shared_pfs = shared;
                    o.gpu_pairing_attribute = Some("gpu.amd.com/pciAddr".into());
                    o.pf_queue_pairs = Some(4096);
                    let set = build_slices(inv, &ModelConfig::new(o).unwrap());
                    let v = check_pool_for(&set.slices, gates.release());
                    assert!(
                        v.is_empty(),
                        "{name} [{} {}] {policy:?}: {v:#?}",
                        gates.release(),
                        gates.to_flag()
                    );
                    assert!(set.devices().count() > 0, "{name}: nothing published");
                }
            }
        }
    }
}

#[test]
fn standard_attributes_match_discovery() {
    for (name, inv) in inventories() {
        let set = build_slices(&inv, &ModelConfig::for_node("node-a").unwrap());
        for d in set.devices() {
            let attrs = d.attributes.as_ref().unwrap();
            let bdf = attrs[ATTR_PCI_BUS_ID].string.clone().unwrap();
            let nic = inv
                .nic(bdf.parse().unwrap())
                .unwrap_or_else(|| panic!("{name}: {bdf} not in the inventory"));
            assert_eq!(
                d.name,
                names::device_name(nic),
                "{name}: name follows the address"
            );
            assert_eq!(
                attrs[ATTR_PCIE_ROOT].string.as_deref(),
                Some(nic.location.root.as_str())
            );
            assert!(
                nic.location.root.starts_with("pci"),
                "{name}: pcieRoot {}",
                nic.location.root
            );
            let numa = attrs.get(ATTR_NUMA_NODE_STD).and_then(|a| a.int);
            assert_eq!(
                numa,
                nic.location.numa_node.map(i64::from),
                "{name}: {bdf} numaNode"
            );
        }
    }
}
