//! The classic path's CDI spec (with `--cdi-enabled`): one node-wide file
//! that defines a CDI device per classic device
//! (`amd.com/ainic=classic-pf-0000-0c-00-0`, its verbs and optional MAD
//! devices) and one for `rdma_cm` (`amd.com/ainic=classic-rdma-cm`).
//! `Allocate` then answers with these names and the runtime injects them.
//!
//! The file is rewritten (atomically: temp file, rename) at start and
//! whenever the split changes, and kept when the agent stops (containers
//! restarting meanwhile need it); an agent started without the classic
//! CDI mode removes it. Its name does not start with the DRA
//! path's per-claim prefix, so the DRA path's clean-up never touches it.

use std::path::Path;

use crate::cdi::DevRoots;

use dra_model::cdi;
use dra_model::classic::{
    CDI_KIND, CDI_RDMA_CM_DEVICE, CharDeviceOptions, cdi_device_name, function_char_devices,
};

use super::snapshot::Snapshot;

/// File name of the classic spec in the CDI directory.
pub const FILE_NAME: &str = "ainic-dra-classic.json";

/// Builds the spec for every device the classic resources offer.
pub fn build(
    snapshot: &Snapshot,
    options: CharDeviceOptions,
    dev: &DevRoots,
) -> anyhow::Result<String> {
    let mut devices = Vec::new();
    if let Some(cm) = &snapshot.inventory.rdma_cm {
        devices.push(device(CDI_RDMA_CM_DEVICE.into(), vec![dev.device_node(cm)]));
    }
    for resource in &snapshot.assignment.resources {
        for d in &resource.devices {
            let Some(nic) = snapshot.inventory.nic(d.address) else {
                continue;
            };
            let nodes: Vec<cdi::DeviceNode> = function_char_devices(nic, options)
                .iter()
                .map(|c| dev.device_node(c))
                .collect();
            if nodes.is_empty() {
                continue;
            }
            devices.push(device(cdi_device_name(nic), nodes));
        }
    }
    let spec = cdi::Spec {
        kind: CDI_KIND.to_string(),
        devices,
        ..cdi::Spec::default()
    };
    spec.finish()
        .map_err(|e| anyhow::anyhow!("generated classic CDI spec is invalid: {e}"))
}

fn device(name: String, nodes: Vec<cdi::DeviceNode>) -> cdi::Device {
    cdi::Device {
        name,
        container_edits: cdi::ContainerEdits {
            device_nodes: nodes,
            ..cdi::ContainerEdits::default()
        },
        ..cdi::Device::default()
    }
}

/// Writes `content` to `<dir>/<FILE_NAME>` through a temp file and a rename.
pub fn write(dir: &Path, content: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(".{FILE_NAME}.tmp"));
    std::fs::write(&tmp, content)?;
    std::fs::rename(&tmp, dir.join(FILE_NAME))
}

/// Removes the spec, if present.
pub fn remove(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(FILE_NAME));
}
