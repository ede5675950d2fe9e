//! CDI specs for prepared claims (attach mode `rdma`): one transient spec
//! file per claim, kind `amd.com/ainic`, one CDI device per allocated NIC
//! (or per share of a shared NIC), named `<claimUID>-<device>[-<shareID>]`.
//!
//! What a container gets:
//! - per device: the NIC's verbs device (`/dev/infiniband/uverbsN`), plus
//!   its `umadN` / `issmN` devices when the NicConfig asks for them;
//!   `AINIC_NIC_<DEVICE>=rdma=..,netdev=..,pci=..` (a name of its own, so
//!   these add up across requests and claims); for a share,
//!   `AINIC_SHARE_ID` and `AINIC_CONSUMED_<CAPACITY>`;
//! - per request, on each of the request's devices: the lists RCCL/NCCL
//!   and scripts rely on, of that request's devices: `NCCL_IB_HCA`
//!   (exact-match list of RDMA devices), `AINIC_RDMA_DEVICES`,
//!   `AINIC_NETDEVS`, `AINIC_PCI_ADDRESSES`, `AINIC_DEVICES`
//!   (comma-separated, allocation order). The kubelet gives a container
//!   the CDI devices of the requests it uses, so one that uses one request
//!   (or a whole single-request claim) sees exactly its NICs. CDI cannot
//!   merge a variable: a container given several requests or claims sees
//!   the lists of the last one injected, and the `AINIC_NIC_*` set for all;
//! - once per claim: `/dev/infiniband/rdma_cm`.
//!
//! The spec is built with the types of [`dra_model::cdi`], given the lowest
//! `cdiVersion` its fields need (runtimes such as podman 4.3 accept only up
//! to 0.5.0) and checked as a runtime would before it is written.

pub mod dir;

pub use dir::CdiDir;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dra_model::cdi;
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
    /// The claim's request it was allocated for.
    pub request: String,
    /// The NIC function behind it.
    pub nic: NicFunction,
    /// Give the MAD devices too.
    pub umad: bool,
    /// Give the subnet-management devices too.
    pub issm: bool,
    /// The share of a multi-allocation device, if any.
    pub share: Option<Share>,
    /// In exclusive netdev mode: the host path of the file that exists only
    /// while the device's netdev is in the pod ([`netdev_gate`]). It is
    /// bind-mounted into the container, so a container whose netdev was not
    /// moved in (the NRI plugin not connected, its hook failed) fails to
    /// start, naming the file, instead of running without its network.
    pub netdev_gate: Option<PathBuf>,
}

/// The gate file of `device` of claim `claim_uid` in the CDI directory
/// `cdi_dir`: created by the NRI hooks once the netdev is in the pod,
/// removed when it leaves (a dot file without `.json`: not a spec).
pub fn netdev_gate(cdi_dir: &Path, claim_uid: &str, device: &str) -> PathBuf {
    cdi_dir.join(format!(".ainic-netdev-attached-{claim_uid}-{device}"))
}

