//! The demo's fabric-domain story: jobs that name no partition. The demo
//! plays `ainic-dra controller` (one partition device per fabric
//! partition, from the agents' slices, and the partition node labels its
//! slices select on) and places the jobs' pods one after another with
//! `allocator::place_pods`, the placement `ainic-dra simulate` does: job A
//! (two pods sharing a claim of class `ainic-fabric` for two nodes) gets
//! partition pod-a, and job B, asking for the same, finds pod-a full and
//! pod-b too small, so it stays pending with the reason.

use std::collections::{BTreeMap, BTreeSet};

use allocator::{Features, Placement, Scenario};
use anyhow::{Context, Result, bail};
use dra_model::partitions;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use serde_json::{Value, json};

use super::schedule::NAMESPACE;
use super::show::Story;
use super::usecases::Placed;
use super::world::{DRIVER, World};

/// The job of examples/fabric-job/job.yaml.
const JOB: &str = include_str!("../../../examples/fabric-job/job.yaml");

/// The example's objects renamed for job `job` (its claim, its pods and
/// their references), in the demo namespace.
fn job_objects(job: &str) -> Result<Vec<Value>> {
    let mut objects = allocator::documents(JOB).map_err(anyhow::Error::msg)?;
    for object in &mut objects {
        object["metadata"]["namespace"] = json!(NAMESPACE);
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let renamed = name.replace("job-a", job);
        object["metadata"]["name"] = json!(renamed);
        for claim in object["spec"]["resourceClaims"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            if claim["resourceClaimName"] == "job-a" {
                claim["resourceClaimName"] = json!(job);
            }
        }
    }
    Ok(objects)
}

/// The cluster as the scheduler sees it, the controller's node labels
/// included.
fn cluster(world: &World, labels: &NodeLabels) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for node in world.api.list::<Node>() {
        let mut node = serde_json::to_value(node)?;
        let name = node["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        for (key, value) in labels.get(&name).into_iter().flatten() {
            node["metadata"]["labels"][*key] = json!(value);
        }
        out.push(node);
    }
    for class in world.api.list::<DeviceClass>() {
        out.push(serde_json::to_value(class)?);
    }
    for slice in world.api.list::<ResourceSlice>() {
        out.push(serde_json::to_value(slice)?);
    }
    for claim in world.api.list::<ResourceClaim>() {
        if claim
            .status
            .as_ref()
            .is_some_and(|s| s.allocation.is_some())
        {
            out.push(serde_json::to_value(claim)?);
        }
    }
    Ok(out)
}

/// Per node, the controller's fabric labels.
type NodeLabels = BTreeMap<String, BTreeMap<&'static str, String>>;

/// Runs the story; errors when a job does not land as it should.
pub(crate) fn run(
    story: &Story,
    world: &World,
    features: Features,
    placed: &mut Placed,
) -> Result<()> {
    story.step("Jobs that name no partition: each job's pods share one claim of class ainic-fabric for 2 nodes (examples/fabric-job/job.yaml), placed pod after pod as `ainic-dra simulate` does:");
    let agents: Vec<ResourceSlice> = world.api.list();
    let found = partitions::partitions(&agents, DRIVER);
    let partition_slices = partitions::partition_slices(&found, DRIVER, true);
    let labels = partitions::node_fabric_labels(&found).nodes;
    for slice in &partition_slices {
        world.api.seed(slice);
    }
    story.ok(&format!(
        "the controller's part: {} partition devices ({}), the node label {}",
        partition_slices.len(),
        found
            .iter()
            .map(|(n, p)| format!(
                "{n} on {}",
                p.nodes.iter().cloned().collect::<Vec<_>>().join(" and ")
            ))
            .collect::<Vec<_>>()
            .join(", "),
        partitions::LABEL_PARTITION
    ));
    let mut objects = cluster(world, &labels)?;
    objects.extend(job_objects("job-a")?);
    let mut job_b = job_objects("job-b")?;
    job_b.retain(|o| o["metadata"]["name"] != "job-b-1");
    job_b.retain(|o| o["kind"] != "ResourceClaimTemplate");
    objects.extend(job_b);
    let scenario = Scenario::from_objects(objects).map_err(anyhow::Error::msg)?;
    let placements = allocator::place_pods(&scenario, features).map_err(anyhow::Error::msg)?;
    let mut partitions_used = BTreeSet::new();
    for placement in &placements {
        report(
            story,
            world,
            placement,
            &labels,
            placed,
            &mut partitions_used,
        )?;
    }
    if partitions_used.len() != 1 {
        bail!("job-a's pods landed in partitions {partitions_used:?}");
    }
    story.note(
        "job-a took all of pod-a's room; pod-b has one node, so job-b waits until a job ends.",
    );
    Ok(())
}

/// Prints where one pod went, stores its new claims, and checks job-a
/// lands and job-b does not.
fn report(
    story: &Story,
    world: &World,
    placement: &Placement,
    labels: &NodeLabels,
    placed: &mut Placed,
    partitions_used: &mut BTreeSet<String>,
) -> Result<()> {
    let pod = placement.pod.trim_start_matches(&format!("{NAMESPACE}/"));
    match (&placement.outcome, pod.starts_with("job-a")) {
        (Ok((node, claims)), true) => {
            let partition = (labels.get(node))
                .and_then(|l| l.get(partitions::LABEL_PARTITION))
                .cloned()
                .unwrap_or_default();
            let nic = (claims.iter())
                .flat_map(super::schedule::results)
                .find(|r| r.pool == *node)
                .map(|r| r.device)
                .unwrap_or_default();
            story.ok(&format!("{pod} -> {node} {nic} (partition {partition})"));
            partitions_used.insert(partition);
            let stored: Vec<ResourceClaim> = claims
                .iter()
                .map(|c| store(world, c))
                .collect::<Result<_>>()?;
            // The kubelet prepares a claim once per node, however many of
            // the node's pods share it.
            let new: Vec<ResourceClaim> = (stored.into_iter())
                .filter(|c| {
                    !placed
                        .claims
                        .iter()
                        .any(|(n, p)| n == node && p.metadata.uid == c.metadata.uid)
                })
                .collect();
            placed.add(node, new);
            Ok(())
        }
        (Err(why), false) => {
            // "0/3 nodes are available; node A: why; node B: why".
            let mut parts = why.split("; node ");
            story.refused(&format!(
                "{pod} stays Pending: {}",
                parts.next().unwrap_or_default()
            ));
            for part in parts {
                story.note(&format!("node {part}"));
            }
            Ok(())
        }
        (outcome, _) => bail!("{pod}: unexpected placement {outcome:?}"),
    }
}

/// The claim as stored in the demo's API (stored once; a shared claim the
/// second pod uses is the stored one).
fn store(world: &World, claim: &ResourceClaim) -> Result<ResourceClaim> {
    let name = claim
        .metadata
        .name
        .clone()
        .context("claim without a name")?;
    if let Some(stored) = world.api.get::<ResourceClaim>(Some(NAMESPACE), &name) {
        return Ok(stored);
    }
    Ok(world.api.seed(claim))
}
