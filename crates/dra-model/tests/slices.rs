//! The slices built from hand-made inventories: what each gate and policy
//! changes, and that every result passes the validator.

use dra_model::names::{self, attr};
use dra_model::validate::{
    MAX_DEVICES, MAX_DEVICES_WITH_TAINTS_OR_COUNTERS, check_pool, check_pool_for,
};
use dra_model::{
    FeatureGate, FeatureGates, ModelConfig, ModelOptions, PfWithVfs, Release, SliceSet,
    build_slices, sample,
};
use k8s_openapi::api::resource::v1::{Device, DeviceAttribute};

fn build(inv: &topology::Inventory, tweak: impl FnOnce(&mut ModelOptions)) -> SliceSet {
    let mut o = ModelOptions::new("node-a");
    tweak(&mut o);
    let release = o.gates.release();
    let set = build_slices(inv, &ModelConfig::new(o).unwrap());
    let violations = check_pool_for(&set.slices, release);
    assert!(violations.is_empty(), "{violations:#?}");
    set
}

/// 1.37's layout (counters in slices of their own) with every gate on.
fn all_gates() -> FeatureGates {
    FeatureGates::for_release(Release::NEWEST)
        .with(FeatureGate::DraConsumableCapacity, true)
        .with(FeatureGate::DraPartitionableDevices, true)
        .with(FeatureGate::DraDeviceTaints, true)
}

fn a<'d>(d: &'d Device, key: &str) -> Option<&'d DeviceAttribute> {
    d.attributes.as_ref().unwrap().get(key)
}

fn own(d: &Device, id: &str) -> Option<DeviceAttribute> {
    a(d, &names::qualified("ainic.amd.com", id)).cloned()
}

fn names_of(set: &SliceSet) -> Vec<String> {
    set.devices().map(|d| d.name.clone()).collect()
}

#[test]
fn pf_carries_standard_and_driver_attributes() {
    let set = build(&sample::inventory(2, 0), |_| {});
    assert_eq!(names_of(&set), ["pf-0000-10-00-0", "pf-0000-20-00-0"]);
    let d = set.device("pf-0000-20-00-0").unwrap();
    assert_eq!(
        a(d, "resource.kubernetes.io/pcieRoot")
            .unwrap()
            .string
            .as_deref(),
        Some("pci0000:00")
    );
    assert_eq!(
        a(d, "resource.kubernetes.io/pciBusID")
            .unwrap()
            .string
            .as_deref(),
        Some("0000:20:00.0")
    );
    assert_eq!(
        a(d, "resource.kubernetes.io/numaNode").unwrap().int,
        Some(0)
    );
    assert_eq!(own(d, attr::TYPE).unwrap().string.as_deref(), Some("pf"));
    assert_eq!(
        own(d, attr::PCI_VENDOR_ID).unwrap().string.as_deref(),
        Some("1dd8")
    );
    assert_eq!(
        own(d, attr::NEAREST_GPU).unwrap().string.as_deref(),
        Some("0000:28:00.0")
    );
    assert_eq!(
        own(d, attr::GPU_AFFINITY).unwrap().string.as_deref(),
        Some("PIX")
    );
    assert_eq!(
        own(d, attr::PCIE_SWITCH).unwrap().string.as_deref(),
        Some("0000:1f:00.0")
    );
    assert_eq!(own(d, attr::RAIL).unwrap().int, Some(1));
    assert_eq!(
        own(d, attr::FABRIC).unwrap().string.as_deref(),
        Some("default")
    );
    assert_eq!(own(d, attr::LINK_SPEED_GBPS).unwrap().int, Some(400));
    assert_eq!(own(d, attr::SHARED).unwrap().bool, Some(false));
    let cap = &d.capacity.as_ref().unwrap()["ainic.amd.com/bandwidth"];
    assert_eq!(cap.value.0, "400G");
    assert!(cap.request_policy.is_none());
    let s = &set.slices[0];
    assert_eq!(s.spec.pool.name, "node-a");
    assert_eq!(s.spec.node_name.as_deref(), Some("node-a"));
    assert_eq!(s.metadata.name.as_deref(), Some("node-a-ainic.amd.com-0"));
}

