//! Scoring tests on the hand-built two-socket node (see `testing`).

use super::*;
use crate::classic::assign::assign;
use crate::classic::config::ClassicConfig;
use crate::classic::testing::two_socket_node;

fn resource(name: &str) -> Vec<ClassicDevice> {
    let a = assign(&ClassicConfig::default(), &two_socket_node());
    a.resource(name).unwrap().devices.clone()
}

fn all_ids(devices: &[ClassicDevice]) -> Vec<String> {
    devices.iter().map(|d| d.id()).collect()
}

fn prefer(
    devices: &[ClassicDevice],
    available: &[String],
    must: &[&str],
    size: usize,
) -> Vec<String> {
    let must: Vec<String> = must.iter().map(|s| s.to_string()).collect();
    preferred_allocation(devices, available, &must, size).unwrap()
}

#[test]
fn two_nics_share_a_numa_node_and_root_but_not_a_switch() {
    let nics = resource("amd.com/nic");
    // 0c+0d share a switch; 0c+4c cross host bridges; 0c+2c is the best pair.
    assert_eq!(
        prefer(&nics, &all_ids(&nics), &[], 2),
        ["0000:0c:00.0", "0000:2c:00.0"]
    );
}

#[test]
fn fabric_rails_steer_the_pair_off_a_shared_rail() {
    let mut a = assign(&ClassicConfig::default(), &two_socket_node());
    // Fabric facts put 0c and 2c on one rail: 0d+2c is now the best pair.
    let rails = [
        ("0000:0c:00.0", 0),
        ("0000:0d:00.0", 1),
        ("0000:2c:00.0", 0),
    ]
    .map(|(addr, rail)| (addr.parse().unwrap(), rail))
    .into_iter()
    .collect();
    a.set_rails(&rails);
    let nics = a.resource("amd.com/nic").unwrap().devices.clone();
    assert_eq!(
        prefer(&nics, &all_ids(&nics), &[], 2),
        ["0000:0d:00.0", "0000:2c:00.0"]
    );
}

#[test]
fn must_include_moves_the_choice_to_its_numa_node() {
    let nics = resource("amd.com/nic");
    assert_eq!(
        prefer(&nics, &all_ids(&nics), &["0000:9c:00.0"], 2),
        ["0000:8c:00.0", "0000:9c:00.0"]
    );
    assert_eq!(
        prefer(&nics, &all_ids(&nics), &["0000:0d:00.0"], 2),
        ["0000:0d:00.0", "0000:2c:00.0"]
    );
}

#[test]
fn four_nics_go_to_the_numa_node_without_a_shared_switch() {
    let nics = resource("amd.com/nic");
    assert_eq!(
        prefer(&nics, &all_ids(&nics), &[], 4),
        [
            "0000:8c:00.0",
            "0000:9c:00.0",
            "0000:ac:00.0",
            "0000:cc:00.0"
        ]
    );
}

#[test]
fn one_numa_node_beats_distinct_switches() {
    let nics = resource("amd.com/nic");
    let available: Vec<String> = ["0000:0c:00.0", "0000:0d:00.0", "0000:8c:00.0"]
        .map(String::from)
        .to_vec();
    assert_eq!(
        prefer(&nics, &available, &[], 2),
        ["0000:0c:00.0", "0000:0d:00.0"]
    );
}

#[test]
fn only_what_is_available_is_chosen() {
    let nics = resource("amd.com/nic");
    let available: Vec<String> = [
        "0000:0c:00.0",
        "0000:4c:00.0",
        "0000:8c:00.0",
        "0000:9c:00.0",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        prefer(&nics, &available, &[], 2),
        ["0000:8c:00.0", "0000:9c:00.0"]
    );
}

#[test]
fn four_vfs_come_from_distinct_pfs_on_one_numa_node() {
    let vfs = resource("amd.com/vnic");
    // NUMA 1 has four cards under four switches.
    assert_eq!(
        prefer(&vfs, &all_ids(&vfs), &[], 4),
        [
            "0000:8c:00.1",
            "0000:9c:00.1",
            "0000:ac:00.1",
            "0000:cc:00.1"
        ]
    );
    // With the VFs of 9c taken, NUMA 1 has three cards left: NUMA 0 has
    // four, two of them under one switch, and still wins.
    let available: Vec<String> = all_ids(&vfs)
        .into_iter()
        .filter(|id| !id.starts_with("0000:9c"))
        .collect();
    assert_eq!(
        prefer(&vfs, &available, &[], 4),
        [
            "0000:0c:00.1",
            "0000:0d:00.1",
            "0000:2c:00.1",
            "0000:4c:00.1"
        ]
    );
    // Two VFs: distinct cards, distinct switches, one root complex.
    assert_eq!(
        prefer(&vfs, &all_ids(&vfs), &[], 2),
        ["0000:0c:00.1", "0000:2c:00.1"]
    );
}

