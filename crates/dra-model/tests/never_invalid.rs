//! Whatever the inventory, gates and options, the builder never emits a
//! pool the API server would reject (property test).

use std::collections::BTreeMap;

use dra_model::fabric::FabricSources;
use dra_model::validate::check_pool_for;
use dra_model::{
    FeatureGate, FeatureGates, ModelConfig, ModelOptions, PfWithVfs, Release, build_slices, sample,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Case {
    pfs: usize,
    vfs: usize,
    gates: [bool; 3],
    /// Kubernetes 1.34 (counters beside devices) or 1.37.
    oldest: bool,
    policy: u8,
    shared_all: bool,
    product: String,
    firmware: String,
    leaf_label: String,
    down: Vec<bool>,
    numa_unknown: bool,
}

fn case() -> impl Strategy<Value = Case> {
    (
        0usize..9,
        prop_oneof![Just(0usize), 1usize..8, Just(256usize)],
        any::<[bool; 3]>(),
        0u8..3,
        any::<bool>(),
        "\\PC{0,90}",
        "[ -~]{0,90}",
        "[a-z0-9.-]{0,63}",
        proptest::collection::vec(any::<bool>(), 9),
        (any::<bool>(), any::<bool>()),
    )
        .prop_map(
            |(
                pfs,
                vfs,
                gates,
                policy,
                shared_all,
                product,
                firmware,
                leaf_label,
                down,
                (numa_unknown, oldest),
            )| Case {
                pfs,
                vfs,
                gates,
                oldest,
                policy,
                shared_all,
                product,
                firmware,
                leaf_label,
                down,
                numa_unknown,
            },
        )
}

fn inventory(c: &Case) -> topology::Inventory {
    let mut inv = sample::inventory(c.pfs, c.vfs);
    for nic in &mut inv.nics {
        nic.product_name = Some(c.product.clone());
        if c.numa_unknown {
            nic.location.numa_node = None;
        }
        for r in &mut nic.rdma {
            r.firmware_version = Some(c.firmware.clone());
        }
    }
    for (i, down) in c.down.iter().enumerate().take(c.pfs) {
        if *down {
            let addr = sample::pf_address(i);
            let pf = inv.nics.iter_mut().find(|n| n.address == addr).unwrap();
            pf.netdevs[0].operstate = Some("down".into());
        }
    }
    inv
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn pools_always_validate(c in case()) {
        let mut o = ModelOptions::new("node-a");
        let gates = [FeatureGate::DraConsumableCapacity, FeatureGate::DraPartitionableDevices, FeatureGate::DraDeviceTaints];
        let release = if c.oldest { Release::OLDEST } else { Release::NEWEST };
        o.gates = gates.iter().zip(c.gates).fold(FeatureGates::for_release(release), |g, (gate, on)| g.with(*gate, on));
        o.pf_with_vfs = [PfWithVfs::Auto, PfWithVfs::VfsOnly, PfWithVfs::PfOnly][c.policy as usize];
        if c.shared_all {
            o.shared_pfs = vec!["*".into()];
        }
        o.vf_queue_pairs = Some(64);
        o.gpu_pairing_attribute = Some("gpu.amd.com/pciAddr".into());
        let labels = BTreeMap::from([("ainic.amd.com/leaf-switch".to_string(), c.leaf_label.clone())]);
        o.fabric = FabricSources { node_labels: labels, ..FabricSources::default() };
        let inv = inventory(&c);
        let set = build_slices(&inv, &ModelConfig::new(o).unwrap());
        let violations = check_pool_for(&set.slices, release);
        prop_assert!(violations.is_empty(), "{:#?}", violations);
        let published = set.devices().count();
        prop_assert!(c.pfs == 0 || published > 0);
    }
}
