//! `GetPreferredAllocation` scoring on a node with 8 PFs × 256 VFs: the
//! exhaustive search over the PFs and the greedy search over 2,048 VFs, as
//! the kubelet calls it (every available ID offered).
//!
//! `cargo bench -p dra-model --bench classic`

use criterion::{Criterion, criterion_group, criterion_main};
use dra_model::classic::{ClassicConfig, assign, preferred_allocation};
use dra_model::sample;

fn bench(c: &mut Criterion) {
    let inventory = sample::inventory(8, 256);
    let split = assign(&ClassicConfig::default(), &inventory);
    for (resource, size) in [
        ("amd.com/nic", 2),
        ("amd.com/nic", 4),
        ("amd.com/vnic", 4),
        ("amd.com/vnic", 8),
    ] {
        let devices = &split.resource(resource).unwrap().devices;
        let ids: Vec<String> = devices.iter().map(|d| d.id()).collect();
        c.bench_function(
            &format!("preferred {resource} x{size} of {}", ids.len()),
            |b| b.iter(|| preferred_allocation(devices, &ids, &[], size).unwrap()),
        );
    }
    c.bench_function("split 8 PFs x 256 VFs", |b| {
        b.iter(|| assign(&ClassicConfig::default(), &inventory))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
