//! From a ResourceClaim to the devices this node must attach: checks that
//! the claim is the one the kubelet meant and is allocated, keeps the
//! results of this driver in this node's pool, resolves each result's
//! NicConfig and finds the NIC behind each device name. Pure: no I/O.

use std::collections::BTreeMap;

use dra_model::nic_config::{AttachMode, NicConfigError, config_for_request};
use k8s_openapi::api::resource::v1::{
    DeviceAllocationConfiguration, DeviceRequestAllocationResult, ResourceClaim,
};
use topology::Inventory;

use dra_model::netdev::NetdevSettings;

use crate::cdi::{AttachedDevice, Share};
use crate::checkpoint::NetdevDevice;

/// What the driver serves: its name and its pool on this node.
#[derive(Clone, Debug)]
pub struct Scope {
    /// Driver name (`ainic.amd.com`).
    pub driver: String,
    /// Pool name (the node name).
    pub pool: String,
}

impl Scope {
    /// Whether an allocation result names a device of this driver and pool.
    pub fn serves(&self, result: &DeviceRequestAllocationResult) -> bool {
        result.driver == self.driver && result.pool == self.pool
    }
}

/// One result of the claim to prepare.
#[derive(Clone, Debug)]
pub struct PlannedDevice {
    /// The request the device was allocated for.
    pub request: String,
    /// The result grants admin access (a monitor beside the device's user).
    pub admin_access: bool,
    /// What to give the container.
    pub attached: AttachedDevice,
    /// Exclusive netdev mode: the netdev to move into the pod.
    pub netdev: Option<NetdevDevice>,
}

/// Why a claim cannot be prepared on this node.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The claim was deleted and recreated under the same name.
    #[error("claim {claim} has UID {found}, but the kubelet asked for UID {wanted}")]
    UidMismatch {
        /// `namespace/name`.
        claim: String,
        /// UID the kubelet sent.
        wanted: String,
        /// UID of the stored claim.
        found: String,
    },
    /// The claim has no allocation.
    #[error("claim {claim} is not allocated")]
    NotAllocated {
        /// `namespace/name`.
        claim: String,
    },
    /// No result belongs to this driver on this node.
    #[error(
        "claim {claim} has no device of driver {driver} in pool {pool} (it is allocated elsewhere or to other drivers)"
    )]
    NothingHere {
        /// `namespace/name`.
        claim: String,
        /// This driver.
        driver: String,
        /// This node's pool.
        pool: String,
    },
    /// A device of the allocation is not on this node.
    #[error("claim {claim}: device {device} is not present on this node")]
    UnknownDevice {
        /// `namespace/name`.
        claim: String,
        /// DRA device name.
        device: String,
    },
    /// The opaque configuration is invalid.
    #[error("claim {claim}: {source}")]
    Config {
        /// `namespace/name`.
        claim: String,
        /// The configuration problem.
        source: NicConfigError,
    },
    /// Exclusive netdev mode cannot be used for this result.
    #[error("claim {claim}: request {request}: exclusive netdev mode: {reason}")]
    Netdev {
        /// `namespace/name`.
        claim: String,
        /// The request.
        request: String,
        /// Why not.
        reason: String,
    },
}

/// Plans the devices of `claim` (the kubelet asked for `uid`).
pub fn plan(
    claim: &ResourceClaim,
    uid: &str,
    scope: &Scope,
    inventory: &Inventory,
) -> Result<Vec<PlannedDevice>, ResolveError> {
    let meta = &claim.metadata;
    let label = format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    );
    let found = meta.uid.as_deref().unwrap_or_default();
    if found != uid {
        return Err(ResolveError::UidMismatch {
            claim: label,
            wanted: uid.to_string(),
            found: found.to_string(),
        });
    }
    let devices = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .ok_or_else(|| ResolveError::NotAllocated {
            claim: label.clone(),
        })?;
    let results: Vec<&DeviceRequestAllocationResult> = devices
        .results
        .iter()
        .flatten()
        .filter(|r| scope.serves(r))
        .collect();
    // A fabric partition the controller publishes is ours too, but nothing
    // on a node attaches it: a claim with only such results (a job's
    // shared partition claim) is prepared with no devices.
    let mut ours = (devices.results.iter().flatten()).filter(|r| r.driver == scope.driver);
    let partitions_only = ours.clone().next().is_some()
        && ours.all(|r| r.pool.starts_with(dra_model::partitions::POOL_PREFIX));
    if results.is_empty() && partitions_only {
        return Ok(Vec::new());
    }
    if results.is_empty() {
        return Err(ResolveError::NothingHere {
            claim: label,
            driver: scope.driver.clone(),
            pool: scope.pool.clone(),
        });
    }
    let configs = devices.config.as_deref().unwrap_or_default();
    let by_name: BTreeMap<String, &topology::NicFunction> = inventory
        .nics
        .iter()
        .map(|n| (dra_model::names::device_name(n), n))
        .collect();
    results
        .into_iter()
        .map(|r| plan_device(claim, &label, r, configs, scope, &by_name))
        .collect()
}

