//! The four use cases, scheduled: a job inside one fabric partition, GPU +
//! NIC pairs at PCIe-switch precision, one NIC shared by bandwidth, a CEL
//! constraint, a pod that cannot be placed, with the reason, and jobs that
//! name no partition ([`super::fabric_job`]). Each
//! checks its own outcome against the published attributes.

use anyhow::{Result, bail};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};

use super::attribute;
use super::schedule::{Placement, Scheduler, claim_from_example, device_for, examples, results};
use super::show::Story;
use super::world::{self, DRIVER, GPU_DRIVER, World};

/// Every claim the use cases placed, with its node.
pub(crate) struct Placed {
    /// `(node, stored claim)` in the order they were placed.
    pub claims: Vec<(String, ResourceClaim)>,
}

impl Placed {
    /// Records `claims` as placed on `node`.
    pub(crate) fn add(&mut self, node: &str, claims: Vec<ResourceClaim>) {
        self.claims
            .extend(claims.into_iter().map(|c| (node.to_string(), c)));
    }
}

/// Runs every use case; errors when one does not turn out as it should.
pub(crate) fn run_all(story: &Story, world: &World, slices: &[ResourceSlice]) -> Result<Placed> {
    let scheduler = Scheduler::new(&world.api, world::GATES)?;
    let mut placed = Placed { claims: Vec::new() };
    fabric_job(story, &scheduler, slices, &mut placed)?;
    pairing(story, &scheduler, slices, &mut placed)?;
    sharing(story, &scheduler, &mut placed)?;
    min_bandwidth(story, &scheduler, slices, &mut placed)?;
    unschedulable(story, &scheduler)?;
    super::fabric_job::run(story, world, scheduler.features(), &mut placed)?;
    Ok(placed)
}

fn place_one(
    scheduler: &Scheduler,
    claim: ResourceClaim,
    nodes: &[&str],
) -> Result<(String, ResourceClaim)> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    match scheduler.place(&[claim], nodes)? {
        Placement::Placed { node, mut claims } => Ok((node, claims.remove(0))),
        Placement::Unschedulable(why) => bail!("{name} could not be placed: {why:?}"),
    }
}

fn fabric_job(
    story: &Story,
    s: &Scheduler,
    slices: &[ResourceSlice],
    placed: &mut Placed,
) -> Result<()> {
    story.step("A job whose pods all need a NIC on rail 0 of fabric partition pod-a (examples/fabric-partition.yaml):");
    let order = ["node-c", "node-a", "node-b"];
    for pod in ["job-0", "job-1"] {
        let claim = claim_from_example(examples::FABRIC, pod)?;
        let (node, claim) = place_one(s, claim, &order)?;
        let nic = device_for(&claim, "nic", DRIVER).unwrap_or_default();
        let fabric = attribute(slices, &node, &nic, "ainic.amd.com/fabric");
        let rail = attribute(slices, &node, &nic, "ainic.amd.com/rail");
        if fabric != "pod-a" || rail != "0" {
            bail!("{pod} got {nic} on {node} (fabric {fabric}, rail {rail})");
        }
        story.ok(&format!(
            "{pod} -> {node} {nic} (fabric {fabric}, rail {rail})"
        ));
        placed.add(&node, vec![claim]);
    }
    story.note(
        "node-c is in partition pod-b: the scheduler filters it out for every pod of the job.",
    );
    Ok(())
}

fn pairing(
    story: &Story,
    s: &Scheduler,
    slices: &[ResourceSlice],
    placed: &mut Placed,
) -> Result<()> {
    story.step(
        "Two pods, each a GPU and the NIC on its PCIe switch (examples/gpu-nic-same-switch.yaml):",
    );
    let mut rows = Vec::new();
    for pod in ["trainer-0", "trainer-1"] {
        let claim = claim_from_example(examples::SAME_SWITCH, pod)?;
        let (node, claim) = place_one(s, claim, &["node-a"])?;
        let gpu = device_for(&claim, "gpu", GPU_DRIVER).unwrap_or_default();
        let nic = device_for(&claim, "nic", DRIVER).unwrap_or_default();
        let gpu_address = attribute(&s.slices(), &node, &gpu, world::PAIRING_ATTRIBUTE);
        let nearest = attribute(slices, &node, &nic, "ainic.amd.com/nearestGPU");
        let affinity = attribute(slices, &node, &nic, "ainic.amd.com/gpuAffinity");
        if nearest != gpu_address || affinity != "PIX" {
            bail!(
                "{pod}: {gpu} ({gpu_address}) paired with {nic}, whose nearest GPU is {nearest} ({affinity})"
            );
        }
        rows.push(vec![
            pod.into(),
            node.clone(),
            gpu,
            gpu_address,
            nic,
            affinity,
        ]);
        placed.add(&node, vec![claim]);
    }
    story.table(
        &["POD", "NODE", "GPU", "GPU ADDRESS", "NIC", "AFFINITY"],
        &rows,
    );
    story.note("gpu-0's own NIC is taken by job-0, so trainer-0 gets gpu-1 and its switch-mate.");
    Ok(())
}

