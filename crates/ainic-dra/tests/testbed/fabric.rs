//! Fabric domains, judged by the real kube-scheduler: four fake nodes in
//! two RDMA fabric partitions, their agents publishing the `fabric`
//! attribute from node labels, and `ainic-dra controller` publishing one
//! device per partition. Jobs whose pods share one claim of class
//! `ainic-fabric` (plus a NIC each from a template) land wholly in one
//! partition without naming it; a job that fits no partition stays
//! pending with the scheduler's reason; moving a node to the other
//! partition updates the partition slices; stopping the controller leaves
//! the running pods and their claims alone. The controller also keeps
//! the rail-group and leaf labels, counts how full each partition is, and
//! tells a claim that fits none why. `simulate`, given what the
//! API server holds before the jobs start, predicts the same placements.
//!
//! Runs on a control plane of its own: the controller labels every Node
//! and publishes for every agent, which must not reach other tests. The
//! controller runs as the chart's controller service account.

use std::collections::BTreeMap;
use std::process::Command;

use dra_model::partitions::{LABEL_LEAF, LABEL_PARTITION, LABEL_RAIL_GROUP};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use testkit::testbed::{UpOptions, Version, cluster, wait};

use crate::support::{DRIVER, NodeAgent, expected_slices, own_bed, published, start_controller};

const NAMESPACE: &str = "jobs";
const X: [&str; 2] = ["fab-x1", "fab-x2"];
const Y: [&str; 2] = ["fab-y1", "fab-y2"];

/// Each partition device's `nodesAllocated`, by pool.
async fn allocated(client: &kube::Client) -> BTreeMap<String, i64> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await.unwrap();
    (list.items.into_iter())
        .filter(|s| s.spec.pool.name.starts_with("fabric/"))
        .map(|s| {
            let device = &s.spec.devices.as_ref().unwrap()[0];
            let attrs = device.attributes.as_ref().unwrap();
            let n = attrs[&format!("{DRIVER}/nodesAllocated")].int.unwrap();
            (s.spec.pool.name.clone(), n)
        })
        .collect()
}

/// The controller's partition slices: pool name -> (nodeCount, resourceVersion).
async fn partition_slices(client: &kube::Client) -> BTreeMap<String, (i64, String)> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default().fields(&format!("spec.driver={DRIVER}")))
        .await
        .unwrap();
    list.items
        .into_iter()
        .filter(|s| s.spec.pool.name.starts_with("fabric/"))
        .map(|s| {
            let device = &s.spec.devices.as_ref().unwrap()[0];
            let attrs = device.attributes.as_ref().unwrap();
            let nodes = attrs[&format!("{DRIVER}/nodeCount")].int.unwrap();
            (
                s.spec.pool.name.clone(),
                (
                    nodes,
                    s.metadata.resource_version.clone().unwrap_or_default(),
                ),
            )
        })
        .collect()
}

async fn wait_partitions(client: &kube::Client, want: &[(&str, i64)], log: &std::path::Path) {
    let want: BTreeMap<String, i64> = want.iter().map(|(p, n)| (p.to_string(), *n)).collect();
    wait::until("the partition slices", wait::DEADLINE, || async {
        let got: BTreeMap<String, i64> = (partition_slices(client).await.into_iter())
            .map(|(p, (n, _))| (p, n))
            .collect();
        if got == want {
            Ok(())
        } else {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            Err(format!(
                "{got:?}; controller log:\n{}",
                crate::support::tail(&log, 8)
            ))
        }
    })
    .await;
}