/// Where a container sees the gate file of `device`.
pub const GATE_IN_CONTAINER: &str = "/run/ainic-dra/netdev-attached";

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
    /// The kubelet named a claim UID that cannot be part of a file name.
    #[error(
        "claim UID {claim_uid:?} is not a Kubernetes UID (letters, digits and '-', 1 to 64 characters, starting with a letter or digit); refusing to use it in a file name"
    )]
    BadClaimUid {
        /// What the kubelet sent.
        claim_uid: String,
    },
    /// The spec would be refused by a runtime.
    #[error("generated CDI spec for claim {claim_uid} is invalid: {reason}")]
    Invalid {
        /// The claim.
        claim_uid: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Whether `uid` looks like a Kubernetes UID and so is safe in a file
/// name (no `/`, no `..`, nothing a CDI name refuses).
pub fn is_claim_uid(uid: &str) -> bool {
    (1..=64).contains(&uid.len())
        && uid.starts_with(|c: char| c.is_ascii_alphanumeric())
        && uid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
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
    dev: &DevRoots,
) -> Result<ClaimSpec, CdiError> {
    if !is_claim_uid(claim_uid) {
        return Err(CdiError::BadClaimUid {
            claim_uid: claim_uid.to_string(),
        });
    }
    // The lists of each request, once; every device of it carries them.
    let mut by_request: BTreeMap<&str, Vec<&AttachedDevice>> = BTreeMap::new();
    for d in devices {
        by_request.entry(&d.request).or_default().push(d);
    }
    let lists: BTreeMap<&str, Vec<String>> = by_request
        .into_iter()
        .map(|(request, of_request)| (request, list_env(&of_request)))
        .collect();
    let mut cdi_devices = Vec::with_capacity(devices.len());
    for d in devices {
        let mut edits = device_edits(d, dev)?;
        edits.env.extend(lists[d.request.as_str()].iter().cloned());
        cdi_devices.push(cdi::Device {
            name: device_name(claim_uid, d),
            container_edits: edits,
            ..cdi::Device::default()
        });
    }
    let spec = cdi::Spec {
        kind: KIND.to_string(),
        devices: cdi_devices,
        container_edits: Some(cdi::ContainerEdits {
            device_nodes: rdma_cm.map(|cm| dev.device_node(cm)).into_iter().collect(),
            ..cdi::ContainerEdits::default()
        }),
        ..cdi::Spec::default()
    };
    let device_ids = spec
        .devices
        .iter()
        .map(|d| spec.qualified(&d.name))
        .collect();
    let content = spec.finish().map_err(|e| CdiError::Invalid {
        claim_uid: claim_uid.to_string(),
        reason: e.to_string(),
    })?;
    Ok(ClaimSpec {
        file_name: file_name(claim_uid),
        content,
        device_ids,
    })
}

fn device_edits(d: &AttachedDevice, dev: &DevRoots) -> Result<cdi::ContainerEdits, CdiError> {
    let rdma = d.nic.rdma.iter().find(|r| r.uverbs.is_some());
    let Some(rdma) = rdma else {
        return Err(CdiError::NoVerbs {
            device: d.device.clone(),
            address: d.nic.address.to_string(),
        });
    };
    let mut nodes = vec![dev.device_node(rdma.uverbs.as_ref().expect("found above"))];
    let mounts = d.netdev_gate.iter().map(|gate| cdi::Mount {
        host_path: gate.display().to_string(),
        container_path: format!("{GATE_IN_CONTAINER}/{}", d.device),
        options: vec!["ro".into(), "nosuid".into(), "nodev".into(), "bind".into()],
        kind: None,
    });
    if d.umad {
        nodes.extend(rdma.umad.iter().map(|c| dev.device_node(c)));
    }
    if d.issm {
        nodes.extend(rdma.issm.iter().map(|c| dev.device_node(c)));
    }
    let mut env = vec![format!(
        "AINIC_NIC_{}=rdma={},netdev={},pci={}",
        env_suffix(&d.device),
        rdma.name,
        d.nic
            .netdevs
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>()
            .join("+"),
        d.nic.address
    )];
    if let Some(share) = &d.share {
        env.push(format!("AINIC_SHARE_ID={}", share.id));
        env.extend(
            share
                .consumed
                .iter()
                .map(|(name, value)| format!("AINIC_CONSUMED_{}={value}", env_suffix(name))),
        );
    }
    Ok(cdi::ContainerEdits {
        env,
        device_nodes: nodes,
        mounts: mounts.collect(),
        ..cdi::ContainerEdits::default()
    })
}

/// The list variables of one request's devices.
fn list_env(devices: &[&AttachedDevice]) -> Vec<String> {
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
    vec![
        format!("NCCL_IB_HCA=={}", rdma.join(",")),
        format!("AINIC_RDMA_DEVICES={}", rdma.join(",")),
        format!("AINIC_NETDEVS={}", netdevs.join(",")),
        format!("AINIC_PCI_ADDRESSES={}", addresses.join(",")),
        format!("AINIC_DEVICES={}", names.join(",")),
    ]
}

/// Where the host's device nodes are: where this process sees them and
/// what the host calls them. They differ when the agent runs in a pod
/// with the host's `/dev/infiniband` mounted under `/host/dev`: a spec
/// is read by the runtime on the host, so it must name `/dev/...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevRoots {
    /// Where this process finds them (`--dev-root`).
    pub seen_at: PathBuf,
    /// The host's own device directory, written into specs
    /// (`--host-dev-root`, `/dev`).
    pub on_host: PathBuf,
}

impl DevRoots {
    /// The host's `/dev` seen at `seen_at`.
    pub fn mounted_at(seen_at: &Path) -> Self {
        Self {
            seen_at: seen_at.to_path_buf(),
            on_host: PathBuf::from("/dev"),
        }
    }

    /// A char device for the container: always with its numbers; with a
    /// host path only when the node exists, since a runtime fails on a
    /// host path that does not exist.
    pub fn device_node(&self, c: &CharDevice) -> cdi::DeviceNode {
        let relative = c.path.strip_prefix("/dev/").unwrap_or(&c.path);
        let host_path = self
            .seen_at
            .join(relative)
            .exists()
            .then(|| self.on_host.join(relative).display().to_string());
        cdi::DeviceNode::char_device(c, host_path)
    }
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
