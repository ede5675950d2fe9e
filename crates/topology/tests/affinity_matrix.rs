//! The exact GPU × NIC affinity matrix of every bundled fixture, written
//! from each layout's description (see `topologies/*.yaml`): the classes
//! must come out of the tree, not out of assumptions.

mod common;

use common::{discover_bundled, matrix, names};

#[test]
fn mi300x_pairs_each_gpu_with_its_switch_nic() {
    let (_dir, inv) = discover_bundled("mi300x-8gpu-8nic");
    // NICs in address order: 04, 24, 44, 64 (socket 0), 84, a4, c4, e4 (socket 1).
    assert_eq!(
        matrix(&inv),
        [
            "0000:03:00.0: PIX NODE NODE NODE SYS SYS SYS SYS",
            "0000:23:00.0: NODE PIX NODE NODE SYS SYS SYS SYS",
            "0000:43:00.0: NODE NODE PIX NODE SYS SYS SYS SYS",
            "0000:63:00.0: NODE NODE NODE PIX SYS SYS SYS SYS",
            "0000:83:00.0: SYS SYS SYS SYS PIX NODE NODE NODE",
            "0000:a3:00.0: SYS SYS SYS SYS NODE PIX NODE NODE",
            "0000:c3:00.0: SYS SYS SYS SYS NODE NODE PIX NODE",
            "0000:e3:00.0: SYS SYS SYS SYS NODE NODE NODE PIX",
        ]
    );
    for (i, nic) in inv.nics.iter().enumerate() {
        let gpu = inv.gpus[i].address;
        assert_eq!(
            inv.nearest_gpu(nic.address),
            Some((gpu, topology::Affinity::Pix))
        );
    }
}

#[test]
fn shared_switch_gpus_are_pix_to_one_nic_and_sys_to_the_other() {
    let (_dir, inv) = discover_bundled("shared-switch");
    assert_eq!(
        matrix(&inv),
        ["0000:03:00.0: PIX SYS", "0000:04:00.0: PIX SYS"]
    );
    // Ties go to the lowest GPU address.
    let nearest = inv.nearest_gpu(common::addr("0000:05:00.0")).unwrap();
    assert_eq!(nearest.0.to_string(), "0000:03:00.0");
    let far = inv.nearest_gpu(common::addr("0000:81:00.0")).unwrap();
    assert_eq!(
        (far.0.to_string(), far.1.as_str()),
        ("0000:03:00.0".into(), "SYS")
    );
}

#[test]
fn sriov_vfs_share_their_pf_affinity() {
    let (_dir, inv) = discover_bundled("sriov-vfs");
    // NICs: PF 44:00.0 and its VFs 44:00.1-4 beside the GPU; PF c1:00.0,
    // VFs c1:00.1-2 and PF c2:00.0 on the other socket.
    assert_eq!(
        matrix(&inv),
        ["0000:43:00.0: PIX PIX PIX PIX PIX SYS SYS SYS SYS"]
    );
}

#[test]
fn mixed_vendors_keeps_only_the_ainic_and_the_gpu() {
    let (_dir, inv) = discover_bundled("mixed-vendors");
    assert_eq!(names(inv.gpus.iter().map(|g| g.address)), ["0000:03:00.0"]);
    assert_eq!(names(inv.nics.iter().map(|n| n.address)), ["0000:05:00.0"]);
    // Same host bridge, different root ports.
    assert_eq!(matrix(&inv), ["0000:03:00.0: PHB"]);
}

#[test]
fn nested_switches_give_pix_inside_and_pxb_across() {
    let (_dir, inv) = discover_bundled("nested-switches");
    // NICs: 06 (inner switch A), 0a (inner switch B), 0b (outer switch), 0c (root port).
    assert_eq!(
        matrix(&inv),
        [
            "0000:05:00.0: PIX PXB PXB PHB",
            "0000:09:00.0: PXB PIX PXB PHB",
        ]
    );
}

#[test]
fn cross_host_bridge_gives_node_within_a_numa_node() {
    let (_dir, inv) = discover_bundled("cross-host-bridge");
    // NICs: 04 (GPU 03's switch), 05 (other root port), 41 (other host bridge, node 0).
    assert_eq!(
        matrix(&inv),
        ["0000:03:00.0: PIX PHB NODE", "0000:81:00.0: SYS SYS SYS"]
    );
}

#[test]
fn broken_tree_still_classifies_what_it_found() {
    let (_dir, inv) = discover_bundled("broken");
    // NICs: 04:00.0 (no numa_node), its VF 04:00.1, 05 (garbage speed),
    // 06 (no netdev), 81 (NUMA unknown); 07 is skipped (garbage vendor).
    assert_eq!(matrix(&inv), ["0000:03:00.0: PIX PIX PIX PIX SYS"]);
}

#[test]
fn links_are_gpu_major_in_address_order() {
    let (_dir, inv) = discover_bundled("cross-host-bridge");
    let order: Vec<(String, String)> = inv
        .links
        .iter()
        .map(|l| (l.gpu.to_string(), l.nic.to_string()))
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    assert_eq!(order.len(), inv.gpus.len() * inv.nics.len());
}