/// The objects of `examples/fabric-job/job.yaml`, with `job-a` renamed `job`.
fn example(job: &str) -> Vec<serde_json::Value> {
    let path = testkit::testbed::repo_root().join("examples/fabric-job/job.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("job-a", job);
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

fn of_kind<T: serde::de::DeserializeOwned>(objects: &[serde_json::Value], kind: &str) -> Vec<T> {
    (objects.iter())
        .filter(|o| o["kind"] == kind)
        .map(|o| serde_json::from_value(o.clone()).unwrap())
        .collect()
}

/// The pod's node once bound, or its scheduling condition's message.
async fn placement(pods: &Api<Pod>, name: &str) -> Result<String, String> {
    let pod = pods.get(name).await.map_err(|e| e.to_string())?;
    if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
        return Ok(node);
    }
    let conditions = pod.status.and_then(|s| s.conditions).unwrap_or_default();
    let scheduled = conditions.iter().find(|c| c.type_ == "PodScheduled");
    Err(scheduled
        .and_then(|c| c.message.clone())
        .unwrap_or_default())
}

/// Starts the example job as `job` and waits until its two pods are bound;
/// their nodes.
async fn run_job(pods: &Api<Pod>, claims: &Api<ResourceClaim>, job: &str) -> Vec<String> {
    let objects = example(job);
    for claim in of_kind::<ResourceClaim>(&objects, "ResourceClaim") {
        claims.create(&PostParams::default(), &claim).await.unwrap();
    }
    let mut nodes = Vec::new();
    for pod in of_kind::<Pod>(&objects, "Pod") {
        let name = pod.metadata.name.clone().unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
        let node = wait::until(&format!("pod {name} bound"), wait::DEADLINE, || async {
            placement(pods, &name).await
        })
        .await;
        nodes.push(node);
    }
    nodes
}

/// The Nodes, slices and classes the API server holds now.
async fn cluster_objects(client: &kube::Client) -> Vec<serde_json::Value> {
    let lp = ListParams::default();
    let nodes = Api::<Node>::all(client.clone())
        .list(&lp)
        .await
        .unwrap()
        .items;
    let slices = Api::<ResourceSlice>::all(client.clone())
        .list(&lp)
        .await
        .unwrap()
        .items;
    let classes = Api::<DeviceClass>::all(client.clone())
        .list(&lp)
        .await
        .unwrap()
        .items;
    let mut objects: Vec<serde_json::Value> = Vec::new();
    objects.extend(nodes.iter().map(|o| json!(o)));
    objects.extend(slices.iter().map(|o| json!(o)));
    objects.extend(classes.iter().map(|o| json!(o)));
    objects
}

/// `ainic-dra simulate` placing the pods of `objects`: its exit status
/// and each pod's node (`None`: pending).
fn simulate(
    objects: &[serde_json::Value],
    dir: &std::path::Path,
) -> (Option<i32>, BTreeMap<String, Option<String>>) {
    std::fs::create_dir_all(dir).unwrap();
    let input = dir.join("objects.json");
    std::fs::write(&input, serde_json::to_vec(objects).unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .args(["simulate", "-o", "json", "-f"])
        .arg(&input)
        .output()
        .unwrap();
    let report: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let placed = (report.iter())
        .map(|p| {
            let pod = p["pod"].as_str().unwrap();
            let pod = pod
                .rsplit_once('/')
                .map_or(pod, |(_, name)| name)
                .to_string();
            (pod, p["node"].as_str().map(str::to_string))
        })
        .collect();
    (out.status.code(), placed)
}

/// What `simulate` predicts for jobs a, b and c, from what the API server
/// holds now: each pod's partition, or `None` when it stays pending.
async fn simulated(
    client: &kube::Client,
    dir: &std::path::Path,
) -> BTreeMap<String, Option<&'static str>> {
    let mut objects = cluster_objects(client).await;
    objects.extend(example("job-a"));
    for job in ["job-b", "job-c"] {
        objects.extend(
            example(job)
                .into_iter()
                .filter(|o| o["kind"] != "ResourceClaimTemplate"),
        );
    }
    let (code, placed) = simulate(&objects, dir);
    assert_eq!(code, Some(3), "job-c cannot be placed");
    (placed.into_iter())
        .map(|(pod, node)| (pod, node.as_deref().map(partition_of)))
        .collect()
}

fn partition_of(node: &str) -> &'static str {
    if node.starts_with("fab-x") { "x" } else { "y" }
}

