//! The driver's part of a claim's status (KEP-4817, `status.devices`):
//! after a claim is prepared, one entry per prepared device with a `Ready`
//! condition and its `networkData` (interface name, hardware address and
//! the interface's addresses in CIDR form); after unprepare, none.
//!
//! Written by server-side apply with field manager `<driver>/<node>`, so
//! the entries are this agent's alone (the list is keyed by driver, pool,
//! device and share) and applying an empty list removes exactly what it
//! wrote; the body names the claim's UID, so a write for a claim that was
//! deleted and recreated under the same name is refused, not applied to
//! the new one.
//! Needs `patch` on `resourceclaims/status` and, from 1.36 (granular
//! status authorization), `associated-node:patch` on `resourceclaims/driver`
//! for our driver name; the chart grants both. Best effort: the kubelet's
//! answer never waits for or fails on it.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::{AllocatedDeviceStatus, NetworkDeviceData};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{mpsc, watch};
use topology::Inventory;

use super::ClaimRef;
use super::claims::SharedClaims;
use super::resolve::Scope;
use crate::addresses::Addresses;
use crate::checkpoint::PreparedDevice;

/// What the status writer is asked to do.
#[derive(Debug)]
pub enum StatusJob {
    /// The claim was prepared with these devices.
    Prepared {
        /// The claim.
        claim: ClaimRef,
        /// Its devices on this node.
        devices: Vec<PreparedDevice>,
    },
    /// Netdevs of the claim moved into its pod (exclusive netdev mode):
    /// those devices' network data is the pod's, by device name.
    InPod {
        /// The claim.
        claim: ClaimRef,
        /// Its devices on this node.
        devices: Vec<PreparedDevice>,
        /// The moved devices' network data inside the pod.
        network: std::collections::BTreeMap<String, NetworkData>,
    },
    /// The claim was unprepared.
    Unprepared {
        /// The claim.
        claim: ClaimRef,
    },
}

/// How long the writer lets a burst of prepares settle before writing:
/// the kubelet's answers come first, the status follows.
pub const SETTLE: std::time::Duration = std::time::Duration::from_millis(50);
/// The longest a job waits in a burst that does not settle.
pub const MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

impl StatusJob {
    fn claim(&self) -> &ClaimRef {
        match self {
            StatusJob::Prepared { claim, .. }
            | StatusJob::InPod { claim, .. }
            | StatusJob::Unprepared { claim } => claim,
        }
    }
}

/// Writes the jobs in order, so that a claim's entries never outlive its
/// unprepare, until every sender is gone. Jobs are taken in batches once
/// they stop arriving for [`SETTLE`] (or after [`MAX_DELAY`]), and only the
/// last job of each claim in a batch is written: a burst of prepares is not
/// slowed by writes that may be superseded anyway.
pub async fn run(
    mut jobs: mpsc::UnboundedReceiver<StatusJob>,
    claims: SharedClaims,
    scope: Scope,
    inventory: watch::Receiver<Arc<Inventory>>,
    addresses: Addresses,
) {
    while let Some(first) = jobs.recv().await {
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + MAX_DELAY;
        while tokio::time::Instant::now() < deadline {
            match tokio::time::timeout(SETTLE, jobs.recv()).await {
                Ok(Some(job)) => batch.push(job),
                Ok(None) | Err(_) => break,
            }
        }
        let last: std::collections::HashMap<&str, usize> = batch
            .iter()
            .enumerate()
            .map(|(index, job)| (job.claim().uid.as_str(), index))
            .collect();
        for (index, job) in batch.iter().enumerate() {
            if last[job.claim().uid.as_str()] == index {
                write(job, &claims, &scope, &inventory, &addresses).await;
            }
        }
    }
}

async fn write(
    job: &StatusJob,
    claims: &SharedClaims,
    scope: &Scope,
    inventory: &watch::Receiver<Arc<Inventory>>,
    addresses: &Addresses,
) {
    let moved_none = std::collections::BTreeMap::new();
    let (claim, devices, moved) = match job {
        StatusJob::Prepared { claim, devices } => (claim, devices, &moved_none),
        StatusJob::InPod {
            claim,
            devices,
            network,
        } => (claim, devices, network),
        StatusJob::Unprepared { claim } => {
            return apply(claims, scope, claim, &[]).await;
        }
    };
    let today = inventory.borrow().clone();
    let mut with_network = Vec::with_capacity(devices.len());
    for device in devices.iter().cloned() {
        let net = match moved.get(&device.device) {
            Some(net) => net.clone(),
            None => {
                let mut net = netdev_of(&device, &today);
                if let Some(ifname) = &net.interface_name {
                    net.ips = addresses.of(ifname).await;
                }
                net
            }
        };
        with_network.push((device, net));
    }
    let entries = entries(&scope.driver, &scope.pool, &with_network, Timestamp::now());
    apply(claims, scope, claim, &entries).await
}

