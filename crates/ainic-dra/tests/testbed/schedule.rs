//! Scheduling, judged by the real kube-scheduler and resource-claim
//! controller: pods with ResourceClaimTemplates and claims for every use
//! case are scheduled one after another onto two fake MI300X nodes whose
//! agents publish our slices (a GPU driver's slices published by the
//! test). Then `ainic-dra simulate`, given the objects exported from the
//! server as each pod met them, must allocate exactly what the scheduler
//! did, device for device; and the kubelet simulator prepares the real
//! allocated claims over each agent's socket.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use testkit::kubelet::{ClaimRef, KubeletSim};
use testkit::testbed::{Testbed, Version, cluster, wait};

use crate::support::{DRIVER, NodeAgent, install_chart, s};

const NAMESPACE: &str = "sched";
const GROUP_LABEL: &str = "testbed.ainic.amd.com/group";
const GROUP: &str = "sched";
const NODES: [&str; 2] = ["sched-1", "sched-2"];
const PAIRING: &str = "gpu.amd.com/pciAddr";
/// Shared PF of each node (consumable capacity).
const SHARED_PF: &str = "0000:84:00.0";

/// The gates the 1.37 scheduler runs with by default, for `simulate`.
const SIMULATE_GATES: &str = "DRAConsumableCapacity=true,DRAPartitionableDevices=true,\
DRADeviceTaints=true,DRADeviceBindingConditions=true,DRAExtendedResource=true";

/// Objects of an example file, by kind.
fn example(file: &str) -> Vec<Value> {
    let path = testkit::testbed::repo_root().join("examples").join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    text.split("\n---")
        .filter_map(|doc| serde_yaml_ng::from_str::<Value>(doc).ok())
        .filter(|v| !v.is_null())
        .collect()
}

fn example_of_kind(file: &str, kind: &str) -> Value {
    example(file)
        .into_iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("examples/{file} has no {kind}"))
}

/// A claim a pod uses: its name in the pod, the template or claim it
/// comes from, and whether that is a template.
type ClaimUse = (&'static str, &'static str, bool);

/// A pod on our node group using `claims`.
fn pod(name: &str, claims: &[ClaimUse]) -> Pod {
    let refs: Vec<Value> = claims
        .iter()
        .map(|(n, source, template)| {
            if *template {
                json!({"name": n, "resourceClaimTemplateName": source})
            } else {
                json!({"name": n, "resourceClaimName": source})
            }
        })
        .collect();
    let uses: Vec<Value> = claims.iter().map(|(n, _, _)| json!({"name": n})).collect();
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {GROUP_LABEL: GROUP},
            "resourceClaims": refs,
            "containers": [{"name": "main", "image": "testbed.invalid/app:none",
                            "resources": {"claims": uses}}],
        },
    }))
    .unwrap()
}

/// The pod's node once bound, or its scheduling condition's message.
async fn placement(pods: &Api<Pod>, name: &str) -> Result<String, String> {
    let pod = pods.get(name).await.map_err(|e| e.to_string())?;
    if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
        return Ok(node);
    }
    let condition = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .map(|c| {
            format!(
                "{}: {}",
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default()
            )
        });
    Err(condition.unwrap_or_else(|| "not scheduled yet".into()))
}

/// The names of the claims a pod uses (generated from templates or named).
async fn claims_of(pods: &Api<Pod>, name: &str) -> Vec<String> {
    let pod = pods.get(name).await.unwrap();
    let mut names: Vec<String> = pod
        .status
        .and_then(|s| s.resource_claim_statuses)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|s| s.resource_claim_name)
        .collect();
    for r in pod.spec.unwrap().resource_claims.unwrap_or_default() {
        if let Some(n) = r.resource_claim_name {
            names.push(n);
        }
    }
    names
}

/// (request, driver, pool, device, has a share) of each result of a claim.
type Results = Vec<(String, String, String, String, bool, String)>;

fn results(claim: &ResourceClaim) -> Results {
    let allocation = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
    let mut out: Results = allocation
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            let consumed = serde_json::to_string(&r.consumed_capacity).unwrap();
            (
                r.request,
                r.driver,
                r.pool,
                r.device,
                r.share_id.is_some(),
                consumed,
            )
        })
        .collect();
    out.sort();
    out
}

fn write_objects<T: serde::Serialize>(dir: &Path, file: &str, objects: &[T]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    std::fs::write(dir.join(file), serde_json::to_vec(&list).unwrap()).unwrap();
}