#[tokio::test]
async fn a_jobs_pods_land_in_one_partition_without_naming_it() {
    let bed = own_bed(UpOptions {
        version: Some(Version::V1_37),
        ..UpOptions::default()
    })
    .await;
    let client = bed.client().await;
    cluster::namespace(&client, NAMESPACE).await;
    let mut agents = Vec::new();
    for (nodes, fabric) in [(X, "fab-x"), (Y, "fab-y")] {
        for node in nodes {
            let labels = BTreeMap::from([
                (format!("{DRIVER}/fabric"), fabric.to_string()),
                (format!("{DRIVER}/leaf-switch"), format!("{fabric}-leaf")),
            ]);
            agents.push(NodeAgent::start(bed, node, "mi300x-8gpu-8nic", &labels, &[]).await);
        }
    }
    let count = expected_slices("mi300x-8gpu-8nic", "n", &[]).len();
    for agent in &agents {
        published(&client, agent, count).await;
    }

    let log = bed.dir().join("controller.log");
    let controller = start_controller(bed, &log).await;
    wait_partitions(&client, &[("fabric/fab-x", 2), ("fabric/fab-y", 2)], &log).await;
    let nodes: Api<Node> = Api::all(client.clone());
    for node in X {
        let labels = nodes.get(node).await.unwrap().metadata.labels.unwrap();
        assert_eq!(labels[LABEL_PARTITION], "fab-x", "{node}");
        // One leaf per node here: rail group and leaf both name it.
        assert_eq!(labels[LABEL_RAIL_GROUP], "fab-x-leaf", "{node}");
        assert_eq!(labels[LABEL_LEAF], "fab-x-leaf", "{node}");
    }
    // At rest the controller writes nothing.
    let before = partition_slices(&client).await;
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    assert_eq!(partition_slices(&client).await, before, "writes at rest");

    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), NAMESPACE);
    for template in of_kind::<ResourceClaimTemplate>(&example("job-a"), "ResourceClaimTemplate") {
        templates
            .create(&PostParams::default(), &template)
            .await
            .unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);

    // What simulate predicts before the jobs start: the same pattern.
    let predicted = simulated(&client, &bed.dir().join("simulate")).await;
    eprintln!("simulate: {predicted:?}");
    let (pa, pb) = (predicted["job-a-0"].unwrap(), predicted["job-b-0"].unwrap());
    assert_eq!(predicted["job-a-1"], Some(pa), "{predicted:?}");
    assert_eq!(predicted["job-b-1"], Some(pb), "{predicted:?}");
    assert_ne!(pa, pb, "{predicted:?}");
    assert_eq!((predicted["job-c-0"], predicted["job-c-1"]), (None, None));

    // Job A fills one partition, job B the other: each wholly in one, and
    // each claim's allocation pins its pods to that partition's label.
    let a = run_job(&pods, &claims, "job-a").await;
    assert_eq!(partition_of(&a[0]), partition_of(&a[1]), "job-a on {a:?}");
    let b = run_job(&pods, &claims, "job-b").await;
    assert_eq!(partition_of(&b[0]), partition_of(&b[1]), "job-b on {b:?}");
    assert_ne!(partition_of(&a[0]), partition_of(&b[0]), "a {a:?}, b {b:?}");
    for (job, on) in [("job-a", &a), ("job-b", &b)] {
        let claim = claims.get(job).await.unwrap();
        let allocation = claim.status.and_then(|s| s.allocation).unwrap();
        let selector = serde_json::to_string(&allocation.node_selector).unwrap();
        let label = format!("fab-{}", partition_of(&on[0]));
        assert!(
            selector.contains(LABEL_PARTITION) && selector.contains(&format!("\"{label}\"")),
            "{job}: {selector}"
        );
    }

    // Job C fits no partition: pending, and the scheduler says why.
    let c = example("job-c");
    let claim = &of_kind::<ResourceClaim>(&c, "ResourceClaim")[0];
    claims.create(&PostParams::default(), claim).await.unwrap();
    let first = &of_kind::<Pod>(&c, "Pod")[0];
    pods.create(&PostParams::default(), first).await.unwrap();
    let reason = wait::until("job-c-0 unschedulable", wait::DEADLINE, || async {
        match placement(&pods, "job-c-0").await {
            Ok(node) => panic!("job-c-0 was bound to {node}"),
            Err(message) if message.contains("cannot allocate all claims") => Ok(message),
            Err(message) => Err(message),
        }
    })
    .await;
    eprintln!("job-c-0: {reason}");
    // How full each partition is, on its device; and job C's claim is told
    // why it fits none.
    let full = BTreeMap::from([
        ("fabric/fab-x".to_string(), 2),
        ("fabric/fab-y".to_string(), 2),
    ]);
    wait::until("partitions counted full", wait::DEADLINE, || async {
        let now = allocated(&client).await;
        if now == full {
            Ok(())
        } else {
            Err(format!("{now:?}"))
        }
    })
    .await;
    let events: Api<Event> = Api::namespaced(client.clone(), NAMESPACE);
    let note = wait::until("job-c's claim told", wait::DEADLINE, || async {
        let list = events.list(&ListParams::default()).await.unwrap().items;
        let told = list.into_iter().find(|e| {
            e.reason.as_deref() == Some("NoFabricPartitionFits")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("job-c")
        });
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        let start = (log.len().saturating_sub(2000)..log.len())
            .find(|i| log.is_char_boundary(*i))
            .unwrap_or(0);
        let log = &log[start..];
        told.and_then(|e| e.note)
            .ok_or_else(|| format!("no event yet; controller log:\n{log}"))
    })
    .await;
    assert_eq!(
        note,
        "no fabric partition has room for 2 nodes: fab-x 0 of 2 free, fab-y 0 of 2 free"
    );

    // A node moved to the other partition: the slices follow.
    let moved = Y[1];
    let patch = json!({"metadata": {"labels": {format!("{DRIVER}/fabric"): "fab-x"}}});
    nodes
        .patch(moved, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_partitions(&client, &[("fabric/fab-x", 3), ("fabric/fab-y", 1)], &log).await;
    let labels = nodes.get(moved).await.unwrap().metadata.labels.unwrap();
    assert_eq!(labels[LABEL_PARTITION], "fab-x");

    // Without the controller, the bound pods and their claims stay.
    drop(controller);
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    for (job, nodes) in [("job-a", &a), ("job-b", &b)] {
        let claim = claims.get(job).await.unwrap();
        let allocation = claim.status.and_then(|s| s.allocation);
        assert!(allocation.is_some(), "{job} lost its allocation");
        for (i, node) in nodes.iter().enumerate() {
            assert_eq!(
                placement(&pods, &format!("{job}-{i}")).await.as_ref(),
                Ok(node)
            );
        }
    }
    assert_eq!(partition_slices(&client).await.len(), 2, "slices kept");
}