async fn apply(
    claims: &SharedClaims,
    scope: &Scope,
    claim: &ClaimRef,
    entries: &[AllocatedDeviceStatus],
) {
    let body = dra_model::claim::status_apply_body(claim, entries);
    let manager = format!("{}/{}", scope.driver, scope.pool);
    if let Err(error) = claims
        .apply_status(&claim.namespace, &claim.name, &manager, body)
        .await
    {
        tracing::warn!(claim_uid = %claim.uid, %error, "claim device status not written");
    }
}

/// `networkData` of a prepared device: its netdev, MAC and addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetworkData {
    /// The netdev (`enp4s0`), when the NIC has one.
    pub interface_name: Option<String>,
    /// Its MAC.
    pub hardware_address: Option<String>,
    /// Its addresses, `10.0.0.5/24`.
    pub ips: Vec<String>,
}

impl NetworkData {
    /// As the API's `NetworkDeviceData`.
    pub fn to_api(&self) -> k8s_openapi::api::resource::v1::NetworkDeviceData {
        k8s_openapi::api::resource::v1::NetworkDeviceData {
            interface_name: self.interface_name.clone(),
            hardware_address: self.hardware_address.clone(),
            ips: (!self.ips.is_empty()).then(|| self.ips.clone()),
        }
    }
}

/// The netdev name and MAC of `device` in today's inventory.
pub fn netdev_of(device: &PreparedDevice, inventory: &Inventory) -> NetworkData {
    let nic = inventory
        .nics
        .iter()
        .find(|n| dra_model::names::device_name(n) == device.device);
    let netdev = nic.and_then(|n| n.netdevs.first());
    NetworkData {
        interface_name: netdev.map(|n| n.name.clone()),
        hardware_address: netdev.and_then(|n| n.mac.clone()),
        ips: Vec::new(),
    }
}

/// The `status.devices` entries of `devices`, each with its network data
/// (none where nothing is known of it), `Ready` since `now`.
pub fn entries(
    driver: &str,
    node: &str,
    devices: &[(PreparedDevice, NetworkData)],
    now: Timestamp,
) -> Vec<AllocatedDeviceStatus> {
    devices
        .iter()
        .map(|(d, net)| AllocatedDeviceStatus {
            driver: driver.to_string(),
            pool: d.pool.clone(),
            device: d.device.clone(),
            share_id: d.share_id.clone(),
            conditions: Some(vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "Prepared".into(),
                message: format!("prepared on node {node}: {}", d.cdi_ids.join(", ")),
                last_transition_time: Time(now),
                observed_generation: None,
            }]),
            network_data: Some(net.to_api()).filter(|n| *n != NetworkDeviceData::default()),
            data: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepared(device: &str, share: Option<&str>) -> PreparedDevice {
        PreparedDevice {
            requests: vec!["nic".into()],
            pool: "node-a".into(),
            device: device.into(),
            share_id: share.map(str::to_string),
            admin_access: false,
            cdi_ids: vec![format!("amd.com/ainic=u1-{device}")],
            identity: None,
            netdev: None,
        }
    }

    #[test]
    fn one_ready_entry_per_device_with_its_network_data() {
        let net = NetworkData {
            interface_name: Some("enp4s0".into()),
            hardware_address: Some("02:00:00:04:00:00".into()),
            ips: vec!["10.0.0.5/24".into()],
        };
        let devices = [
            (prepared("pf-0000-04-00-0", None), net),
            (
                prepared("pf-0000-24-00-0", Some("s1")),
                NetworkData::default(),
            ),
        ];
        let now = "2026-12-01T00:00:00Z".parse().unwrap();
        let got = entries("ainic.amd.com", "node-a", &devices, now);
        let got = serde_json::to_value(got).unwrap();
        assert_eq!(got.as_array().unwrap().len(), 2);
        assert_eq!(got[0]["device"], "pf-0000-04-00-0");
        assert_eq!(got[0]["conditions"][0]["type"], "Ready");
        assert_eq!(got[0]["conditions"][0]["status"], "True");
        assert_eq!(got[0]["conditions"][0]["reason"], "Prepared");
        assert_eq!(
            got[0]["conditions"][0]["lastTransitionTime"],
            "2026-12-01T00:00:00Z"
        );
        assert_eq!(
            got[0]["conditions"][0]["message"],
            "prepared on node node-a: amd.com/ainic=u1-pf-0000-04-00-0"
        );
        assert_eq!(got[0]["driver"], "ainic.amd.com");
        assert_eq!(got[0]["pool"], "node-a");
        assert_eq!(
            got[0]["networkData"]["hardwareAddress"],
            "02:00:00:04:00:00"
        );
        assert_eq!(got[0]["networkData"]["interfaceName"], "enp4s0");
        assert_eq!(got[0]["networkData"]["ips"][0], "10.0.0.5/24");
        assert!(got[0].get("shareID").is_none());
        assert_eq!(got[1]["shareID"], "s1");
        assert!(
            got[1].get("networkData").is_none(),
            "nothing known, nothing said"
        );
    }
}
