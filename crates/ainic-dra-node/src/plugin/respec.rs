//! Prepared claims checked against today's devices.
//!
//! A spec written at prepare names device numbers (`uverbsN` is `231:N`)
//! and RDMA device names that the kernel may change while the claim stays
//! prepared: a reboot, a driver reload or re-created VFs renumber them
//! though the PCI address stays. So whenever an answer comes from the
//! checkpoint (a repeated prepare, the start-up check, an inventory
//! change) the spec is rebuilt from the recorded [`DeviceIdentity`] and
//! today's inventory, never replayed; a device that is gone fails the
//! claim with its name. Pure: the [`Driver`](super::Driver) writes.

use std::collections::BTreeMap;
use std::path::Path;

use topology::{CharDevice, Inventory};

use crate::cdi::{self, AttachedDevice, CdiError, DevRoots, Share};
use crate::checkpoint::{DeviceIdentity, PreparedClaim, PreparedDevice};

/// Why a prepared claim's spec cannot name today's devices.
#[derive(Debug, thiserror::Error)]
pub enum RespecError {
    /// The NIC function is no longer on this node.
    #[error(
        "claim {claim}: device {device} (PCI {address}) prepared for it is no longer on this node; its CDI spec is removed so no container gets a device number from the past"
    )]
    Gone {
        /// `namespace/name`.
        claim: String,
        /// DRA device name.
        device: String,
        /// PCI address recorded at prepare.
        address: String,
    },
    /// The NIC is there but what the spec needs is not (no RDMA device).
    #[error("claim {claim}: {source}; its CDI spec is removed")]
    Cdi {
        /// `namespace/name`.
        claim: String,
        /// What is missing.
        source: CdiError,
    },
    /// An entry from an agent that recorded no identity, whose device
    /// numbers changed: there is nothing safe to rebuild it from.
    #[error(
        "claim {claim}: prepared by an older agent that did not record device identity, and {path} is now {now} (was {was}); its CDI spec is removed: delete the pod so the claim is prepared afresh"
    )]
    Unrecorded {
        /// `namespace/name`.
        claim: String,
        /// The device node whose numbers changed or vanished.
        path: String,
        /// `major:minor` recorded.
        was: String,
        /// `major:minor` today, or `gone`.
        now: String,
    },
}

/// The identity to record for a device about to be prepared.
pub fn identity_of(attached: &AttachedDevice) -> DeviceIdentity {
    DeviceIdentity {
        pci_address: attached.nic.address.to_string(),
        rdma_device: attached.nic.rdma.first().map(|r| r.name.clone()),
        umad: attached.umad,
        issm: attached.issm,
        consumed: attached
            .share
            .as_ref()
            .map(|s| s.consumed.clone())
            .unwrap_or_default(),
    }
}

/// The spec content `record` (claim `uid`) must have today.
pub fn rebuild(
    uid: &str,
    record: &PreparedClaim,
    inventory: &Inventory,
    dev: &DevRoots,
    cdi_dir: &Path,
) -> Result<String, RespecError> {
    let claim = format!("{}/{}", record.namespace, record.name);
    if record.devices.iter().any(|d| d.identity.is_none()) {
        return check_unrecorded(&claim, record, inventory).map(|()| record.cdi_spec.clone());
    }
    let attached = record
        .devices
        .iter()
        .map(|d| {
            let gate = d
                .netdev
                .as_ref()
                .map(|_| cdi::netdev_gate(cdi_dir, uid, &d.device));
            attach_today(&claim, d, inventory).map(|a| AttachedDevice {
                netdev_gate: gate,
                ..a
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let spec = cdi::build(uid, &attached, inventory.rdma_cm.as_ref(), dev)
        .map_err(|source| RespecError::Cdi { claim, source })?;
    Ok(spec.content)
}

fn attach_today(
    claim: &str,
    device: &PreparedDevice,
    inventory: &Inventory,
) -> Result<AttachedDevice, RespecError> {
    let identity = device.identity.as_ref().expect("checked by the caller");
    let nic = inventory
        .nics
        .iter()
        .find(|n| n.address.to_string() == identity.pci_address)
        .filter(|n| dra_model::names::device_name(n) == device.device)
        .ok_or_else(|| RespecError::Gone {
            claim: claim.to_string(),
            device: device.device.clone(),
            address: identity.pci_address.clone(),
        })?;
    Ok(AttachedDevice {
        device: device.device.clone(),
        request: device.requests.first().cloned().unwrap_or_default(),
        nic: nic.clone(),
        umad: identity.umad,
        issm: identity.issm,
        share: device.share_id.as_ref().map(|id| Share {
            id: id.clone(),
            consumed: identity.consumed.clone(),
        }),
        netdev_gate: None,
    })
}

/// For an entry without identity: every device node its recorded spec
/// names must still have the same numbers today.
fn check_unrecorded(
    claim: &str,
    record: &PreparedClaim,
    inventory: &Inventory,
) -> Result<(), RespecError> {
    let today: BTreeMap<&str, &CharDevice> = char_devices(inventory)
        .map(|c| (c.path.as_str(), c))
        .collect();
    let recorded: serde_json::Value =
        serde_json::from_str(&record.cdi_spec).unwrap_or(serde_json::Value::Null);
    let mut nodes = Vec::new();
    collect_device_nodes(&recorded, &mut nodes);
    for (path, major, minor) in nodes {
        let now = today.get(path.as_str());
        if now.is_none_or(|c| (c.major, c.minor) != (major, minor)) {
            return Err(RespecError::Unrecorded {
                claim: claim.to_string(),
                path,
                was: format!("{major}:{minor}"),
                now: now.map_or("gone".into(), |c| format!("{}:{}", c.major, c.minor)),
            });
        }
    }
    Ok(())
}

fn char_devices(inventory: &Inventory) -> impl Iterator<Item = &CharDevice> {
    inventory
        .nics
        .iter()
        .flat_map(|n| n.rdma.iter())
        .flat_map(|r| r.uverbs.iter().chain(&r.umad).chain(&r.issm))
        .chain(inventory.rdma_cm.iter())
}

/// Every `deviceNodes[]` entry (path, major, minor) anywhere in a spec.
fn collect_device_nodes(value: &serde_json::Value, out: &mut Vec<(String, u32, u32)>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                if key == "deviceNodes" {
                    for node in v.as_array().into_iter().flatten() {
                        let number = |k: &str| node[k].as_u64().and_then(|n| u32::try_from(n).ok());
                        if let (Some(path), Some(major), Some(minor)) =
                            (node["path"].as_str(), number("major"), number("minor"))
                        {
                            out.push((path.to_string(), major, minor));
                        }
                    }
                } else {
                    collect_device_nodes(v, out);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_device_nodes(v, out)),
        _ => {}
    }
}