/// Runs `simulate` for `pod`'s claims on `node`, as the scheduler met
/// them: everything allocated before held, this pod's claims pending.
fn simulate(
    dir: &Path,
    node: &str,
    held: &[ResourceClaim],
    pending: &[ResourceClaim],
) -> Vec<ResourceClaim> {
    let mut claims: Vec<ResourceClaim> = held.to_vec();
    for claim in pending {
        let mut c = claim.clone();
        c.status = None;
        claims.push(c);
    }
    write_objects(dir, "claims.json", &claims);
    let out = Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .args([
            "simulate",
            "--node",
            node,
            "--feature-gates",
            SIMULATE_GATES,
            "-o",
            "json",
        ])
        .args(["-f", s(dir)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "simulate on {node} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The use cases, in the order their pods are created: (pod, its claims).
fn workload() -> Vec<(&'static str, Vec<ClaimUse>)> {
    vec![
        ("partition", vec![("nic", "nic-in-pod-a-rail-0", true)]),
        ("pair-1", vec![("pair", "gpu-with-switch-local-nic", true)]),
        ("pair-2", vec![("pair", "gpu-with-switch-local-nic", true)]),
        ("share-1", vec![("nic", "nic-share-100g", true)]),
        ("share-2", vec![("nic", "nic-share-100g", true)]),
        ("share-3", vec![("nic", "nic-share-100g", true)]),
        ("fast", vec![("nic", "fast-nic", false)]),
        ("root", vec![("pair", "gpu-with-nearby-nic", true)]),
    ]
}

async fn set_up(bed: &'static Testbed) -> Vec<NodeAgent> {
    install_chart(bed).await;
    let client = bed.client().await;
    cluster::namespace(&client, NAMESPACE).await;
    let classes: Api<DeviceClass> = Api::all(client.clone());
    let gpu_class: DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": "gpu.amd.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.amd.com'"}}]},
    }))
    .unwrap();
    let _ = classes.create(&PostParams::default(), &gpu_class).await;
    let mut agents = Vec::new();
    for (i, node) in NODES.iter().enumerate() {
        let mut labels = BTreeMap::from([(GROUP_LABEL.to_string(), GROUP.to_string())]);
        // Fabric facts from node labels: one partition per node.
        let fabric = if i == 0 { "pod-a" } else { "pod-b" };
        labels.insert(format!("{DRIVER}/fabric"), fabric.into());
        let flags = [
            "--gpu-pairing-attribute",
            PAIRING,
            "--feature-gates",
            "DRAConsumableCapacity=true",
            "--shared-pfs",
            SHARED_PF,
        ];
        let agent = NodeAgent::start(bed, node, "mi300x-8gpu-8nic", &labels, &flags).await;
        let inventory =
            topology::discover(&agent.sysfs, &topology::DiscoveryConfig::default()).unwrap();
        let gpus = ainic_dra_demo::world::gpu_slice(node, &inventory).unwrap();
        let slices: Api<ResourceSlice> = Api::all(client.clone());
        slices.create(&PostParams::default(), &gpus).await.unwrap();
        agents.push(agent);
    }
    for agent in &agents {
        let expected = crate::support::expected_slices(
            "mi300x-8gpu-8nic",
            &agent.node,
            &[
                "--gpu-pairing-attribute",
                PAIRING,
                "--feature-gates",
                "DRAConsumableCapacity=true",
                "--shared-pfs",
                SHARED_PF,
            ],
        );
        crate::support::published(&client, agent, expected.len()).await;
    }
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), NAMESPACE);
    for file in [
        "gpu-nic-same-switch.yaml",
        "shared-nic.yaml",
        "fabric-partition.yaml",
        "gpu-nic-pcieroot.yaml",
    ] {
        let template: ResourceClaimTemplate =
            serde_json::from_value(example_of_kind(file, "ResourceClaimTemplate")).unwrap();
        templates
            .create(&PostParams::default(), &template)
            .await
            .unwrap();
    }
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let fast: ResourceClaim =
        serde_json::from_value(example_of_kind("min-bandwidth.yaml", "ResourceClaim")).unwrap();
    claims.create(&PostParams::default(), &fast).await.unwrap();
    agents
}

#[tokio::test]
async fn the_real_scheduler_allocates_every_use_case_and_simulate_agrees() {
    let bed = Testbed::shared(Version::V1_37);
    let agents = set_up(bed).await;
    let client = bed.client().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let export = tempfile::tempdir().unwrap();
    let nodes: Vec<Node> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    write_objects(export.path(), "nodes.json", &nodes);
    let classes = Api::<DeviceClass>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    write_objects(export.path(), "classes.json", &classes);
    let slices = Api::<ResourceSlice>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    write_objects(export.path(), "slices.json", &slices);

    let mut held: Vec<ResourceClaim> = Vec::new();
    let mut placed = BTreeMap::new();
    let mut agreed = 0;
    for (name, uses) in workload() {
        pods.create(&PostParams::default(), &pod(name, &uses))
            .await
            .unwrap();
        let node = wait::until(&format!("pod {name} scheduled"), wait::DEADLINE, || {
            placement(&pods, name)
        })
        .await;
        let mut mine = Vec::new();
        for claim_name in claims_of(&pods, name).await {
            let claim = claims.get(&claim_name).await.unwrap();
            assert!(
                !results(&claim).is_empty(),
                "claim {claim_name} of {name} has no allocation"
            );
            mine.push(claim);
        }
        let predicted = simulate(export.path(), &node, &held, &mine);
        for claim in &mine {
            let claim_name = claim.metadata.name.clone().unwrap();
            let prediction = predicted
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(&claim_name))
                .unwrap_or_else(|| panic!("simulate returned no claim {claim_name}"));
            assert_eq!(
                results(prediction),
                results(claim),
                "pod {name} on {node}: simulate (left) and kube-scheduler (right) allocate claim {claim_name} differently"
            );
            agreed += 1;
        }
        placed.insert(name, (node, mine.clone()));
        held.extend(mine);
    }

    // A pod whose claim no device can satisfy stays pending, with the reason.
    let mut greedy: ResourceClaim =
        serde_json::from_value(example_of_kind("min-bandwidth.yaml", "ResourceClaim")).unwrap();
    greedy.metadata.name = Some("too-fast".into());
    let spec = serde_json::to_value(&greedy.spec)
        .unwrap()
        .to_string()
        .replace("200G", "1600G");
    greedy.spec = serde_json::from_str(&spec).unwrap();
    claims
        .create(&PostParams::default(), &greedy)
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &pod("unplaceable", &[("nic", "too-fast", false)]),
    )
    .await
    .unwrap();
    let reason = wait::until(
        "pod unplaceable marked unschedulable",
        wait::DEADLINE,
        || async {
            match placement(&pods, "unplaceable").await {
                Ok(node) => Ok(Err(node)),
                Err(m) if m.starts_with("Unschedulable") => Ok(Ok(m)),
                Err(m) => Err(m),
            }
        },
    )
    .await
    .expect("the unplaceable pod was bound");
    assert!(reason.contains("cannot allocate all claims"), "{reason}");
    eprintln!("kube-scheduler allocated {agreed} claims; simulate predicted {agreed} exactly");

    prepare_and_unprepare(&client, &agents, &placed).await;
    for (name, _) in workload() {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
}