#[test]
fn gates_off_emit_no_gated_fields_and_publish_vfs_instead_of_their_pf() {
    let mut inv = sample::inventory(2, 3);
    inv.nics[0].netdevs[0].operstate = Some("down".into());
    let set = build(&inv, |o| o.shared_pfs = vec!["*".into()]);
    assert_eq!(set.devices().count(), 6);
    assert!(set.devices().all(|d| d.name.starts_with("vf-")));
    for d in set.devices() {
        assert!(
            d.taints.is_none()
                && d.consumes_counters.is_none()
                && d.allow_multiple_allocations.is_none()
        );
        assert!(
            d.capacity
                .iter()
                .flatten()
                .all(|(_, c)| c.request_policy.is_none())
        );
    }
    assert!(set.slices.iter().all(|s| s.spec.shared_counters.is_none()));
    let vf = set.device("vf-0000-11-00-2").unwrap();
    assert_eq!(
        own(vf, attr::PHYSFN).unwrap().string.as_deref(),
        Some("0000:10:00.0")
    );
    assert_eq!(own(vf, attr::VF_INDEX).unwrap().int, Some(2));
    assert_eq!(own(vf, attr::RAIL).unwrap().int, Some(0), "rail of its PF");
    assert!(
        set.warnings
            .iter()
            .any(|w| w.contains("DRAConsumableCapacity")),
        "{:?}",
        set.warnings
    );
}

#[test]
fn pf_only_policy_hides_the_vfs() {
    let set = build(&sample::inventory(1, 4), |o| {
        o.pf_with_vfs = PfWithVfs::PfOnly
    });
    assert_eq!(names_of(&set), ["pf-0000-10-00-0"]);
}

#[test]
fn partitionable_devices_make_pf_and_vfs_exclusive_through_counters() {
    let gates = FeatureGates::for_release(Release::NEWEST)
        .with(FeatureGate::DraConsumableCapacity, false)
        .with(FeatureGate::DraDeviceTaints, false);
    let set = build(&sample::inventory(2, 3), |o| o.gates = gates);
    assert_eq!(set.devices().count(), 8);
    let counters = &set.slices[0];
    assert!(counters.spec.devices.is_none());
    let sets = counters.spec.shared_counters.as_ref().unwrap();
    assert_eq!(sets[0].name, "pf-0000-10-00-0");
    assert_eq!(sets[0].counters["functions"].value.0, "3");
    let pf = set.device("pf-0000-10-00-0").unwrap();
    let vf = set.device("vf-0000-11-00-0").unwrap();
    let used = |d: &Device| {
        d.consumes_counters.as_ref().unwrap()[0].counters["functions"]
            .value
            .0
            .clone()
    };
    assert_eq!(used(pf), "3", "the PF takes every slot");
    assert_eq!(used(vf), "1");
    assert_eq!(
        vf.consumes_counters.as_ref().unwrap()[0].counter_set,
        "pf-0000-10-00-0"
    );
}

