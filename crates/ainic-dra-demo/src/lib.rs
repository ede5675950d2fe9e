//! `ainic-dra demo`: the whole driver at work on one machine, no cluster.
//!
//! Three nodes of the bundled `mi300x-8gpu-8nic` topology are laid out as
//! sysfs trees; a real `ainic-dra node` runs for each, against the
//! in-process API server stand-in, registering with testkit's kubelet
//! simulator over real unix sockets. The example claims of every use case
//! are allocated as kube-scheduler would, prepared through the kubelet
//! API (CDI specs written), shown as a container would get them, and
//! unprepared. Each step checks its outcome; any surprise is an error.

mod fabric_job;
mod kubelet;
mod prepare;
mod schedule;
mod show;
mod usecases;
pub mod world;

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result};
use k8s_openapi::api::resource::v1::ResourceSlice;
use testkit::kubelet::DraPluginClient;

use show::Story;
use world::World;

/// Runs the demo; `keep` leaves every file in that directory.
pub async fn run(keep: Option<&Path>) -> Result<()> {
    let mut story = Story::new();
    println!("ainic-dra demo: the DRA driver for AMD AI NICs, end to end, without a cluster.");

    story.chapter("Lay out three nodes as sysfs trees");
    let mut world = World::create(keep).await?;
    show_nodes(&story, &world)?;

    story.chapter("Start a node agent per node");
    world.start_agents()?;
    let mut plugins = Vec::new();
    for dirs in &world.nodes {
        plugins.push(kubelet::register(&dirs.registry, world::DRIVER).await?);
    }
    story.ok("each agent registered with the kubelet (simulator) over its -reg.sock");
    let slices = world.wait_for_slices().await?;
    show_slices(&story, &slices);

    story.chapter("Schedule the example claims (the scheduler's allocator)");
    let placed = usecases::run_all(&story, &world, &slices)?;

    story.chapter("Prepare on the nodes (kubelet -> NodePrepareResources)");
    prepare::prepare_all(&story, &world, &plugins_by_node(&world, &plugins), &placed).await?;

    story.chapter("Unprepare (the pods are gone)");
    prepare::unprepare_all(&story, &world, &plugins_by_node(&world, &plugins), &placed).await?;

    story.chapter("Stop the agents");
    export(&world)?;
    let stopped = world.stop_agents().await?;
    story.ok(&format!("{stopped} agents stopped on SIGTERM"));
    println!();
    println!("Done in {:.1} s.", story.elapsed());
    match keep {
        Some(dir) => println!(
            "Files kept in {}: sysfs trees, agent logs, CDI specs as prepared, slices.yaml, claims.yaml.",
            dir.display()
        ),
        None => {
            println!("Run `ainic-dra demo --keep DIR` to keep the files; see docs/use-cases.md.")
        }
    }
    Ok(())
}

fn plugins_by_node<'a>(
    world: &World,
    plugins: &'a [DraPluginClient],
) -> Vec<(String, &'a DraPluginClient)> {
    world
        .nodes
        .iter()
        .map(|n| n.name.clone())
        .zip(plugins.iter())
        .collect()
}

fn show_nodes(story: &Story, world: &World) -> Result<()> {
    let mut rows = Vec::new();
    for ((name, fabric), dirs) in world::NODES.iter().zip(&world.nodes) {
        let inventory = topology::discover(&dirs.sysfs, &Default::default())?;
        rows.push(vec![
            name.to_string(),
            world::TOPOLOGY.to_string(),
            inventory.gpus.len().to_string(),
            inventory.nics.len().to_string(),
            fabric.to_string(),
        ]);
    }
    story.table(&["NODE", "TOPOLOGY", "GPUS", "NICS", "FABRIC"], &rows);
    story.note(&format!("under {}", world.base.display()));
    story.step(
        "API server stand-in up: Nodes, DeviceClasses ainic-pf/vf/shared, a GPU driver's slices",
    );
    Ok(())
}