#[test]
fn a_card_under_a_switch_is_not_penalised_twice() {
    use crate::classic::testing::{inventory, pf, vf};
    // Card 0c sits under a switch, card c1 on a root port; two VFs of one
    // card are wanted either way, so the tie goes to the lower address.
    let inv = inventory(vec![
        pf("0000:0c:00.0", 0, "pci0000:00", Some(0)),
        vf("0000:0c:00.1", "0000:0c:00.0", 0, 0, "pci0000:00", Some(0)),
        vf("0000:0c:00.2", "0000:0c:00.0", 1, 0, "pci0000:00", Some(0)),
        pf("0000:c1:00.0", 1, "pci0000:c0", None),
        vf("0000:c1:00.1", "0000:c1:00.0", 0, 1, "pci0000:c0", None),
        vf("0000:c1:00.2", "0000:c1:00.0", 1, 1, "pci0000:c0", None),
    ]);
    let a = assign(&ClassicConfig::default(), &inv);
    let vfs = a.resource("amd.com/vnic").unwrap().devices.clone();
    assert_eq!(
        prefer(&vfs, &all_ids(&vfs), &[], 2),
        ["0000:0c:00.1", "0000:0c:00.2"]
    );
}

#[test]
fn answer_does_not_depend_on_request_order() {
    let vfs = resource("amd.com/vnic");
    let mut ids = all_ids(&vfs);
    let first = prefer(&vfs, &ids, &[], 3);
    ids.reverse();
    ids.rotate_left(5);
    assert_eq!(prefer(&vfs, &ids, &[], 3), first);
}

#[test]
fn unknown_numa_counts_as_its_own_node() {
    let mut nics = resource("amd.com/nic");
    for d in nics
        .iter_mut()
        .filter(|d| d.address.bus == 0x0c || d.address.bus == 0x2c)
    {
        d.location.numa_node = None;
    }
    // NUMA 0 now has only 0d and 4c known; they still beat the unknowns.
    let got = prefer(&nics, &all_ids(&nics), &[], 2);
    assert_eq!(got, ["0000:8c:00.0", "0000:9c:00.0"]);
}

#[test]
fn bad_requests_are_errors() {
    let nics = resource("amd.com/nic");
    let ids = all_ids(&nics);
    let err = preferred_allocation(&nics, &ids, &[], 9).unwrap_err();
    assert!(matches!(
        err,
        PreferenceError::BadSize {
            size: 9,
            available: 8,
            ..
        }
    ));
    let err = preferred_allocation(&nics, &ids[..2], &[ids[3].clone()], 2).unwrap_err();
    assert!(matches!(err, PreferenceError::BadSize { .. }), "{err}");
    let err = preferred_allocation(&nics, &["0000:0c:00.1".to_string()], &[], 1).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown device \"0000:0c:00.1\" in preferred allocation request"
    );
}

#[test]
fn greedy_search_matches_exhaustive_cost_on_this_node() {
    for name in ["amd.com/nic", "amd.com/vnic"] {
        let devices = resource(name);
        let free: Vec<&ClassicDevice> = devices.iter().collect();
        for k in 1..=6.min(free.len()) {
            let exact = set_cost(&exhaustive(&[], &free, k));
            let greedy = set_cost(&greedy_best(&[], &free, k));
            assert_eq!(greedy, exact, "{name} size {k}");
        }
    }
}

#[test]
fn large_vf_pools_use_the_greedy_search_and_keep_its_rules() {
    let mut devices = resource("amd.com/vnic");
    // 32 more VFs per PF: C(272, 4) candidate sets, far above the limit.
    let extra: Vec<ClassicDevice> = devices
        .iter()
        .flat_map(|d| {
            (0..16u8).map(move |i| {
                let mut e = d.clone();
                e.address.domain = 1 + u16::from(i);
                e
            })
        })
        .collect();
    devices.extend(extra);
    assert!(binomial(devices.len(), 4) > EXHAUSTIVE_LIMIT);
    let chosen = prefer(&devices, &all_ids(&devices), &[], 4);
    let views: Vec<&ClassicDevice> = chosen
        .iter()
        .map(|id| devices.iter().find(|d| d.id() == *id).unwrap())
        .collect();
    let cost = set_cost(&views);
    assert_eq!(cost.numa_nodes, 1);
    assert_eq!(cost.shared_card_pairs, 0);
    assert_eq!(
        chosen,
        [
            "0000:8c:00.1",
            "0000:9c:00.1",
            "0000:ac:00.1",
            "0000:cc:00.1"
        ]
    );
}

#[test]
fn binomial_counts_sets() {
    assert_eq!(binomial(8, 2), 28);
    assert_eq!(binomial(16, 4), 1820);
    assert_eq!(binomial(3, 5), 0);
    assert_eq!(binomial(4000, 64), u64::MAX);
}
