//! Discovery of the large SR-IOV node: 8 Pollara PFs × 256 VFs each, with
//! one MI300X per PCIe switch (2,056 NIC functions, 16,448 GPU–NIC links).
//!
//! Also measured: the agent's safety-net rescan ([`topology::recheck`]) of
//! that node when nothing changed.
//!
//! The tree is rendered once, on tmpfs (`/dev/shm`) when available since
//! real sysfs lives in memory too; only `discover` is measured, with the
//! automatic thread count and with one thread.

#![allow(missing_docs)]

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use testkit::fixture::sriov_node;
use topology::{DiscoveryConfig, Recheck, discover, recheck};

fn temp_root() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(dir) = tempfile::tempdir_in(shm)
    {
        return dir;
    }
    tempfile::tempdir().expect("a temp dir")
}

fn bench_discover(c: &mut Criterion) {
    let root = temp_root();
    sriov_node(8, 256)
        .render(root.path())
        .expect("the benchmark node renders");
    let config = DiscoveryConfig::default();
    let inventory = discover(root.path(), &config).expect("discovery runs");
    assert_eq!(inventory.nics.len(), 8 * 257, "{:?}", inventory.warnings);
    assert!(inventory.warnings.is_empty(), "{:?}", inventory.warnings);
    let one_thread = DiscoveryConfig {
        threads: 1,
        ..DiscoveryConfig::default()
    };
    let mut group = c.benchmark_group("discover");
    group.sample_size(20);
    group.bench_function("8pf_x_256vf", |b| {
        b.iter(|| discover(black_box(root.path()), &config).expect("discovery runs"))
    });
    group.bench_function("8pf_x_256vf_one_thread", |b| {
        b.iter(|| discover(black_box(root.path()), &one_thread).expect("discovery runs"))
    });
    group.finish();

    // The safety-net rescan of the agent: what it costs when nothing moved.
    assert_eq!(recheck(root.path(), &inventory), Recheck::Unchanged);
    let mut group = c.benchmark_group("rescan");
    group.bench_function("8pf_x_256vf_nothing_changed", |b| {
        b.iter(|| recheck(black_box(root.path()), &inventory))
    });
    group.finish();
}

criterion_group!(benches, bench_discover);
criterion_main!(benches);
