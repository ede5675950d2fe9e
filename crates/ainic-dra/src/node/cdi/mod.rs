//! CDI specs for prepared claims (attach mode `rdma`): one transient spec
//! file per claim, kind `amd.com/ainic`, one CDI device per allocated NIC
//! (or per share of a shared NIC), named `<claimUID>-<device>[-<shareID>]`.
//!
//! What a container gets:
//! - per device: the NIC's verbs device (`/dev/infiniband/uverbsN`), plus
//!   its `umadN` / `issmN` devices when the NicConfig asks for them; for a
//!   share, `AINIC_SHARE_ID` and `AINIC_CONSUMED_<CAPACITY>`;
//! - once per claim: `/dev/infiniband/rdma_cm` and the environment that
//!   RCCL/NCCL and scripts rely on: `NCCL_IB_HCA` (exact-match list of the
//!   claim's RDMA devices), `AINIC_RDMA_DEVICES`, `AINIC_NETDEVS`,
//!   `AINIC_PCI_ADDRESSES`, `AINIC_DEVICES` (comma-separated, allocation order).
//!
//! The spec is built as JSON, parsed into the `container-device-interface`
//! types, given the lowest `cdiVersion` its fields need (runtimes such as
//! podman 4.3 accept only up to 0.5.0) and validated before it is written.

pub mod dir;

pub use dir::CdiDir;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use container_device_interface as cdi;
use serde_json::{Value, json};
use topology::{CharDevice, NicFunction};

/// CDI kind of every device this driver writes.
pub const KIND: &str = "amd.com/ainic";
/// Prefix of the spec files this driver owns in the CDI directory.
pub const FILE_PREFIX: &str = "ainic.amd.com-";

/// One device of a claim, with what the container must get for it.
#[derive(Clone, Debug)]
pub struct AttachedDevice {
    /// DRA device name (`pf-0000-0c-00-0`).
    pub device: String,
    /// The NIC function behind it.
    pub nic: NicFunction,
    /// Give the MAD devices too.
    pub umad: bool,
    /// Give the subnet-management devices too.
    pub issm: bool,
    /// The share of a multi-allocation device, if any.
    pub share: Option<Share>,
}

/// One share of a device allocated with consumable capacity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Share {
    /// `shareID` of the allocation result.
    pub id: String,
    /// Consumed capacity by (unqualified) name, as quantities.
    pub consumed: BTreeMap<String, String>,
}

/// A validated spec, ready to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimSpec {
    /// File name inside the CDI directory.
    pub file_name: String,
    /// The JSON text.
    pub content: String,
    /// Qualified CDI device ID of each input device, same order.
    pub device_ids: Vec<String>,
}

/// A spec that could not be built.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    /// The device has no RDMA device, so there is nothing to attach.
    #[error("device {device} ({address}) has no RDMA device with a verbs char device")]
    NoVerbs {
        /// DRA device name.
        device: String,
        /// PCI address.
        address: String,
    },
    /// The CDI library rejected the spec.
    #[error("generated CDI spec for claim {claim_uid} is invalid: {reason}")]
    Invalid {
        /// The claim.
        claim_uid: String,
        /// The library's explanation, all causes.
        reason: String,
    },
}

/// File name of a claim's spec.
pub fn file_name(claim_uid: &str) -> String {
    format!("{FILE_PREFIX}{claim_uid}.json")
}

/// The claim UID of a spec file this driver wrote, from its name.
pub fn claim_of_file(file_name: &str) -> Option<&str> {
    file_name.strip_prefix(FILE_PREFIX)?.strip_suffix(".json")
}

/// CDI device name of one device (or share) of a claim.
pub fn device_name(claim_uid: &str, device: &AttachedDevice) -> String {
    match &device.share {
        Some(share) => format!("{claim_uid}-{}-{}", device.device, share.id),
        None => format!("{claim_uid}-{}", device.device),
    }
}

/// Builds and validates the spec of one claim.
pub fn build(
    claim_uid: &str,
    devices: &[AttachedDevice],
    rdma_cm: Option<&CharDevice>,
    dev_root: &Path,
) -> Result<ClaimSpec, CdiError> {
    let mut cdi_devices = Vec::with_capacity(devices.len());
    for d in devices {
        cdi_devices.push(json!({
            "name": device_name(claim_uid, d),
            "containerEdits": device_edits(d, dev_root)?,
        }));
    }
    let mut spec = json!({
        "cdiVersion": "0.3.0",
        "kind": KIND,
        "devices": cdi_devices,
        "containerEdits": claim_edits(devices, rdma_cm, dev_root),
    });
    let file_name = file_name(claim_uid);
    let raw = validated(&mut spec, claim_uid, &file_name)?;
    let content = serde_json::to_string_pretty(&raw).expect("CDI spec serialises");
    let device_ids = devices
        .iter()
        .map(|d| format!("{KIND}={}", device_name(claim_uid, d)))
        .collect();
    Ok(ClaimSpec {
        file_name,
        content,
        device_ids,
    })
}

