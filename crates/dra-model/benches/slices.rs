//! Slice building for a node with 8 PFs × 256 VFs (DESIGN.md §8 target:
//! discovery and slice build ≤ 50 ms): build alone from an in-memory
//! inventory, the validator, and sysfs discovery with build from a tree.
//!
//! `cargo bench -p dra-model --bench slices`

use std::fmt::Write as _;

use criterion::{Criterion, criterion_group, criterion_main};
use dra_model::validate::check_pool;
use dra_model::{FeatureGate, FeatureGates, ModelConfig, ModelOptions, build_slices, sample};

fn config(all_gates: bool) -> ModelConfig {
    let mut o = ModelOptions::new("node-a");
    if all_gates {
        o.gates = FeatureGates::new()
            .with(FeatureGate::DraPartitionableDevices, true)
            .with(FeatureGate::DraDeviceTaints, true)
            .with(FeatureGate::DraConsumableCapacity, true);
    }
    ModelConfig::new(o).unwrap()
}

/// A topology fixture: 8 Pollara PFs, each on its own root port, 256 VFs each.
fn big_topology() -> String {
    let mut y = String::from(
        "name: big\ndescription: 8 PFs x 256 VFs\nnumaNodes:\n  - {id: 0, cpus: \"0-63\"}\nhostBridges:\n  - root: pci0000:00\n    numa: 0\n    ports:\n",
    );
    for i in 0..8 {
        let bus = 0x10 + i * 0x10;
        let _ = write!(
            y,
            "      - bdf: \"0000:00:{:02x}.1\"\n        devices:\n          - bdf: \"0000:{bus:02x}:00.0\"\n            model: pollara400\n            netdev: {{name: enp{bus}s0}}\n            rdma: {{name: ionic_{i}}}\n            totalVfs: 256\n            vfs: 256\n",
            i + 1
        );
    }
    y
}

fn bench(c: &mut Criterion) {
    let inv = sample::inventory(8, 256);
    let (off, on) = (config(false), config(true));
    c.bench_function("build_slices 8x256 gates off", |b| {
        b.iter(|| build_slices(&inv, &off))
    });
    c.bench_function("build_slices 8x256 all gates", |b| {
        b.iter(|| build_slices(&inv, &on))
    });
    let slices = build_slices(&inv, &on).slices;
    c.bench_function("check_pool 8x256 all gates", |b| {
        b.iter(|| check_pool(&slices))
    });

    let dir = tempfile::tempdir().unwrap();
    testkit::fixture::Topology::from_yaml(&big_topology())
        .unwrap()
        .render(dir.path())
        .unwrap();
    let discovery = topology::DiscoveryConfig::default();
    let found = topology::discover(dir.path(), &discovery).unwrap();
    assert_eq!(found.nics.len(), 8 * 257, "fixture renders every VF");
    c.bench_function("discover + build_slices 8x256 (sysfs tree)", |b| {
        b.iter(|| {
            let inv = topology::discover(dir.path(), &discovery).unwrap();
            build_slices(&inv, &off)
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
