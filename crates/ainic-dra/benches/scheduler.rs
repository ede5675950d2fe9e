//! The real kube-scheduler (testbed, 1.37) on our slices: `NODES` fake
//! nodes (default 500), each with the ResourceSlice `ainic-dra slices`
//! publishes for the 8-GPU/8-NIC MI300X node (with
//! `--gpu-pairing-attribute gpu.amd.com/pciAddr`) and a GPU driver's
//! slice, and `PODS` pods (default 500), each with a claim from
//! examples/gpu-nic-same-switch.yaml's template: one GPU and the NIC on
//! its PCIe switch. Prints the scheduler's throughput from the first pod
//! created to the last one bound, and what one node's slices hold.
//! Asserts only that every pod was scheduled.
//!
//! `cargo bench -p ainic-dra --bench scheduler` (env `SCHED_BENCH_NODES`,
//! `SCHED_BENCH_PODS`). Builds the testbed's Kubernetes first if needed.
//! To see what the slice shape costs: `SCHED_BENCH_CLAIM=gpu` (a GPU
//! alone, the baseline without our devices in the claim), `=nic` (a NIC
//! alone); `SCHED_BENCH_ATTRIBUTES=N` keeps only the first N attributes of
//! each of our devices besides those the claim and classes use;
//! `SCHED_BENCH_CLASS=driver` asks for our devices through a class that
//! checks the driver alone, with no selector of the claim's own (what a
//! device plugin's "any NIC" would be); `SCHED_BENCH_ATTRIBUTES=standard`
//! keeps only the standard `resource.kubernetes.io/` attributes (and the
//! pairing one, which the pair claim matches on) and implies the driver
//! class. `SCHED_BENCH_ROUNDS=N` runs the same N times, each on a fresh
//! testbed.

use std::time::{Duration, Instant};

mod cluster;

use cluster::{TOPOLOGY, agent_slices, classes, documents, env_or, fake_nodes, in_chunks};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimTemplate, ResourceSlice};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use testkit::testbed::{Testbed, UpOptions, Version, cluster as bed_cluster, repo_root};

const PAIRING: &str = "gpu.amd.com/pciAddr";
const NAMESPACE: &str = "bench";

/// Attributes the claim and the shipped classes read: never trimmed.
const USED: [&str; 5] = [
    "ainic.amd.com/shared",
    "ainic.amd.com/type",
    "ainic.amd.com/gpuAffinity",
    "gpu.amd.com/pciAddr",
    "ainic.amd.com/tenant",
];

/// Which attributes of our devices are kept.
#[derive(Clone, Copy, Debug)]
enum Keep {
    /// All, as published.
    All,
    /// Those the claim and classes use, and this many others.
    Used(usize),
    /// The standard `resource.kubernetes.io/` ones and the pairing one.
    Standard,
}

impl Keep {
    fn from_env() -> Keep {
        match std::env::var("SCHED_BENCH_ATTRIBUTES").ok().as_deref() {
            None | Some("") => Keep::All,
            Some("standard") => Keep::Standard,
            Some(n) => Keep::Used(
                n.parse()
                    .expect("SCHED_BENCH_ATTRIBUTES: a number or standard"),
            ),
        }
    }
}

/// Our slices for `node`, as the agent publishes them, each device's
/// attributes cut as `keep` says.
fn our_slices(node: &str, keep: Keep) -> Vec<ResourceSlice> {
    let mut slices = agent_slices(node, &["--gpu-pairing-attribute", PAIRING]);
    for device in slices
        .iter_mut()
        .flat_map(|s| s.spec.devices.iter_mut().flatten())
    {
        let attributes = device.attributes.get_or_insert_default();
        let mut others = 0;
        attributes.retain(|name, _| match keep {
            Keep::All => true,
            Keep::Standard => name.starts_with("resource.kubernetes.io/") || name == PAIRING,
            Keep::Used(keep) => {
                let used = USED.contains(&name.as_str());
                others += usize::from(!used);
                used || others <= keep
            }
        });
    }
    slices
}

/// The class that checks the driver alone (`SCHED_BENCH_CLASS=driver`).
const DRIVER_CLASS: &str = "bench-ainic-any";

/// The GPU driver's slice for `node`.
fn gpu_slice(node: &str, inventory: &topology::Inventory) -> ResourceSlice {
    ainic_dra_demo::world::gpu_slice(node, inventory).unwrap()
}

/// Nodes `bench-0000`… with their slices; returns what one node publishes.
async fn fill(client: &kube::Client, nodes: usize, keep: Keep) -> (usize, usize, usize) {
    let fixture = tempfile::tempdir().unwrap();
    let yaml = testkit::fixture::bundled_by_name(TOPOLOGY).unwrap();
    (testkit::fixture::Topology::from_yaml(yaml).unwrap())
        .render(fixture.path())
        .unwrap();
    let inventory = topology::discover(fixture.path(), &Default::default()).unwrap();
    let names: Vec<String> = (0..nodes).map(|i| format!("bench-{i:04}")).collect();
    fake_nodes(client, &names).await;
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let ours = our_slices("bench-0000", keep);
    let shape = (
        ours.len(),
        ours.iter()
            .map(|s| s.spec.devices.iter().flatten().count())
            .sum(),
        (ours[0].spec.devices.iter().flatten())
            .map(|d| d.attributes.as_ref().map_or(0, |a| a.len()))
            .max()
            .unwrap_or(0),
    );
    let text = serde_json::to_string(&ours).unwrap();
    let mut creates = Vec::new();
    for name in &names {
        let mut per_node: Vec<ResourceSlice> =
            serde_json::from_str(&text.replace("bench-0000", name)).unwrap();
        per_node.push(gpu_slice(name, &inventory));
        for slice in per_node {
            let api = slices.clone();
            creates.push(async move {
                api.create(&PostParams::default(), &slice).await.unwrap();
            });
        }
    }
    in_chunks(creates).await;
    shape
}

