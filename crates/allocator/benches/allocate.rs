//! Allocation benchmarks at cluster scale: 1,000 nodes, each publishing a
//! GPU slice (8 GPUs with `resource.kubernetes.io/pcieRoot` and
//! `gpu.amd.com/pciAddr`) and a NIC slice (8 PFs publishing the nearest
//! GPU's address under `gpu.amd.com/pciAddr`). Measures one pod's GPU+NIC
//! pairing claim on one node, and placing 1,000 such pods one after another
//! (8 per node, each allocation seeing the devices of earlier pods in use).

use allocator::{Allocator, Features, NodeFacts};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use serde_json::{Value, json};

const NODES: usize = 1_000;
const PER_NODE: usize = 8;

fn gpu_addr(i: usize) -> String {
    format!("0000:{:02x}:00.0", 0x03 + 0x20 * i)
}

fn root(i: usize) -> String {
    format!("pci0000:{:02x}", 0x20 * (i / 2))
}

fn slice(node: &str, driver: &str, devices: Vec<Value>) -> ResourceSlice {
    serde_json::from_value(json!({
        "metadata": { "name": format!("{node}-{driver}") },
        "spec": { "driver": driver, "nodeName": node,
                  "pool": { "name": node, "generation": 1, "resourceSliceCount": 1 }, "devices": devices },
    }))
    .unwrap()
}

fn cluster() -> Vec<ResourceSlice> {
    let mut slices = Vec::with_capacity(2 * NODES);
    for n in 0..NODES {
        let node = format!("node-{n:04}");
        let gpus = (0..PER_NODE)
            .map(|i| {
                json!({ "name": format!("gpu-{i}"), "attributes": {
                "resource.kubernetes.io/pcieRoot": { "string": root(i) },
                "gpu.amd.com/pciAddr": { "string": gpu_addr(i) },
                "gpu.amd.com/productName": { "string": "MI300X" } } })
            })
            .collect();
        let nics = (0..PER_NODE)
            .map(|i| {
                json!({ "name": format!("pf-0000-{:02x}-00-0", 0x04 + 0x20 * i), "attributes": {
                "resource.kubernetes.io/pcieRoot": { "string": root(i) },
                "gpu.amd.com/pciAddr": { "string": gpu_addr(i) },
                "ainic.amd.com/type": { "string": "pf" },
                "ainic.amd.com/shared": { "bool": false },
                "ainic.amd.com/rail": { "int": i } },
                "capacity": { "ainic.amd.com/bandwidth": { "value": "400G" } } })
            })
            .collect();
        slices.push(slice(&node, "gpu.amd.com", gpus));
        slices.push(slice(&node, "ainic.amd.com", nics));
    }
    slices
}

fn classes() -> Vec<DeviceClass> {
    let class = |name: &str, expression: &str| -> DeviceClass {
        serde_json::from_value(json!({ "metadata": { "name": name },
            "spec": { "selectors": [{ "cel": { "expression": expression } }] } }))
        .unwrap()
    };
    vec![
        class("gpu.amd.com", "device.driver == 'gpu.amd.com'"),
        class(
            "ainic-pf",
            "device.driver == 'ainic.amd.com' && device.attributes['ainic.amd.com'].type == 'pf' && !device.attributes['ainic.amd.com'].shared",
        ),
    ]
}

fn pairing_claim(name: &str) -> ResourceClaim {
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": "default" },
        "spec": { "devices": {
            "requests": [
                { "name": "gpu", "exactly": { "deviceClassName": "gpu.amd.com" } },
                { "name": "nic", "exactly": { "deviceClassName": "ainic-pf" } }
            ],
            "constraints": [{ "requests": ["gpu", "nic"], "matchAttribute": "gpu.amd.com/pciAddr" }]
        } }
    }))
    .unwrap()
}

fn benches(c: &mut Criterion) {
    let slices = cluster();
    let classes = classes();
    let claim = [pairing_claim("pod-0")];

    c.bench_function("index 1000 nodes x (8 GPU + 8 NIC)", |b| {
        b.iter(|| Allocator::new(Features::default(), &slices, &classes, &[]).unwrap())
    });

    let allocator = Allocator::new(Features::default(), &slices, &classes, &[]).unwrap();
    let node = NodeFacts::named("node-0500");
    c.bench_function(
        "allocate one pod's GPU+NIC claim on one node of 1000",
        |b| b.iter(|| allocator.allocate(&node, &claim).unwrap()),
    );

    let mut group = c.benchmark_group("place 1000 pods one after another");
    group.sample_size(10);
    group.bench_function("8 pods per node, commit after each", |b| {
        b.iter_batched(
            || Allocator::new(Features::default(), &slices, &classes, &[]).unwrap(),
            |mut allocator| {
                for pod in 0..1_000 {
                    let node = NodeFacts::named(&format!("node-{:04}", pod / PER_NODE));
                    let results = allocator.allocate(&node, &claim).unwrap();
                    allocator.commit(&results).unwrap();
                }
                allocator
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(allocation, benches);
criterion_main!(allocation);