/// Sets the lowest `cdiVersion` the spec needs and runs the library's
/// validation (schema, names, version rules) on it.
fn validated(
    spec: &mut Value,
    claim_uid: &str,
    file_name: &str,
) -> Result<cdi::specs::config::Spec, CdiError> {
    let invalid = |e: &dyn std::fmt::Display| CdiError::Invalid {
        claim_uid: claim_uid.to_string(),
        reason: e.to_string(),
    };
    let probe: cdi::specs::config::Spec =
        serde_json::from_value(spec.clone()).map_err(|e| invalid(&e))?;
    let version =
        cdi::version::minimum_required_version(&probe).map_err(|e| invalid(&format!("{e:#}")))?;
    spec["cdiVersion"] = Value::String(version.to_string());
    let raw: cdi::specs::config::Spec =
        serde_json::from_value(spec.clone()).map_err(|e| invalid(&e))?;
    cdi::spec::new_spec(&raw, &PathBuf::from(file_name), 0)
        .map_err(|e| invalid(&format!("{e:#}")))?;
    Ok(raw)
}

fn device_edits(d: &AttachedDevice, dev_root: &Path) -> Result<Value, CdiError> {
    let rdma = d.nic.rdma.iter().find(|r| r.uverbs.is_some());
    let Some(rdma) = rdma else {
        return Err(CdiError::NoVerbs {
            device: d.device.clone(),
            address: d.nic.address.to_string(),
        });
    };
    let mut nodes = vec![device_node(
        rdma.uverbs.as_ref().expect("found above"),
        dev_root,
    )];
    if d.umad {
        nodes.extend(rdma.umad.iter().map(|c| device_node(c, dev_root)));
    }
    if d.issm {
        nodes.extend(rdma.issm.iter().map(|c| device_node(c, dev_root)));
    }
    let mut edits = json!({ "deviceNodes": nodes });
    if let Some(share) = &d.share {
        let mut env = vec![format!("AINIC_SHARE_ID={}", share.id)];
        env.extend(
            share
                .consumed
                .iter()
                .map(|(name, value)| format!("AINIC_CONSUMED_{}={value}", env_suffix(name))),
        );
        edits["env"] = json!(env);
    }
    Ok(edits)
}

fn claim_edits(devices: &[AttachedDevice], rdma_cm: Option<&CharDevice>, dev_root: &Path) -> Value {
    let rdma: Vec<&str> = devices
        .iter()
        .filter_map(|d| d.nic.rdma.first().map(|r| r.name.as_str()))
        .collect();
    let netdevs: Vec<&str> = devices
        .iter()
        .flat_map(|d| d.nic.netdevs.iter().map(|n| n.name.as_str()))
        .collect();
    let addresses: Vec<String> = devices.iter().map(|d| d.nic.address.to_string()).collect();
    let names: Vec<&str> = devices.iter().map(|d| d.device.as_str()).collect();
    let mut edits = json!({
        "env": [
            format!("NCCL_IB_HCA=={}", rdma.join(",")),
            format!("AINIC_RDMA_DEVICES={}", rdma.join(",")),
            format!("AINIC_NETDEVS={}", netdevs.join(",")),
            format!("AINIC_PCI_ADDRESSES={}", addresses.join(",")),
            format!("AINIC_DEVICES={}", names.join(",")),
        ],
    });
    if let Some(cm) = rdma_cm {
        edits["deviceNodes"] = json!([device_node(cm, dev_root)]);
    }
    edits
}

/// A char device for the container: always with its numbers; with a host
/// path only when the node exists under `dev_root`, since a runtime fails
/// on a host path that does not exist.
fn device_node(c: &CharDevice, dev_root: &Path) -> Value {
    let mut node = json!({
        "path": c.path,
        "type": "c",
        "major": c.major,
        "minor": c.minor,
        "permissions": "rw",
    });
    let relative = c.path.strip_prefix("/dev/").unwrap_or(&c.path);
    let host = dev_root.join(relative);
    if host.exists() {
        node["hostPath"] = json!(host.display().to_string());
    }
    node
}

/// `queuePairs` -> `QUEUEPAIRS`; anything not alphanumeric becomes `_`.
fn env_suffix(name: &str) -> String {
    let base = name.rsplit('/').next().unwrap_or(name);
    base.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