/// The PodGroup variant (examples/fabric-job/podgroup.yaml), on a 1.37
/// control plane of its own with GenericWorkload and
/// DRAWorkloadResourceClaims on: partition pg-x has two nodes, pg-y one,
/// and a gang of two whose PodGroup owns the partition claim lands wholly
/// in pg-x, its one claim reserved for the group.
#[tokio::test]
async fn a_pod_groups_claim_keeps_its_gang_in_one_partition() {
    use kube::api::{ApiResource, DynamicObject};
    let bed = own_bed(UpOptions {
        version: Some(Version::V1_37),
        feature_gates: Some("GenericWorkload=true,DRAWorkloadResourceClaims=true".into()),
        runtime_config: Some("scheduling.k8s.io/v1beta1=true".into()),
        ..UpOptions::default()
    })
    .await;
    let client = bed.client().await;
    cluster::namespace(&client, NAMESPACE).await;
    let mut agents = Vec::new();
    for (node, fabric) in [("pg-x1", "pg-x"), ("pg-x2", "pg-x"), ("pg-y1", "pg-y")] {
        let labels = BTreeMap::from([(format!("{DRIVER}/fabric"), fabric.to_string())]);
        agents.push(NodeAgent::start(bed, node, "mi300x-8gpu-8nic", &labels, &[]).await);
    }
    let count = expected_slices("mi300x-8gpu-8nic", "n", &[]).len();
    for agent in &agents {
        published(&client, agent, count).await;
    }
    let log = bed.dir().join("controller.log");
    let _controller = start_controller(bed, &log).await;
    wait_partitions(&client, &[("fabric/pg-x", 2), ("fabric/pg-y", 1)], &log).await;

    let path = testkit::testbed::repo_root().join("examples/fabric-job/podgroup.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let objects: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), NAMESPACE);
    for template in of_kind::<ResourceClaimTemplate>(&objects, "ResourceClaimTemplate") {
        templates
            .create(&PostParams::default(), &template)
            .await
            .unwrap();
    }
    // Pods and the PodGroup as sent (the typed Pod may lack schedulingGroup).
    let group = kube::core::GroupVersionKind::gvk("scheduling.k8s.io", "v1beta1", "PodGroup");
    let groups: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &ApiResource::from_gvk(&group));
    let raw_pods: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &ApiResource::erase::<Pod>(&()));
    for object in &objects {
        let api = match object["kind"].as_str() {
            Some("PodGroup") => &groups,
            Some("Pod") => &raw_pods,
            _ => continue,
        };
        let object: DynamicObject = serde_json::from_value(object.clone()).unwrap();
        api.create(&PostParams::default(), &object).await.unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let mut nodes = Vec::new();
    for name in ["job-g-0", "job-g-1"] {
        let node = wait::until(&format!("pod {name} bound"), wait::DEADLINE, || async {
            placement(&pods, name).await
        })
        .await;
        nodes.push(node);
    }
    assert!(
        nodes.iter().all(|n| n.starts_with("pg-x")),
        "the gang went to {nodes:?}"
    );

    // One claim for the group, reserved for the PodGroup, pinned to pg-x.
    let mut fabric_claims = Vec::new();
    for name in ["job-g-0", "job-g-1"] {
        let status = pods.get(name).await.unwrap().status.unwrap();
        let claim = (status
            .resource_claim_statuses
            .unwrap_or_default()
            .into_iter())
        .find(|s| s.name == "fabric")
        .and_then(|s| s.resource_claim_name)
        .expect("the pod names its fabric claim");
        fabric_claims.push(claim);
    }
    assert_eq!(
        fabric_claims[0], fabric_claims[1],
        "one claim for the group"
    );
    assert!(
        fabric_claims[0].starts_with("job-g-fabric-"),
        "{fabric_claims:?}"
    );
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let claim = claims.get(&fabric_claims[0]).await.unwrap();
    let status = claim.status.unwrap();
    let reserved: Vec<(String, String, String)> =
        (status.reserved_for.unwrap_or_default().into_iter())
            .map(|r| (r.api_group.unwrap_or_default(), r.resource, r.name))
            .collect();
    assert_eq!(
        reserved,
        [(
            "scheduling.k8s.io".to_string(),
            "podgroups".to_string(),
            "job-g".to_string()
        )]
    );
    let selector = serde_json::to_string(&status.allocation.unwrap().node_selector).unwrap();
    assert!(
        selector.contains(LABEL_PARTITION) && selector.contains("\"pg-x\""),
        "{selector}"
    );
}
