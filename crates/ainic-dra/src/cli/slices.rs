//! `ainic-dra slices`: the ResourceSlices the node agent would publish for
//! a sysfs tree, printed as YAML (one document per slice) or a JSON list.
//!
//! [`ModelArgs`] holds the device-model flags; the node agent flattens the
//! same struct so both build the model from identical options.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use dra_model::fabric::{FabricFile, FabricSources, LldpNeighbors};
use dra_model::{FeatureGates, ModelConfig, ModelOptions, PfWithVfs, Release, SliceSet};

use super::SysfsSource;
use super::lldp::{LldpCommand, LldpError};

/// Flags that shape the device model (shared with `node`).
#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// DRA driver name (`spec.driver` of every slice).
    #[arg(long, value_name = "NAME", default_value = dra_model::names::DEFAULT_DRIVER)]
    pub driver_name: String,

    /// Kubernetes feature gates, upstream syntax, e.g.
    /// `DRAConsumableCapacity=true,DRADeviceTaints=true`, over the defaults
    /// of `--kubernetes-version`.
    #[arg(long, value_name = "NAME=BOOL,...", default_value = "")]
    pub feature_gates: FeatureGates,

    /// Kubernetes release (1.34 or later) whose default feature gates and
    /// slice layout apply: counters beside their devices in 1.34, in
    /// slices of their own from 1.35. `node`: the API server's release
    /// when not given; `slices`: 1.34 when not given.
    #[arg(long, value_name = "1.MINOR")]
    pub kubernetes_version: Option<Release>,

    /// Also publish each NIC's nearest GPU address under this attribute of the
    /// GPU driver (e.g. `gpu.amd.com/pciAddr`), for switch-precise pairing.
    #[arg(long, value_name = "DOMAIN/NAME")]
    pub gpu_pairing_attribute: Option<String>,

    /// How a PF with VFs enabled is published: `auto` (PF and VFs with
    /// DRAPartitionableDevices, else the VFs), `vfs-only`, `pf-only`.
    #[arg(long, value_enum, default_value_t = PfWithVfsArg::Auto)]
    pub pf_with_vfs: PfWithVfsArg,

    /// PFs to publish for sharing (needs DRAConsumableCapacity): PCI
    /// addresses or interface names, comma separated, or `*`.
    #[arg(long, value_name = "PF,...", value_delimiter = ',')]
    pub shared_pfs: Vec<String>,

    /// Bind each shared PF that the fabric config gives no tenant to the
    /// first tenant that takes a share, until its last share is released:
    /// the PF carries binding conditions that `ainic-dra controller`
    /// answers (needs DRADeviceBindingConditions; without it the flag
    /// publishes nothing more).
    #[arg(long)]
    pub sticky_tenants: bool,

    /// Queue pairs of each PF, published as capacity `queuePairs`.
    #[arg(long, value_name = "N")]
    pub pf_queue_pairs: Option<u64>,

    /// Queue pairs of each VF, published as capacity `queuePairs`.
    #[arg(long, value_name = "N")]
    pub vf_queue_pairs: Option<u64>,

    /// Fabric config file (YAML: per node / per NIC rail, fabric,
    /// leafSwitch, tenant). `slices`: an invalid file is an error. `node`:
    /// followed while running; an invalid file keeps the last valid one,
    /// and with none the agent publishes no devices (their tenant fencing
    /// is unknown).
    #[arg(long, value_name = "FILE")]
    pub fabric_config: Option<PathBuf>,

    /// LLDP neighbours as `lldpcli -f json0 show neighbors` output, from a file.
    #[arg(long, value_name = "FILE", conflicts_with = "lldp_command")]
    pub lldp_json: Option<PathBuf>,

    /// Command printing LLDP neighbours in `lldpcli -f json0` form, e.g.
    /// `lldpcli -f json0 show neighbors`: a program and its arguments, run
    /// directly (no shell: shell syntax is refused), killed after 5 s.
    #[arg(long, value_name = "COMMAND", value_parser = LldpCommand::parse)]
    pub lldp_command: Option<LldpCommand>,
}

/// `--pf-with-vfs` values.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum PfWithVfsArg {
    /// PF and VFs with DRAPartitionableDevices, else the VFs.
    Auto,
    /// The VFs only.
    VfsOnly,
    /// The PF only.
    PfOnly,
}

/// Whether the node's label switches its extended resources to DRA.
fn extended_resources_by_dra(driver: &str, labels: &BTreeMap<String, String>) -> Result<bool> {
    let key = format!("{driver}/{}", dra_model::names::LABEL_EXTENDED_RESOURCES);
    match labels.get(&key).map(String::as_str) {
        None | Some("classic") => Ok(false),
        Some("dra") => Ok(true),
        Some(other) => anyhow::bail!(
            "node label {key}={other:?} is neither \"dra\" nor \"classic\": which path serves amd.com/nic and amd.com/vnic on this node?"
        ),
    }
}

