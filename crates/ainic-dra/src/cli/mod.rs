//! Subcommands of `ainic-dra`, one file each, and the small pieces they share:
//! where a sysfs tree comes from (logging and exit codes are
//! `ainic_dra_daemon::edge`, shared with `ainic-dra-controller`).

pub mod cleanup;
#[cfg(feature = "demo")]
pub mod demo;
pub mod deviceclasses;
pub mod discover;
pub mod lldp;
pub mod node;
#[cfg(feature = "tools")]
pub mod simulate;
pub mod slices;
pub mod topo;
#[cfg(feature = "tools")]
pub mod why;

use std::path::{Path, PathBuf};

#[cfg(feature = "demo")]
use anyhow::Context;
use anyhow::Result;
use clap::Args;

/// Where the sysfs tree comes from: a real root, or a topology fixture that
/// is rendered into a temporary directory first.
#[derive(Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub struct SysfsSource {
    /// Root of the sysfs tree to read (`/sys` on a node).
    #[arg(long, value_name = "DIR")]
    pub sysfs_root: Option<PathBuf>,

    /// Read a topology description instead: the name of a bundled topology
    /// (e.g. `mi300x-8gpu-8nic`) or a path to a topology YAML file. It is
    /// laid out as a sysfs tree in a temporary directory.
    #[cfg(feature = "demo")]
    #[arg(long, value_name = "NAME|FILE")]
    pub topology: Option<String>,
}

/// A sysfs root ready to read; holds the temporary directory alive when the
/// tree was rendered from a topology.
pub struct SysfsRoot {
    path: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl SysfsRoot {
    /// The directory to read.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl SysfsSource {
    /// Resolves the source into a directory on disk.
    pub fn open(&self) -> Result<SysfsRoot> {
        if let Some(root) = &self.sysfs_root {
            return Ok(SysfsRoot {
                path: root.clone(),
                _temp: None,
            });
        }
        self.render_topology()
    }

    #[cfg(not(feature = "demo"))]
    fn render_topology(&self) -> Result<SysfsRoot> {
        anyhow::bail!("--sysfs-root is required")
    }

    /// Lays out `--topology` as a sysfs tree in a temporary directory.
    #[cfg(feature = "demo")]
    fn render_topology(&self) -> Result<SysfsRoot> {
        let spec = self.topology.as_deref().unwrap_or_default();
        let yaml = load_topology_yaml(spec)?;
        let topology = testkit::fixture::Topology::from_yaml(&yaml)
            .with_context(|| format!("invalid topology {spec:?}"))?;
        let temp = tempfile::Builder::new()
            .prefix("ainic-sysfs-")
            .tempdir()
            .context("failed to create a temporary directory for the sysfs tree")?;
        topology
            .render(temp.path())
            .with_context(|| format!("failed to lay out topology {spec:?} as a sysfs tree"))?;
        Ok(SysfsRoot {
            path: temp.path().to_path_buf(),
            _temp: Some(temp),
        })
    }
}

/// The YAML of a bundled topology by name, or of a file.
#[cfg(feature = "demo")]
fn load_topology_yaml(spec: &str) -> Result<String> {
    if let Some(yaml) = testkit::fixture::bundled_by_name(spec) {
        return Ok(yaml.to_string());
    }
    let path = Path::new(spec);
    if path.exists() {
        return std::fs::read_to_string(path)
            .with_context(|| format!("failed to read topology file {}", path.display()));
    }
    let names: Vec<&str> = testkit::fixture::bundled()
        .iter()
        .map(|(n, _)| *n)
        .collect();
    anyhow::bail!(
        "no topology named {spec:?} and no such file; bundled topologies: {}",
        names.join(", ")
    )
}
