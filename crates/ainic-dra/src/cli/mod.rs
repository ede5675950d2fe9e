//! Subcommands of `ainic-dra`, one file each, and the small pieces they share:
//! logging set-up, exit codes, and where a sysfs tree comes from.

pub mod cleanup;
pub mod controller;
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
use std::process::ExitCode;

#[cfg(feature = "demo")]
use anyhow::Context;
use anyhow::Result;
use clap::Args;
use tracing_subscriber::EnvFilter;

/// An error that ends the program with a specific exit status (the default
/// for other errors is 1). `simulate` uses 2 (invalid input) and 3 (cannot
/// be allocated).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Exit {
    /// Process exit status.
    pub code: u8,
    /// The one line printed on stderr.
    pub message: String,
}

/// Sends `tracing` output to stderr, filtered by `filter`.
pub fn init_logging(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Prints a failed command's error as one line and maps it to an exit status.
pub fn exit_code(result: Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let code = err.downcast_ref::<Exit>().map_or(1, |e| e.code);
            eprintln!("ainic-dra: {}", one_line(&err));
            ExitCode::from(code)
        }
    }
}

/// The error and its causes joined on one line: `what failed: why: root cause`.
/// A cause that its parent's message already ends with (errors that both
/// print and chain their source) is said once.
fn one_line(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain().map(ToString::to_string) {
        if parts.last().is_some_and(|last| last.ends_with(&cause)) {
            continue;
        }
        parts.push(cause);
    }
    parts.join(": ")
}

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
