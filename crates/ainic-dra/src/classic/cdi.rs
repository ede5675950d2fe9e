//! The classic path's CDI spec (with `--cdi-enabled`): one node-wide file
//! that defines a CDI device per classic device
//! (`amd.com/ainic=classic-pf-0000-0c-00-0`, its verbs and optional MAD
//! devices) and one for `rdma_cm` (`amd.com/ainic=classic-rdma-cm`).
//! `Allocate` then answers with these names and the runtime injects them.
//!
//! The file is rewritten (atomically: temp file, rename) whenever the split
//! changes, and removed on shutdown. Its name does not start with the DRA
//! path's per-claim prefix, so the DRA path's clean-up never touches it.

use std::path::{Path, PathBuf};

use container_device_interface as cdi;
use dra_model::classic::{
    CDI_KIND, CDI_RDMA_CM_DEVICE, CharDeviceOptions, cdi_device_name, function_char_devices,
};
use serde_json::{Value, json};
use topology::CharDevice;

use super::snapshot::Snapshot;

/// File name of the classic spec in the CDI directory.
pub const FILE_NAME: &str = "ainic-dra-classic.json";

/// Builds the spec for every device the classic resources offer.
pub fn build(
    snapshot: &Snapshot,
    options: CharDeviceOptions,
    dev_root: &Path,
) -> anyhow::Result<String> {
    let mut devices = Vec::new();
    if let Some(cm) = &snapshot.inventory.rdma_cm {
        devices.push(json!({
            "name": CDI_RDMA_CM_DEVICE,
            "containerEdits": { "deviceNodes": [device_node(cm, dev_root)] },
        }));
    }
    for resource in &snapshot.assignment.resources {
        for d in &resource.devices {
            let Some(nic) = snapshot.inventory.nic(d.address) else {
                continue;
            };
            let nodes: Vec<Value> = function_char_devices(nic, options)
                .iter()
                .map(|c| device_node(c, dev_root))
                .collect();
            if nodes.is_empty() {
                continue;
            }
            devices.push(json!({
                "name": cdi_device_name(nic),
                "containerEdits": { "deviceNodes": nodes },
            }));
        }
    }
    let mut spec = json!({ "cdiVersion": "0.3.0", "kind": CDI_KIND, "devices": devices });
    let probe: cdi::specs::config::Spec = serde_json::from_value(spec.clone())?;
    let version = cdi::version::minimum_required_version(&probe)
        .map_err(|e| anyhow::anyhow!("cannot version classic CDI spec: {e:#}"))?;
    spec["cdiVersion"] = Value::String(version.to_string());
    let raw: cdi::specs::config::Spec = serde_json::from_value(spec)?;
    cdi::spec::new_spec(&raw, &PathBuf::from(FILE_NAME), 0)
        .map_err(|e| anyhow::anyhow!("generated classic CDI spec is invalid: {e:#}"))?;
    Ok(serde_json::to_string_pretty(&raw)?)
}

/// A char device: with its numbers, and a host path when it exists under
/// `dev_root` (a runtime fails on a host path that does not exist).
fn device_node(c: &CharDevice, dev_root: &Path) -> Value {
    let mut node = json!({
        "path": c.path,
        "type": "c",
        "major": c.major,
        "minor": c.minor,
        "permissions": "rw",
    });
    let host = dev_root.join(c.path.strip_prefix("/dev/").unwrap_or(&c.path));
    if host.exists() {
        node["hostPath"] = json!(c.path);
    }
    node
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