/// Plans result `r` of `claim` (named `label`) on the NIC it names.
fn plan_device(
    claim: &ResourceClaim,
    label: &str,
    r: &DeviceRequestAllocationResult,
    configs: &[DeviceAllocationConfiguration],
    scope: &Scope,
    by_name: &BTreeMap<String, &topology::NicFunction>,
) -> Result<PlannedDevice, ResolveError> {
    let config = config_for_request(configs, &scope.driver, &r.request).map_err(|source| {
        ResolveError::Config {
            claim: label.to_string(),
            source,
        }
    })?;
    let nic = by_name
        .get(&r.device)
        .ok_or_else(|| ResolveError::UnknownDevice {
            claim: label.to_string(),
            device: r.device.clone(),
        })?;
    let netdev = match config.mode {
        AttachMode::Rdma => None,
        AttachMode::Netdev => Some(netdev_of(claim, r, config.netdev.as_ref(), nic).map_err(
            |reason| ResolveError::Netdev {
                claim: label.to_string(),
                request: r.request.clone(),
                reason,
            },
        )?),
    };
    Ok(PlannedDevice {
        request: r.request.clone(),
        admin_access: r.admin_access == Some(true),
        attached: AttachedDevice {
            device: r.device.clone(),
            request: r.request.clone(),
            nic: (*nic).clone(),
            umad: config.umad,
            issm: config.issm,
            share: share_of(r),
            netdev_gate: None,
        },
        netdev,
    })
}

/// What exclusive netdev mode moves for result `r` on `nic`: its first
/// netdev, into the one pod the claim is reserved for, as `settings` say.
fn netdev_of(
    claim: &ResourceClaim,
    r: &DeviceRequestAllocationResult,
    settings: Option<&NetdevSettings>,
    nic: &topology::NicFunction,
) -> Result<NetdevDevice, String> {
    if r.share_id.is_some() {
        return Err(format!(
            "device {} is allocated as a share; a shared NIC's netdev cannot move into one pod (use mode rdma)",
            r.device
        ));
    }
    if r.admin_access == Some(true) {
        return Err(format!(
            "device {} is allocated with admin access, which must not take the netdev from its user",
            r.device
        ));
    }
    let pods: Vec<&str> = (claim.status.as_ref())
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.resource == "pods" && c.api_group.as_deref().unwrap_or("").is_empty())
        .map(|c| c.uid.as_str())
        .collect();
    let [pod_uid] = pods[..] else {
        return Err(format!(
            "the claim is reserved for {} pods; a netdev can be in one pod's network namespace only",
            pods.len()
        ));
    };
    let host_name = (nic.netdevs.first())
        .map(|n| n.name.clone())
        .ok_or_else(|| format!("device {} has no netdev on this node", r.device))?;
    let plan = (settings.cloned().unwrap_or_default())
        .plan(&host_name)
        .map_err(|e| e.to_string())?;
    Ok(NetdevDevice {
        host_name,
        pod_uid: pod_uid.to_string(),
        plan,
    })
}

fn share_of(r: &DeviceRequestAllocationResult) -> Option<Share> {
    let id = r.share_id.clone()?;
    let consumed = r
        .consumed_capacity
        .iter()
        .flatten()
        .map(|(name, q)| (name.clone(), q.0.clone()))
        .collect();
    Some(Share { id, consumed })
}

#[cfg(test)]
mod tests;