/// A device's attribute (string or int) as text; `-` when absent.
pub fn attribute(slices: &[ResourceSlice], pool: &str, device: &str, name: &str) -> String {
    let found = slices
        .iter()
        .filter(|s| s.spec.pool.name == pool)
        .flat_map(|s| s.spec.devices.iter().flatten())
        .find(|d| d.name == device)
        .and_then(|d| d.attributes.as_ref()?.get(name).cloned());
    match found {
        Some(a) => a
            .string
            .or(a.version)
            .or(a.int.map(|i| i.to_string()))
            .or(a.bool.map(|b| b.to_string()))
            .unwrap_or_default(),
        None => "-".into(),
    }
}

fn show_slices(story: &Story, slices: &[ResourceSlice]) {
    let nodes: BTreeSet<&str> = slices.iter().map(|s| s.spec.pool.name.as_str()).collect();
    let mut rows = Vec::new();
    for node in &nodes {
        let pool: Vec<&ResourceSlice> = slices
            .iter()
            .filter(|s| s.spec.pool.name == *node)
            .collect();
        let devices: Vec<_> = pool
            .iter()
            .flat_map(|s| s.spec.devices.iter().flatten())
            .collect();
        let shared = devices
            .iter()
            .filter(|d| d.allow_multiple_allocations == Some(true))
            .count();
        rows.push(vec![
            node.to_string(),
            pool.len().to_string(),
            devices.len().to_string(),
            shared.to_string(),
            attribute(slices, node, &devices[0].name, "ainic.amd.com/fabric"),
        ]);
    }
    story.ok("every agent published its node's ResourceSlices");
    story.table(&["NODE", "SLICES", "DEVICES", "SHARED", "FABRIC"], &rows);
    story.step("node-a's devices, as the scheduler sees them:");
    let mut rows = Vec::new();
    let node_a = slices.iter().filter(|s| s.spec.pool.name == "node-a");
    for device in node_a.flat_map(|s| s.spec.devices.iter().flatten()) {
        let a = |n: &str| attribute(slices, "node-a", &device.name, n);
        let bandwidth = device
            .capacity
            .as_ref()
            .and_then(|c| c.get("ainic.amd.com/bandwidth"))
            .map_or("-".to_string(), |c| c.value.0.clone());
        rows.push(vec![
            device.name.clone(),
            a("ainic.amd.com/ifName"),
            a("resource.kubernetes.io/numaNode"),
            a("resource.kubernetes.io/pcieRoot"),
            format!(
                "{} {}",
                a("ainic.amd.com/nearestGPU"),
                a("ainic.amd.com/gpuAffinity")
            ),
            a("ainic.amd.com/rail"),
            a("ainic.amd.com/leafSwitch"),
            bandwidth,
            if device.allow_multiple_allocations == Some(true) {
                "shared"
            } else {
                ""
            }
            .into(),
        ]);
    }
    story.table(
        &[
            "DEVICE",
            "NETDEV",
            "NUMA",
            "PCIE ROOT",
            "NEAREST GPU",
            "RAIL",
            "LEAF",
            "BW",
            "",
        ],
        &rows,
    );
}

/// The API's slices (every driver) and claims as YAML next to the other
/// files, for `--keep`.
fn export(world: &World) -> Result<()> {
    let slices: Vec<ResourceSlice> = world.api.list();
    let claims: Vec<k8s_openapi::api::resource::v1::ResourceClaim> = world.api.list();
    let write = |name: &str, docs: Vec<String>| {
        std::fs::write(world.base.join(name), docs.join("---\n"))
            .with_context(|| format!("failed to write {name}"))
    };
    write(
        "slices.yaml",
        slices
            .iter()
            .map(serde_yaml_ng::to_string)
            .collect::<Result<_, _>>()?,
    )?;
    write(
        "claims.yaml",
        claims
            .iter()
            .map(serde_yaml_ng::to_string)
            .collect::<Result<_, _>>()?,
    )?;
    Ok(())
}