fn sharing(story: &Story, s: &Scheduler, placed: &mut Placed) -> Result<()> {
    story.step("Three pods sharing one NIC, 100 Gb/s each (examples/shared-nic.yaml, DRAConsumableCapacity):");
    let mut rows = Vec::new();
    let mut devices = Vec::new();
    let mut handed_out = 0;
    for pod in ["share-0", "share-1", "share-2"] {
        let claim = claim_from_example(examples::SHARED, pod)?;
        let (node, claim) = place_one(s, claim, &["node-a"])?;
        let result = results(&claim).into_iter().next().unwrap_or_default();
        let consumed = result
            .consumed_capacity
            .as_ref()
            .and_then(|c| c.get(BANDWIDTH))
            .map(|q| bits(&q.0))
            .transpose()?
            .unwrap_or_default();
        handed_out += consumed;
        devices.push(result.device.clone());
        rows.push(vec![
            pod.into(),
            node.clone(),
            result.device,
            gbps(consumed),
            result.share_id.unwrap_or_default(),
        ]);
        placed.add(&node, vec![claim]);
    }
    devices.dedup();
    if devices.len() != 1 {
        bail!("the shares landed on several NICs: {devices:?}");
    }
    let total = capacity(&s.slices(), "node-a", &devices[0])?;
    if handed_out > total {
        bail!(
            "{} handed out {} of {}",
            devices[0],
            gbps(handed_out),
            gbps(total)
        );
    }
    story.table(&["POD", "NODE", "NIC", "BANDWIDTH", "SHARE ID"], &rows);
    story.note(&format!(
        "{} ({}) has {} of its {} handed out; the scheduler refuses a share that does not fit.",
        devices[0],
        world::SHARED_PF,
        gbps(handed_out),
        gbps(total)
    ));
    Ok(())
}

const BANDWIDTH: &str = "ainic.amd.com/bandwidth";

/// A bandwidth quantity in bits/s.
fn bits(quantity: &str) -> Result<i64> {
    allocator::quantity::Quantity::parse(quantity)?
        .as_i64()
        .ok_or_else(|| anyhow::anyhow!("bandwidth {quantity} is not a whole number of bits/s"))
}

fn gbps(bits: i64) -> String {
    format!("{} Gb/s", bits as f64 / 1e9)
}

/// The bandwidth capacity of a device.
fn capacity(slices: &[ResourceSlice], node: &str, device: &str) -> Result<i64> {
    let value = slices
        .iter()
        .filter(|s| s.spec.pool.name == node && s.spec.driver == DRIVER)
        .flat_map(|s| s.spec.devices.iter().flatten())
        .find(|d| d.name == device)
        .and_then(|d| {
            d.capacity
                .as_ref()?
                .get(BANDWIDTH)
                .map(|c| c.value.0.clone())
        });
    match value {
        Some(v) => bits(&v),
        None => bail!("{device} publishes no bandwidth"),
    }
}

fn min_bandwidth(
    story: &Story,
    s: &Scheduler,
    slices: &[ResourceSlice],
    placed: &mut Placed,
) -> Result<()> {
    story.step("A CEL constraint: >= 200 Gb/s, NUMA-attached, not behind leaf-13 (examples/min-bandwidth.yaml):");
    let claim = claim_from_example(examples::MIN_BANDWIDTH, "fast-nic")?;
    let (node, claim) = place_one(s, claim, &["node-a"])?;
    let nic = device_for(&claim, "nic", DRIVER).unwrap_or_default();
    let leaf = attribute(slices, &node, &nic, "ainic.amd.com/leafSwitch");
    if leaf == "leaf-13" {
        bail!("fast-nic got {nic} behind leaf-13");
    }
    let leaf = if leaf == "-" {
        "none named".to_string()
    } else {
        leaf
    };
    story.ok(&format!("fast-nic -> {node} {nic} (leaf switch: {leaf})"));
    story.note(
        "NICs behind leaf-13 (the fabric config puts node-a's first two there) never qualify.",
    );
    placed.add(&node, vec![claim]);
    Ok(())
}

fn unschedulable(story: &Story, s: &Scheduler) -> Result<()> {
    story.step("A third pod of the job: no node has a free rail-0 NIC in pod-a left:");
    let claim = claim_from_example(examples::FABRIC, "job-2")?;
    match s.place(&[claim], &["node-a", "node-b", "node-c"])? {
        Placement::Placed { node, .. } => {
            bail!("job-2 was placed on {node}, but every rail-0 NIC of pod-a is taken")
        }
        Placement::Unschedulable(why) => {
            story.refused("job-2 stays Pending; the allocator says, per node:");
            for (node, reason) in why {
                story.note(&format!("{node}: {reason}"));
            }
        }
    }
    Ok(())
}