#[test]
fn on_1_34_a_family_shares_its_slice_with_its_counter_set_or_is_published_as_vfs() {
    let gates = FeatureGates::new().with(FeatureGate::DraPartitionableDevices, true);
    let set = build(&sample::inventory(2, 3), |o| o.gates = gates.clone());
    assert_eq!(set.slices.len(), 1, "two families of 4 fit one slice");
    let slice = &set.slices[0].spec;
    let sets: Vec<&str> = (slice.shared_counters.iter().flatten())
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(sets, ["pf-0000-10-00-0", "pf-0000-20-00-0"]);
    assert_eq!(slice.devices.as_ref().unwrap().len(), 8);

    // A PF with 128 VFs makes a family of 129: beyond one slice in 1.34.
    let big = build(&sample::inventory(1, 128), |o| o.gates = gates.clone());
    assert_eq!(big.devices().count(), 128);
    assert!(big.device("pf-0000-10-00-0").is_none());
    assert!(big.devices().all(|d| d.consumes_counters.is_none()));
    assert!(
        big.warnings.iter().any(|w| w.contains("Kubernetes 1.34")),
        "{:?}",
        big.warnings
    );
    let fits = build(&sample::inventory(1, 127), |o| o.gates = gates.clone());
    assert!(fits.device("pf-0000-10-00-0").is_some());
    assert_eq!(fits.slices.len(), 1);
    // Families are packed whole: 5 PFs with 40 VFs (41 devices each) fit
    // three to a slice of 128, and 9 small ones need two (8 sets per slice
    // at most).
    for (pfs, vfs, slices) in [(5, 40, 2), (7, 63, 4), (9, 2, 2)] {
        let set = build(&sample::inventory(pfs, vfs), |o| o.gates = gates.clone());
        assert_eq!(set.slices.len(), slices, "{pfs}x{vfs}");
        for s in &set.slices {
            let sets: Vec<&str> = (s.spec.shared_counters.iter().flatten())
                .map(|c| c.name.as_str())
                .collect();
            let devices = s.spec.devices.iter().flatten();
            for d in devices {
                let set = &d.consumes_counters.as_ref().unwrap()[0].counter_set;
                assert!(
                    sets.contains(&set.as_str()),
                    "{} consumes {set} from another slice",
                    d.name
                );
            }
        }
    }
}

#[test]
fn shared_pf_allows_multiple_allocations_with_request_policies() {
    let gates = FeatureGates::new().with(FeatureGate::DraConsumableCapacity, true);
    let set = build(&sample::inventory(2, 2), |o| {
        o.gates = gates;
        o.shared_pfs = vec!["enp16s0".into()];
        o.pf_queue_pairs = Some(4096);
    });
    let shared = set.device("pf-0000-10-00-0").unwrap();
    assert_eq!(shared.allow_multiple_allocations, Some(true));
    assert_eq!(own(shared, attr::SHARED).unwrap().bool, Some(true));
    let caps = shared.capacity.as_ref().unwrap();
    let bw = caps["ainic.amd.com/bandwidth"]
        .request_policy
        .as_ref()
        .unwrap();
    assert_eq!(bw.default.as_ref().unwrap().0, "1G");
    assert_eq!(
        bw.valid_range.as_ref().unwrap().max.as_ref().unwrap().0,
        "400G"
    );
    assert_eq!(caps["ainic.amd.com/queuePairs"].value.0, "4096");
    assert!(
        set.devices().all(|d| !d.name.starts_with("vf-0000-11")),
        "its VFs are not published"
    );
    // The other PF keeps the VFs-only default.
    assert!(set.device("vf-0000-21-00-1").is_some());
}

#[test]
fn taints_mark_down_links_only_with_the_gate() {
    let mut inv = sample::inventory(2, 0);
    inv.nics[1] = sample::pf(1, 0, false);
    let off = build(&inv, |_| {});
    assert!(off.devices().all(|d| d.taints.is_none()));
    let gates = FeatureGates::new().with(FeatureGate::DraDeviceTaints, true);
    let on = build(&inv, |o| o.gates = gates);
    assert!(on.device("pf-0000-10-00-0").unwrap().taints.is_none());
    let t = &on
        .device("pf-0000-20-00-0")
        .unwrap()
        .taints
        .as_ref()
        .unwrap()[0];
    assert_eq!(t.key, "ainic.amd.com/unhealthy");
    assert_eq!(t.effect, "NoSchedule");
    assert_eq!(t.value.as_deref(), Some("link-down"));
}

#[test]
fn rdma_port_down_is_unhealthy_and_vfs_follow_their_pf() {
    let mut inv = sample::inventory(1, 2);
    inv.nics[0].rdma[0].ports[0].state = Some("DOWN".into());
    let gates = FeatureGates::new().with(FeatureGate::DraDeviceTaints, true);
    let set = build(&inv, |o| o.gates = gates);
    for d in set.devices() {
        let t = d
            .taints
            .as_ref()
            .unwrap_or_else(|| panic!("{} untainted", d.name));
        assert_eq!(t[0].value.as_deref(), Some("rdma-port-down"));
    }
}