/// Waits until claim `name`'s `status.devices` holds `wanted` entries of
/// our driver, each Ready (the agent writes them with the chart's RBAC and
/// its node-bound token, after answering the kubelet).
async fn device_status(api: &Api<ResourceClaim>, name: &str, wanted: usize) {
    let what = format!("{wanted} device status entries of ours on claim {name}");
    wait::until(&what, wait::DEADLINE, || async {
        let claim = api.get(name).await.map_err(|e| e.to_string())?;
        let ours: Vec<_> = claim
            .status
            .and_then(|s| s.devices)
            .unwrap_or_default()
            .into_iter()
            .filter(|d| d.driver == DRIVER)
            .collect();
        let ready = ours.iter().all(|d| {
            d.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        });
        if ours.len() == wanted && ready {
            Ok(())
        } else {
            Err(format!("{} entries: {ours:?}", ours.len()))
        }
    })
    .await;
}

/// The kubelet simulator prepares each placed pod's claims on its node's
/// agent: one CDI device per result, the spec on disk; unprepare removes it.
async fn prepare_and_unprepare(
    client: &kube::Client,
    agents: &[NodeAgent],
    placed: &BTreeMap<&str, (String, Vec<ResourceClaim>)>,
) {
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    for agent in agents {
        let plugin = KubeletSim::register_driver(&agent.dirs.registry, DRIVER)
            .await
            .unwrap();
        let mut refs = Vec::new();
        for (node, claims) in placed.values() {
            if *node != agent.node {
                continue;
            }
            for claim in claims {
                let ours = results(claim).iter().filter(|r| r.1 == DRIVER).count();
                let r = ClaimRef::new(
                    NAMESPACE,
                    claim.metadata.name.as_deref().unwrap(),
                    claim.metadata.uid.as_deref().unwrap(),
                );
                let answer = plugin.prepare_v1(std::slice::from_ref(&r)).await.unwrap();
                let result = &answer.claims[&r.uid];
                assert_eq!(result.error, "", "prepare of {} on {}", r.name, agent.node);
                assert_eq!(result.devices.len(), ours, "devices of {}", r.name);
                let spec = agent.dirs.cdi.join(format!("ainic.amd.com-{}.json", r.uid));
                let text = std::fs::read_to_string(&spec).unwrap();
                for device in &result.devices {
                    for id in &device.cdi_device_ids {
                        // The device's own ID, or the mount of its request's metadata.
                        let (dir, name) = match id.strip_prefix("amd.com/ainic=") {
                            Some(name) => (text.clone(), name.to_string()),
                            None => {
                                let name = id.strip_prefix("ainic.amd.com/metadata=").unwrap();
                                let file = agent
                                    .dirs
                                    .cdi
                                    .join(format!("ainic.amd.com_metadata_{name}.json"));
                                (std::fs::read_to_string(&file).unwrap(), name.to_string())
                            }
                        };
                        assert!(dir.contains(&name), "no CDI spec names {id}");
                    }
                }
                device_status(&api, &r.name, ours).await;
                refs.push(r);
            }
        }
        let answer = plugin.unprepare_v1(&refs).await.unwrap();
        for r in &refs {
            assert_eq!(answer.claims[&r.uid].error, "", "unprepare of {}", r.name);
            device_status(&api, &r.name, 0).await;
        }
        let left: Vec<_> = std::fs::read_dir(&agent.dirs.cdi)
            .unwrap()
            .filter_map(|e| e.ok())
            .collect();
        assert!(
            left.is_empty(),
            "CDI files left on {}: {left:?}",
            agent.node
        );
    }
}
