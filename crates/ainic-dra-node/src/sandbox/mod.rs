//! Exclusive netdev mode at pod sandbox events (the NRI plugin's hooks,
//! [`hooks`]): a prepared claim's netdevs move into the pod's network
//! namespace when its sandbox runs, and come home when that sandbox stops.
//!
//! Prepare did the slow part (resolving names, checking the settings, the
//! one pod the claim is for); a hook only moves. The attach mode is a
//! closed set of two (`rdma`: nothing moves; `netdev`: this module), so it
//! is the [`crate::checkpoint::PreparedDevice::netdev`] option that
//! prepare fills, not a trait with one real implementation.
//!
//! Every move is recorded in the checkpoint before the netdev leaves the
//! host ([`MovePhase::Moving`]), marked [`MovePhase::InPod`] once
//! configured there, marked moving again before it leaves the pod, and
//! forgotten once home (`Sandboxes::set_phase` is the one place the
//! phase changes). An agent killed at any point finds on restart what to
//! bring home: the runtime's `Synchronize` lists its sandboxes; a move
//! whose sandbox is not running with its namespace, or that stopped
//! half-way, is undone (the netdev is looked for in the pod, then on the
//! host by PCI address and pod name), and running sandboxes get what they
//! lack. Unprepare brings a claim's netdevs home too. Moves belong to a
//! sandbox, not a pod: the kubelet stops and removes a pod's old sandbox
//! while its new one runs.
//!
//! In the kernel's exclusive RDMA netns mode the NIC's RDMA device moves
//! with its netdev ([`crate::rdma_netns`]): in after the netdev,
//! home before it.
//!
//! Locking ([`locks`]): a hook holds the locks of the moves it touches
//! (one per claim and device), so hooks of different pods run side by
//! side and a slow move holds up only its own pod; `Synchronize` shuts
//! every hook out until it has converged on its snapshot of the runtime.
//!
//! A NIC never stays in a pod that is going for want of a checkpoint
//! write: when the move home cannot be recorded (a full disk), the netdev
//! is brought home all the same, and forgetting the move is retried until
//! the checkpoint takes it (the record that it is still away is the safe
//! error: a restart brings it home again).

mod attach;
mod detach;
pub mod error;
pub mod hooks;
pub mod locks;
mod synchronize;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nri::api::PodSandbox;
use tokio::sync::{RwLock, mpsc};

use locks::{ClaimGuard, KeyLocks};

pub use error::SandboxError;
pub use hooks::follow_runtime;

use crate::checkpoint::store::CheckpointStore;
use crate::checkpoint::{MovePhase, NetdevDevice, NetdevMove, PreparedDevice, move_key};
use crate::faults::{self, Point};
use crate::netdev;
use crate::plugin::ClaimRef;
use crate::plugin::status::{NetworkData, StatusJob};
use crate::rdma_netns::{NetnsMode, RdmaError, RdmaNetns};

/// The pod sandbox hooks of one node agent.
pub struct Sandboxes {
    store: Arc<CheckpointStore>,
    sysfs: PathBuf,
    status: Option<mpsc::UnboundedSender<StatusJob>>,
    /// Shared by hooks, exclusive for `Synchronize` ([`locks`]).
    gate: Arc<RwLock<()>>,
    /// One lock per move key ([`locks`]).
    keys: Arc<KeyLocks>,
    enabled: bool,
    synced: AtomicBool,
    rdma: Arc<dyn RdmaNetns>,
    /// The CDI directory, where a netdev's gate file exists while it is in
    /// its pod ([`crate::cdi::netdev_gate`]); `None`: no gate files.
    gates: Option<PathBuf>,
}

/// A device of a prepared claim that moves into a pod.
struct Wanted {
    claim: ClaimRef,
    devices: Vec<PreparedDevice>,
    device: PreparedDevice,
    netdev: NetdevDevice,
}

impl Wanted {
    fn label(&self) -> String {
        format!("{}/{}", self.claim.namespace, self.claim.name)
    }