#[test]
fn gpu_pairing_attribute_carries_the_nearest_gpu() {
    let set = build(&sample::inventory(2, 0), |o| {
        o.gpu_pairing_attribute = Some("gpu.amd.com/pciAddr".into())
    });
    let d = set.device("pf-0000-10-00-0").unwrap();
    assert_eq!(
        a(d, "gpu.amd.com/pciAddr").unwrap().string.as_deref(),
        Some("0000:18:00.0")
    );
}

#[test]
fn long_strings_are_cut_to_the_api_limit() {
    let mut inv = sample::inventory(1, 0);
    inv.nics[0].product_name = Some("é".repeat(40));
    let set = build(&inv, |_| {});
    let name = own(set.device("pf-0000-10-00-0").unwrap(), attr::PRODUCT_NAME)
        .unwrap()
        .string
        .unwrap();
    assert!(name.len() <= 64 && name.len() >= 62);
    assert!(set.warnings.iter().any(|w| w.contains("productName")));
}

#[test]
fn eight_pfs_with_256_vfs_make_a_valid_multi_slice_pool() {
    let inv = sample::inventory(8, 256);
    let plain = build(&inv, |_| {});
    assert_eq!(plain.devices().count(), 8 * 256);
    assert_eq!(plain.slices.len(), 8 * 256 / MAX_DEVICES);
    let full = build(&inv, |o| o.gates = all_gates());
    assert_eq!(full.devices().count(), 8 * 257);
    let device_slices = full
        .slices
        .iter()
        .filter(|s| s.spec.devices.is_some())
        .count();
    assert_eq!(
        device_slices,
        (8 * 257usize).div_ceil(MAX_DEVICES_WITH_TAINTS_OR_COUNTERS)
    );
    assert_eq!(
        full.slices.len(),
        device_slices + 1,
        "8 counter sets fit one slice"
    );
    for s in &full.slices {
        assert_eq!(s.spec.pool.resource_slice_count, full.slices.len() as i64);
    }
}

#[test]
fn building_is_deterministic_and_generation_settable() {
    let inv = sample::inventory(3, 5);
    let mut one = build(&inv, |o| o.gates = all_gates());
    let two = build(&inv, |o| o.gates = all_gates());
    assert_eq!(one, two);
    one.set_generation(7);
    assert!(one.slices.iter().all(|s| s.spec.pool.generation == 7));
    assert!(check_pool(&one.slices).is_empty());
}

#[test]
fn empty_inventory_publishes_no_slices() {
    let set = build(&topology::Inventory::default(), |_| {});
    assert!(set.slices.is_empty());
}

#[test]
fn a_node_switched_to_dra_marks_pfs_for_amd_com_nic_and_vfs_for_amd_com_vnic() {
    let resource = |set: &SliceSet, name: &str| {
        own(set.device(name).unwrap(), attr::EXTENDED_RESOURCE).and_then(|a| a.string)
    };
    let inv = sample::inventory(2, 2);
    let off = build(&inv, |_| {});
    assert!(
        off.devices()
            .all(|d| own(d, attr::EXTENDED_RESOURCE).is_none())
    );
    let on = build(&inv, |o| {
        o.extended_resources = true;
        o.pf_with_vfs = PfWithVfs::PfOnly;
    });
    let pf = on
        .devices()
        .find(|d| d.name.starts_with("pf-"))
        .unwrap()
        .name
        .clone();
    assert_eq!(resource(&on, &pf).as_deref(), Some("amd.com/nic"));
    let vfs = build(&inv, |o| o.extended_resources = true);
    let vf = vfs
        .devices()
        .find(|d| d.name.starts_with("vf-"))
        .unwrap()
        .name
        .clone();
    assert_eq!(resource(&vfs, &vf).as_deref(), Some("amd.com/vnic"));
    // A shared PF serves claims by capacity, not the extended resource.
    let shared = build(&inv, |o| {
        o.extended_resources = true;
        o.pf_with_vfs = PfWithVfs::PfOnly;
        o.gates = all_gates();
        o.shared_pfs = vec!["*".into()];
    });
    assert!(
        shared
            .devices()
            .all(|d| own(d, attr::EXTENDED_RESOURCE).is_none())
    );
}