/// The claim template of each pod: `pair` (examples/gpu-nic-same-switch.yaml),
/// `gpu` or `nic` alone; with `driver_class`, the NIC request names the
/// class that checks the driver alone and has no selector of its own.
fn template(kind: &str, driver_class: bool) -> Value {
    let file = repo_root().join("examples/gpu-nic-same-switch.yaml");
    let mut template = (documents(&file).into_iter())
        .find(|o| o["kind"] == "ResourceClaimTemplate")
        .unwrap();
    let devices = &mut template["spec"]["spec"]["devices"];
    match kind {
        "pair" => {}
        "gpu" | "nic" => {
            let requests = devices["requests"].as_array().unwrap();
            let one = requests.iter().find(|r| r["name"] == kind).unwrap().clone();
            *devices = json!({"requests": [one]});
        }
        other => panic!("SCHED_BENCH_CLAIM={other}: pair, gpu or nic"),
    }
    if driver_class {
        for request in devices["requests"].as_array_mut().unwrap() {
            if request["name"] == "nic" {
                request["exactly"] = json!({"deviceClassName": DRIVER_CLASS});
            }
        }
    }
    template
}

async fn pods(client: &kube::Client, count: usize, kind: &str, driver_class: bool) -> Instant {
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), NAMESPACE);
    let template = template(kind, driver_class);
    let template: ResourceClaimTemplate = serde_json::from_value(template).unwrap();
    let name = template.metadata.name.clone().unwrap();
    templates
        .create(&PostParams::default(), &template)
        .await
        .unwrap();
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let started = Instant::now();
    let creates = (0..count).map(|i| {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("pair-{i:04}")},
            "spec": {
                "resourceClaims": [{"name": "pair", "resourceClaimTemplateName": name}],
                "containers": [{"name": "main", "image": "bench",
                    "resources": {"claims": [{"name": "pair"}]}}],
            },
        }))
        .unwrap();
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &pod).await.unwrap();
        }
    });
    in_chunks(creates.collect()).await;
    started
}

async fn bound(client: &kube::Client) -> usize {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let list = api.list(&ListParams::default()).await.unwrap();
    (list.items.iter())
        .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
        .count()
}

/// One run on a fresh testbed: pods/s.
async fn run(nodes: usize, count: usize, kind: &str, keep: Keep, driver_class: bool) -> f64 {
    let options = UpOptions {
        version: Some(Version::V1_37),
        ..UpOptions::default()
    };
    let bed = tokio::task::spawn_blocking(move || Testbed::up(&options))
        .await
        .unwrap();
    let client = bed.client().await;
    classes(&client).await;
    let any: DeviceClass = serde_json::from_value(json!({"metadata": {"name": DRIVER_CLASS},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'ainic.amd.com'"}}]}}))
    .unwrap();
    (Api::<DeviceClass>::all(client.clone()))
        .create(&PostParams::default(), &any)
        .await
        .unwrap();
    bed_cluster::namespace(&client, NAMESPACE).await;
    let filling = Instant::now();
    let (slices, devices, attributes) = fill(&client, nodes, keep).await;
    println!(
        "{nodes} nodes filled in {:.1} s; per node: {slices} slice(s) of ours with {devices} devices of up to {attributes} attributes, plus 1 GPU slice (8 GPUs)",
        filling.elapsed().as_secs_f64()
    );
    let started = pods(&client, count, kind, driver_class).await;
    let deadline = started + Duration::from_secs(600);
    let mut done = 0;
    while Instant::now() < deadline {
        done = bound(&client).await;
        if done == count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(
        done, count,
        "only {done} of {count} pods scheduled in 600 s"
    );
    count as f64 / elapsed
}

#[tokio::main]
async fn main() {
    let (nodes, count, rounds) = (
        env_or("SCHED_BENCH_NODES", 500),
        env_or("SCHED_BENCH_PODS", 500),
        env_or("SCHED_BENCH_ROUNDS", 1),
    );
    let kind = std::env::var("SCHED_BENCH_CLAIM").unwrap_or_else(|_| "pair".into());
    let keep = Keep::from_env();
    let driver_class = matches!(keep, Keep::Standard)
        || std::env::var("SCHED_BENCH_CLASS").is_ok_and(|c| c == "driver");
    let class = if driver_class {
        "driver-only"
    } else {
        "shipped"
    };
    for _ in 0..rounds {
        let rate = run(nodes, count, &kind, keep, driver_class).await;
        println!(
            "kube-scheduler 1.37: {count} pods with a {kind} claim ({class} class, attributes {keep:?}) on {nodes} nodes: {rate:.1} pods/s"
        );
    }
}