impl ModelArgs {
    /// The validated model configuration for `node`, with the fabric
    /// config file read now: a file that does not read or validate is an
    /// error naming the file, entry and line. LLDP data that cannot be
    /// read is logged and left out.
    pub fn config(&self, node: &str, node_labels: BTreeMap<String, String>) -> Result<ModelConfig> {
        let fabric = (self.fabric_config.as_deref())
            .map(ainic_dra_node::fabric_config::read)
            .transpose()
            .map_err(anyhow::Error::msg)?;
        self.config_with(node, node_labels, fabric)
    }

    /// The validated model configuration for `node` with `fabric` as the
    /// fabric config file (the node agent reads and follows the file
    /// itself).
    pub fn config_with(
        &self,
        node: &str,
        node_labels: BTreeMap<String, String>,
        fabric: Option<FabricFile>,
    ) -> Result<ModelConfig> {
        let mut o = ModelOptions::new(node);
        o.driver = self.driver_name.clone();
        let release = self.kubernetes_version.unwrap_or(Release::OLDEST);
        o.gates = self.feature_gates.clone().with_release(release);
        o.gpu_pairing_attribute = self.gpu_pairing_attribute.clone();
        o.pf_with_vfs = match self.pf_with_vfs {
            PfWithVfsArg::Auto => PfWithVfs::Auto,
            PfWithVfsArg::VfsOnly => PfWithVfs::VfsOnly,
            PfWithVfsArg::PfOnly => PfWithVfs::PfOnly,
        };
        o.shared_pfs = self.shared_pfs.clone();
        o.sticky_tenants = self.sticky_tenants;
        o.pf_queue_pairs = self.pf_queue_pairs;
        o.vf_queue_pairs = self.vf_queue_pairs;
        o.extended_resources = extended_resources_by_dra(&o.driver, &node_labels)?;
        o.fabric = FabricSources {
            file: fabric,
            node_labels,
            lldp: self.lldp(),
        };
        Ok(ModelConfig::new(o)?)
    }

    fn lldp(&self) -> Option<LldpNeighbors> {
        let (text, origin) = if let Some(path) = &self.lldp_json {
            let origin = path.display().to_string();
            (
                std::fs::read_to_string(path).map_err(|e| format!("failed to read {origin}: {e}")),
                origin,
            )
        } else {
            let cmd = self.lldp_command.as_ref()?;
            let text = match cmd.run() {
                Err(absent @ LldpError::Absent { .. }) if !cmd.first_absence() => {
                    tracing::debug!("{absent}; LLDP data not used");
                    return None;
                }
                ran => ran.map_err(|e| e.to_string()),
            };
            (text, cmd.display())
        };
        text.and_then(|t| LldpNeighbors::parse(&t, &origin).map_err(|e| e.to_string()))
            .inspect_err(|e| tracing::warn!("{e}; LLDP data not used"))
            .ok()
    }
}

/// Arguments of `ainic-dra slices`.
#[derive(Args, Debug)]
#[command(
    after_help = "Examples:\n  ainic-dra slices --sysfs-root /sys --node-name node-a\n  \
    ainic-dra slices --topology sriov-vfs --node-name n1 --kubernetes-version 1.37 -o json\n  \
    ainic-dra slices --topology sriov-vfs --node-name n1 --feature-gates DRAPartitionableDevices=true -o json   # 1.34 with the gate on"
)]
pub struct SlicesArgs {
    #[command(flatten)]
    source: SysfsSource,

    /// The node (also the pool name).
    #[arg(long, value_name = "NAME")]
    node_name: String,

    /// Node labels to take fabric facts from, `key=value,...`
    /// (e.g. `ainic.amd.com/fabric=pod-a`).
    #[arg(long, value_name = "KEY=VALUE,...", value_delimiter = ',')]
    node_labels: Vec<String>,

    #[command(flatten)]
    model: ModelArgs,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = SlicesFormat::Yaml)]
    output: SlicesFormat,
}

/// Output formats of `slices`.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum SlicesFormat {
    /// One YAML document per slice.
    Yaml,
    /// A JSON list of ResourceSlice objects.
    Json,
}

/// Builds the slices of the tree at `args.source` and prints them.
pub fn run(args: SlicesArgs) -> Result<()> {
    let labels = parse_labels(&args.node_labels)?;
    let config = args.model.config(&args.node_name, labels)?;
    let root = args.source.open()?;
    let inventory = topology::discover(root.path(), &topology::DiscoveryConfig::default())
        .with_context(|| format!("failed to discover devices under {}", root.path().display()))?;
    let set = dra_model::build_slices_checked(&inventory, &config)?;
    print!("{}", render(&set, args.output)?);
    Ok(())
}

fn parse_labels(entries: &[String]) -> Result<BTreeMap<String, String>> {
    entries
        .iter()
        .filter(|e| !e.is_empty())
        .map(|e| match e.split_once('=') {
            Some((k, v)) => Ok((k.trim().to_string(), v.trim().to_string())),
            None => bail!("invalid node label {e:?}: expected key=value"),
        })
        .collect()
}

fn render(set: &SliceSet, format: SlicesFormat) -> Result<String> {
    Ok(match format {
        SlicesFormat::Json => serde_json::to_string_pretty(&set.slices)? + "\n",
        SlicesFormat::Yaml => {
            let docs: Result<Vec<String>, _> =
                set.slices.iter().map(serde_yaml_ng::to_string).collect();
            docs?.join("---\n")
        }
    })
}
