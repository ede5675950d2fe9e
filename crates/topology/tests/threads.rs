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