    fn key(&self) -> String {
        move_key(&self.claim.uid, &self.device.device)
    }
}

/// A pod sandbox as the hooks need it.
#[derive(Clone, Debug)]
pub struct Sandbox {
    /// The sandbox ID.
    pub id: String,
    /// The pod's UID.
    pub pod_uid: String,
    /// The sandbox's network namespace.
    pub netns: PathBuf,
}

impl Sandbox {
    /// The sandbox of `pod`, if it has a network namespace.
    pub fn of(pod: &PodSandbox) -> Option<Sandbox> {
        Some(Sandbox {
            id: pod.id.clone(),
            pod_uid: pod.uid.clone(),
            netns: PathBuf::from(nri::network_namespace(pod)?),
        })
    }
}

/// Whether two records are of one move: the same sandbox, netns and pod
/// (whatever its phase).
fn same_move(a: &NetdevMove, b: &NetdevMove) -> bool {
    (a.sandbox_id == b.sandbox_id) && (a.netns == b.netns) && (a.pod_uid == b.pod_uid)
}

/// Whether `moved` belongs to sandbox `id` of pod `pod_uid` (records from
/// before sandbox IDs were kept go by the pod).
fn belongs(moved: &NetdevMove, id: &str, pod_uid: &str) -> bool {
    if moved.sandbox_id.is_empty() {
        moved.pod_uid == pod_uid
    } else {
        moved.sandbox_id == id
    }
}

impl Sandboxes {
    /// Hooks over the agent's checkpoint; `sysfs` finds netdevs by PCI
    /// address; `status` gets the moved devices' network data; `enabled`
    /// says whether an NRI plugin runs (without one, claims in netdev mode
    /// are refused at prepare); `rdma` moves RDMA devices
    /// ([`crate::rdma_netns::Kernel`] but in tests).
    pub fn new(
        store: Arc<CheckpointStore>,
        sysfs: &Path,
        status: Option<mpsc::UnboundedSender<StatusJob>>,
        enabled: bool,
        rdma: Arc<dyn RdmaNetns>,
    ) -> Sandboxes {
        Sandboxes {
            store,
            sysfs: sysfs.to_path_buf(),
            status,
            gate: Arc::default(),
            keys: Arc::default(),
            enabled,
            synced: AtomicBool::new(false),
            rdma,
            gates: None,
        }
    }

    /// Keeps the netdevs' gate files in `cdi_dir`: a container of a claim
    /// in netdev mode starts only once its netdev is in the pod.
    pub fn with_netdev_gates(mut self, cdi_dir: &Path) -> Sandboxes {
        self.gates = Some(cdi_dir.to_path_buf());
        self
    }

    /// Why claims in netdev mode cannot be prepared now, if they cannot:
    /// no NRI plugin, or one the runtime has not synchronized (its NRI
    /// may be off).
    pub fn not_ready(&self) -> Option<&'static str> {
        if !self.enabled {
            Some("it is off on this node")
        } else if !self.synced.load(Ordering::Relaxed) {
            Some("the container runtime has not synchronized it (is NRI enabled in the runtime?)")
        } else {
            None
        }
    }

    /// Whether a move of claim `claim_uid` is recorded (its spec then
    /// stays as prepared: the devices are the pod's).
    pub fn has_moves(&self, claim_uid: &str) -> bool {
        let prefix = format!("{claim_uid}/");
        self.store.moves().keys().any(|k| k.starts_with(&prefix))
    }

    /// The netdev-mode devices of prepared claims reserved for `pod_uid`.
    fn wanted(&self, pod_uid: &str) -> Vec<Wanted> {
        let mut out = Vec::new();
        for (uid, record) in self.store.snapshot().claims {
            for device in &record.devices {
                let Some(netdev) = device.netdev.clone().filter(|n| n.pod_uid == pod_uid) else {
                    continue;
                };
                out.push(Wanted {
                    claim: record.claim_ref(&uid),
                    devices: record.devices.clone(),
                    device: device.clone(),
                    netdev,
                });
            }
        }
        out
    }
}
