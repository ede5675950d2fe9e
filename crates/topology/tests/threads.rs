//! Reading with several threads gives exactly what one thread reads.

mod common;

use common::render;
use testkit::fixture::sriov_node;
use topology::{DiscoveryConfig, discover};

fn with_threads(threads: usize) -> DiscoveryConfig {
    DiscoveryConfig {
        threads,
        ..DiscoveryConfig::default()
    }
}

#[test]
fn threads_do_not_change_the_inventory() {
    for name in ["broken", "sriov-vfs", "mi300x-8gpu-8nic"] {
        let dir = render(name);
        let one = discover(dir.path(), &with_threads(1)).unwrap();
        for threads in [2, 3, 7, 1000] {
            let many = discover(dir.path(), &with_threads(threads)).unwrap();
            assert_eq!(one, many, "{name} with {threads} threads");
        }
    }
}

#[test]
fn a_large_node_reads_the_same_in_parallel() {
    let dir = tempfile::tempdir().unwrap();
    sriov_node(2, 64).render(dir.path()).unwrap();
    let one = discover(dir.path(), &with_threads(1)).unwrap();
    assert_eq!(one.nics.len(), 2 * 65);
    assert!(one.warnings.is_empty(), "{:?}", one.warnings);
    assert_eq!(discover(dir.path(), &with_threads(4)).unwrap(), one);
    assert_eq!(
        discover(dir.path(), &DiscoveryConfig::default()).unwrap(),
        one
    );
}

#[test]
fn automatic_threads_stay_within_bounds() {
    let auto = DiscoveryConfig::default();
    assert_eq!(auto.workers(0), 1);
    assert_eq!(auto.workers(10), 1);
    assert!((1..=8).contains(&auto.workers(100_000)));
    assert_eq!(with_threads(4).workers(2), 2);
}

/// Char devices are read by several threads too (one pass over
/// `class/infiniband_*` before the functions): broken entries spread over
/// the runs still give the warnings of one thread, in its order.
#[test]
fn broken_char_devices_warn_the_same_with_any_thread_count() {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    sriov_node(2, 8).render(root).unwrap();
    let class = root.join("class");
    // A dangling verbs link, garbage in the `dev` of the entry sorted
    // before it (its warning still comes after: links first), a MAD entry
    // that is a file, a missing `port` (not read: its RDMA device has one
    // port, so its MAD devices need no order).
    std::fs::remove_file(class.join("infiniband_verbs/uverbs1")).unwrap();
    symlink(
        "../../devices/nowhere",
        class.join("infiniband_verbs/uverbs1"),
    )
    .unwrap();
    std::fs::remove_file(class.join("infiniband_mad/umad3")).unwrap();
    std::fs::write(class.join("infiniband_mad/umad3"), "not a dir\n").unwrap();
    std::fs::write(class.join("infiniband_verbs/uverbs0/dev"), "x\n").unwrap();
    std::fs::remove_file(class.join("infiniband_mad/issm2/port")).unwrap();

    let one = discover(root, &with_threads(1)).unwrap();
    let expected = [
        "class/infiniband_verbs/uverbs1: cannot resolve",
        "class/infiniband_verbs/uverbs0: invalid dev",
        "class/infiniband_mad/umad3: not a directory",
    ];
    let positions: Vec<usize> = expected
        .iter()
        .map(|prefix| {
            one.warnings
                .iter()
                .position(|w| w.starts_with(prefix))
                .unwrap_or_else(|| panic!("no warning {prefix:?} in {:?}", one.warnings))
        })
        .collect();
    // Per class: links first, then files; verbs before MAD.
    assert_eq!(positions[0], 0, "{:?}", one.warnings);
    assert!(positions[0] < positions[1], "{:?}", one.warnings);
    assert!(positions[1] < positions[2], "{:?}", one.warnings);
    assert_eq!(one.warnings.len(), expected.len(), "{:?}", one.warnings);
    let issm2 = std::fs::read_to_string(class.join("infiniband_mad/issm2/ibdev")).unwrap();
    let device = one
        .nics
        .iter()
        .flat_map(|n| &n.rdma)
        .find(|d| d.name == issm2.trim())
        .unwrap();
    assert_eq!(device.issm.len(), 1, "{device:?}");
    for threads in [2, 3, 7, 1000] {
        let many = discover(root, &with_threads(threads)).unwrap();
        assert_eq!(one, many, "with {threads} threads");
    }
}
