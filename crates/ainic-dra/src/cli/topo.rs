//! `ainic-dra topo`: the GPU × NIC affinity matrix of a node.
//!
//! The table reads like `nvidia-smi topo -m`; `-o json` is the machine form
//! fixed by DESIGN.md §6: `{"gpus":[…],"nics":[…],"links":[{"gpu","nic","type"}]}`.

use std::fmt::Write as _;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use serde::Serialize;
use topology::{Affinity, Inventory, PciAddress};

use super::SysfsSource;

/// Arguments of `ainic-dra topo`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  ainic-dra topo --sysfs-root /sys\n  \
    ainic-dra topo --topology mi300x-8gpu-8nic -o json")]
pub struct TopoArgs {
    #[command(flatten)]
    source: SysfsSource,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = TopoFormat::Table)]
    output: TopoFormat,

    /// Also show SR-IOV virtual functions as columns of the table (the JSON
    /// form always lists every function).
    #[arg(long)]
    vfs: bool,
}

/// Output formats of `topo`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum TopoFormat {
    /// A GPU × NIC matrix with a legend, for people.
    Table,
    /// The DESIGN.md §6 JSON document, for machines.
    Json,
}

/// The JSON document of `topo -o json`.
#[derive(Serialize)]
struct TopoJson<'a> {
    gpus: Vec<PciAddress>,
    nics: Vec<PciAddress>,
    links: &'a [topology::GpuNicLink],
}

/// Runs `ainic-dra topo`.
pub fn run(args: TopoArgs) -> Result<()> {
    let root = args.source.open()?;
    let inventory = topology::discover(root.path(), &topology::DiscoveryConfig::default())
        .with_context(|| format!("failed to discover devices under {}", root.path().display()))?;
    let text = match args.output {
        TopoFormat::Json => json(&inventory)?,
        TopoFormat::Table => table(&inventory, args.vfs),
    };
    print!("{text}");
    Ok(())
}

fn json(inventory: &Inventory) -> Result<String> {
    let doc = TopoJson {
        gpus: inventory.gpus.iter().map(|g| g.address).collect(),
        nics: inventory.nics.iter().map(|n| n.address).collect(),
        links: &inventory.links,
    };
    Ok(serde_json::to_string_pretty(&doc)? + "\n")
}

/// The matrix: one row per GPU, one column per NIC, then the NIC and
/// affinity legends.
pub fn table(inventory: &Inventory, with_vfs: bool) -> String {
    let nics: Vec<_> = inventory
        .nics
        .iter()
        .filter(|n| with_vfs || n.is_pf())
        .collect();
    let mut out = String::new();
    if inventory.gpus.is_empty() || nics.is_empty() {
        let _ = writeln!(
            out,
            "{} GPU(s), {} AINIC function(s): no GPU-NIC pairs to show.",
            inventory.gpus.len(),
            nics.len()
        );
    } else {
        write_matrix(&mut out, inventory, &nics);
    }
    write_nic_legend(&mut out, inventory, &nics);
    let hidden = inventory.nics.len() - nics.len();
    if hidden > 0 {
        let _ = writeln!(out, "\n({hidden} virtual functions not shown; add --vfs)");
    }
    out.push_str("\nLegend:\n");
    for class in Affinity::ALL {
        let _ = writeln!(out, "  {:<4} = {}", class.as_str(), class.description());
    }
    out
}

fn write_matrix(out: &mut String, inventory: &Inventory, nics: &[&topology::NicFunction]) {
    let _ = write!(out, "{:<6}", "");
    for i in 0..nics.len() {
        let _ = write!(out, " {:<5}", format!("NIC{i}"));
    }
    let _ = writeln!(out, " {:<13} NUMA", "GPU address");
    for (g, gpu) in inventory.gpus.iter().enumerate() {
        let _ = write!(out, "{:<6}", format!("GPU{g}"));
        for nic in nics {
            let class = inventory
                .affinity(gpu.address, nic.address)
                .map_or("?", Affinity::as_str);
            let _ = write!(out, " {class:<5}");
        }
        let _ = writeln!(out, " {:<13} {}", gpu.address, numa(gpu.location.numa_node));
    }
}

fn write_nic_legend(out: &mut String, inventory: &Inventory, nics: &[&topology::NicFunction]) {
    if nics.is_empty() {
        return;
    }
    out.push_str("\nNIC Legend:\n");
    for (i, nic) in nics.iter().enumerate() {
        let ifname = nic.netdevs.first().map_or("-", |n| n.name.as_str());
        let rdma = nic.rdma.first().map_or("-", |r| r.name.as_str());
        let nearest = inventory
            .nearest_gpu(nic.address)
            .map_or("-".to_string(), |(g, a)| format!("{g} ({a})"));
        let _ = writeln!(
            out,
            "  NIC{i:<3} {}  {ifname:<12} {rdma:<12} numa {:<3} nearest GPU {nearest}",
            nic.address,
            numa(nic.location.numa_node)
        );
    }
}

fn numa(node: Option<u32>) -> String {
    node.map_or("-".to_string(), |n| n.to_string())
}
