//! Command-line flags of the classic path, flattened into `ainic-dra node`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use dra_model::classic::ClassicConfig;

use super::ClassicSettings;
use crate::cdi::DevRoots;

/// Where the kubelet keeps device plugin sockets.
pub const DEFAULT_DIR: &str = "/var/lib/kubelet/device-plugins";

/// Flags of the classic kubelet device plugin path.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct DevicePluginArgs {
    /// Also serve the classic kubelet device plugin API (v1beta1): resources
    /// `amd.com/nic` (PFs) and `amd.com/vnic` (VFs) unless the config says otherwise.
    #[arg(long)]
    pub device_plugin: bool,

    /// The kubelet's device plugin directory (holds `kubelet.sock`).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DIR)]
    pub device_plugin_dir: PathBuf,

    /// YAML file: resource names and device selectors, and the devices left
    /// to DRA (see docs/classic.md). Default: PFs -> amd.com/nic, VFs ->
    /// amd.com/vnic, none to DRA.
    #[arg(long, value_name = "FILE", requires = "device_plugin")]
    pub device_plugin_config: Option<PathBuf>,

    /// Answer Allocate with CDI device names (`amd.com/ainic=classic-…`,
    /// defined in a spec written to the CDI dir) instead of device specs.
    #[arg(long, requires = "device_plugin")]
    pub cdi_enabled: bool,
}

impl DevicePluginArgs {
    /// The validated settings, or `None` without `--device-plugin`. Reads
    /// and validates the config file; `cdi_dir` and `dev` come from
    /// the node command's own flags.
    pub fn settings(
        &self,
        cdi_dir: &Path,
        dev: &DevRoots,
    ) -> anyhow::Result<Option<ClassicSettings>> {
        if !self.device_plugin {
            return Ok(None);
        }
        let config = match &self.device_plugin_config {
            None => ClassicConfig::default(),
            Some(file) => {
                let text = std::fs::read_to_string(file).with_context(|| {
                    format!("failed to read device plugin config {}", file.display())
                })?;
                ClassicConfig::from_yaml(&text, file)?
            }
        };
        Ok(Some(ClassicSettings {
            dir: self.device_plugin_dir.clone(),
            config,
            cdi_dir: self.cdi_enabled.then(|| cdi_dir.to_path_buf()),
            dev: dev.clone(),
            poll: Duration::from_secs(1),
            fabric: None,
            instance: None,
        }))
    }
}
