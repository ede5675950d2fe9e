//! `ainic-dra discover`: every AINIC function and GPU found in a sysfs tree,
//! with the facts the driver publishes about them.

use std::fmt::Write as _;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use topology::{FunctionKind, Inventory, NicFunction};

use super::SysfsSource;

/// Arguments of `ainic-dra discover`.
#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  ainic-dra discover --sysfs-root /sys\n  \
    ainic-dra discover --topology sriov-vfs -o yaml")]
pub struct DiscoverArgs {
    #[command(flatten)]
    source: SysfsSource,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = DiscoverFormat::Table)]
    output: DiscoverFormat,
}

/// Output formats of `discover`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum DiscoverFormat {
    /// One line per device, for people.
    Table,
    /// The full inventory as JSON.
    Json,
    /// The full inventory as YAML.
    Yaml,
}

/// Runs `ainic-dra discover`.
pub fn run(args: DiscoverArgs) -> Result<()> {
    let root = args.source.open()?;
    let inventory = topology::discover(root.path(), &topology::DiscoveryConfig::default())
        .with_context(|| format!("failed to discover devices under {}", root.path().display()))?;
    let text = match args.output {
        DiscoverFormat::Json => serde_json::to_string_pretty(&inventory)? + "\n",
        DiscoverFormat::Yaml => serde_yaml_ng::to_string(&inventory)?,
        DiscoverFormat::Table => table(&inventory),
    };
    print!("{text}");
    Ok(())
}

/// One line per NIC function, then one per GPU, then any warnings.
pub fn table(inventory: &Inventory) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<13} {:<4} {:<11} {:<12} {:<12} {:<4} {:<11} {:<13} {:<9} NEAREST GPU",
        "NIC", "TYPE", "PRODUCT", "NETDEV", "RDMA", "NUMA", "PCIE ROOT", "SWITCH", "LINK",
    );
    for nic in &inventory.nics {
        let _ = writeln!(out, "{}", nic_row(inventory, nic));
    }
    if !inventory.gpus.is_empty() {
        let _ = writeln!(
            out,
            "\n{:<13} {:<11} {:<4} {:<11} SWITCH",
            "GPU", "ID", "NUMA", "PCIE ROOT"
        );
        for gpu in &inventory.gpus {
            let _ = writeln!(
                out,
                "{:<13} {:<11} {:<4} {:<11} {}",
                gpu.address,
                format!("{:04x}:{:04x}", gpu.ids.vendor, gpu.ids.device),
                opt(gpu.location.numa_node),
                gpu.location.root,
                opt(gpu.location.switch)
            );
        }
    }
    if let Some(cm) = &inventory.rdma_cm {
        let _ = writeln!(out, "\nrdma_cm: {} ({}:{})", cm.path, cm.major, cm.minor);
    }
    for warning in &inventory.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    out
}

fn nic_row(inventory: &Inventory, nic: &NicFunction) -> String {
    let kind = match &nic.kind {
        FunctionKind::Pf { vfs, .. } if !vfs.is_empty() => format!("pf+{}", vfs.len()),
        FunctionKind::Pf { .. } => "pf".to_string(),
        FunctionKind::Vf { .. } => "vf".to_string(),
    };
    let netdev = nic.netdevs.first();
    let link = match (
        netdev.and_then(|n| n.operstate.as_deref()),
        netdev.and_then(|n| n.speed_mbps),
    ) {
        (Some(state), Some(mbps)) => format!("{state}/{}G", mbps / 1000),
        (Some(state), None) => state.to_string(),
        _ => "-".to_string(),
    };
    let nearest = inventory
        .nearest_gpu(nic.address)
        .map_or("-".to_string(), |(g, a)| format!("{g} {a}"));
    format!(
        "{:<13} {:<4} {:<11} {:<12} {:<12} {:<4} {:<11} {:<13} {:<9} {}",
        nic.address,
        kind,
        nic.product_name.as_deref().unwrap_or("-"),
        netdev.map_or("-", |n| n.name.as_str()),
        nic.rdma.first().map_or("-", |r| r.name.as_str()),
        opt(nic.location.numa_node),
        nic.location.root,
        opt(nic.location.switch),
        link,
        nearest
    )
}

fn opt<T: ToString>(value: Option<T>) -> String {
    value.map_or("-".to_string(), |v| v.to_string())
}
