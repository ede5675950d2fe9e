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

pub mod error;
pub mod hooks;
pub mod locks;

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

    /// Moves every netdev the pod's claims want into `sandbox`; on a
    /// failure brings back what it moved and says which netdev failed.
    pub async fn attach_sandbox(&self, sandbox: &Sandbox) -> Result<(), SandboxError> {
        let _gate = self.gate.read().await;
        self.attach_gated(sandbox).await
    }

    /// [`Sandboxes::attach_sandbox`] under the gate.
    async fn attach_gated(&self, sandbox: &Sandbox) -> Result<(), SandboxError> {
        let keys: BTreeSet<String> = self
            .wanted(&sandbox.pod_uid)
            .iter()
            .map(Wanted::key)
            .collect();
        let _held = self.keys.lock_all(&keys).await;
        // Read again under the keys: a claim may have gone meanwhile.
        let mut wanted = self.wanted(&sandbox.pod_uid);
        wanted.retain(|w| keys.contains(&w.key()));
        let mut done: Vec<String> = Vec::new();
        for want in &wanted {
            let key = want.key();
            if let Err(error) = self.attach_one(&key, want, sandbox).await {
                // Nothing of the pod's stays in it: what moved, and this
                // one should it have stopped half-way.
                for key in done.iter().chain([&key]) {
                    if let Some(moved) = self.store.moves().remove(key.as_str()) {
                        self.bring_home(key, moved).await;
                    }
                }
                return Err(error);
            }
            done.push(key);
        }
        self.report_in_pod(&wanted);
        Ok(())
    }

    async fn attach_one(
        &self,
        key: &str,
        want: &Wanted,
        sandbox: &Sandbox,
    ) -> Result<(), SandboxError> {
        let netns = sandbox.netns.display().to_string();
        match self.store.moves().remove(key) {
            // A retried hook: it is there already.
            Some(m) if m.phase == MovePhase::InPod && m.netns == netns => return Ok(()),
            // Left half-way, or in another sandbox: home first.
            Some(m) if !self.bring_home(key, m.clone()).await => {
                return Err(SandboxError::StillAway {
                    claim: want.label(),
                    netdev: m.host.host_name,
                    pod: m.pod_uid,
                });
            }
            _ => {}
        }
        let netdev_error = |source| SandboxError::Netdev {
            claim: want.label(),
            device: want.device.device.clone(),
            source,
        };
        let pci = (want.device.identity.as_ref()).map(|i| i.pci_address.as_str());
        let host_name = pci
            .and_then(|pci| netdev::host_netdev(&self.sysfs, pci))
            .unwrap_or_else(|| want.netdev.host_name.clone());
        let plan = &want.netdev.plan;
        let host = (netdev::survey(&host_name, plan, &self.sysfs).await).map_err(netdev_error)?;
        let rdma_device = self.rdma_to_move(want, pci).await?;
        let mut record = NetdevMove {
            pod_uid: sandbox.pod_uid.clone(),
            sandbox_id: sandbox.id.clone(),
            netns,
            phase: MovePhase::Moving,
            host,
            rdma_device,
        };
        self.set_phase(key, &mut record, Some(MovePhase::Moving))
            .await?;
        faults::hit(Point::AttachAfterRecord);
        if let Err(error) = netdev::attach(&record.host, &sandbox.netns, plan, &self.sysfs).await {
            if matches!(error, netdev::NetdevError::Clash { .. }) {
                // Nothing moved, and the pod's link of that name is its own.
                self.set_phase(key, &mut record, None).await?;
            } else {
                self.bring_home(key, record).await;
            }
            return Err(netdev_error(error));
        }
        if let Some(rdma) = record.rdma_device.clone()
            && let Err(source) = self.move_rdma(&rdma, None, Some(&sandbox.netns)).await
        {
            // The RDMA device did not move: only the netdev comes home.
            record.rdma_device = None;
            self.bring_home(key, record).await;
            return Err(SandboxError::Rdma {
                claim: want.label(),
                device: want.device.device.clone(),
                source,
            });
        }
        faults::hit(Point::AttachAfterMove);
        self.set_phase(key, &mut record, Some(MovePhase::InPod))
            .await
    }

    /// The one place a move's phase changes: records `record` in `phase`,
    /// or forgets it (`None`), durably.
    async fn set_phase(
        &self,
        key: &str,
        record: &mut NetdevMove,
        phase: Option<MovePhase>,
    ) -> Result<(), SandboxError> {
        let entry = phase.map(|phase| {
            record.phase = phase;
            record.clone()
        });
        (self.store.record_move(key, entry).await).map_err(|source| SandboxError::Record {
            key: key.to_string(),
            source,
        })?;
        self.set_gate(key, phase == Some(MovePhase::InPod));
        Ok(())
    }

    /// Creates the gate file of move `key` (the netdev is in its pod) or
    /// removes it. A gate that cannot be created keeps the pod's containers
    /// from starting (fail closed); the error is logged.
    fn set_gate(&self, key: &str, open: bool) {
        let Some(dir) = &self.gates else { return };
        let Some((uid, device)) = key.split_once('/') else {
            return;
        };
        let gate = crate::cdi::netdev_gate(dir, uid, device);
        let done = if open {
            std::fs::write(&gate, b"")
        } else {
            match std::fs::remove_file(&gate) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        };
        if let Err(error) = done {
            tracing::error!(gate = %gate.display(), open, %error, "cannot change a netdev's gate file");
        }
    }

    /// Moves the netdev (and RDMA device) of `moved` home and forgets the
    /// move; whether it is home (failures are logged and the move kept
    /// as moving, to retry). The caller holds the move's key. A move home
    /// the checkpoint cannot record (a full disk) happens all the same:
    /// a NIC must not stay in a pod that is going, and the record that it
    /// is away makes a restart bring it home again; forgetting the move
    /// is retried ([`Sandboxes::retry_forget`]).
    async fn bring_home(&self, key: &str, mut moved: NetdevMove) -> bool {
        if moved.phase != MovePhase::Moving
            && let Err(error) = self
                .set_phase(key, &mut moved, Some(MovePhase::Moving))
                .await
        {
            tracing::warn!(key, %error, "cannot record the move home; moving the netdev home anyway");
        }
        let netns = Path::new(&moved.netns);
        if let Some(rdma) = &moved.rdma_device {
            match self.move_rdma(rdma, Some(netns), None).await {
                // Home already, or its namespace is gone (the kernel then
                // returns it to the host's).
                Ok(()) | Err(RdmaError::NotFound(_)) => {}
                Err(RdmaError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => {
                    tracing::error!(key, rdma, %error, "cannot bring the RDMA device home; will retry");
                    return false;
                }
            }
        }
        if let Err(error) = netdev::detach(&moved.host, Some(netns), &self.sysfs).await {
            tracing::error!(key, netdev = %moved.host.host_name, %error, "cannot bring the netdev home; will retry");
            return false;
        }
        faults::hit(Point::DetachBeforeForget);
        if let Err(error) = self.set_phase(key, &mut moved, None).await {
            tracing::warn!(key, %error, "netdev home, but the checkpoint still records the move; retrying");
            self.retry_forget(key, moved);
        }
        true
    }

    /// Forgets the move `key` once the checkpoint can record it, trying
    /// from 100 ms, doubling to 30 s, for as long as the move recorded is
    /// still `moved` (a newer move of the key is left alone).
    fn retry_forget(&self, key: &str, moved: NetdevMove) {
        let (store, gate, keys) = (self.store.clone(), self.gate.clone(), self.keys.clone());
        let key = key.to_string();
        tokio::spawn(async move {
            let mut wait = Duration::from_millis(100);
            loop {
                tokio::time::sleep(wait).await;
                let _gate = gate.read().await;
                let _held = keys.lock_all(&BTreeSet::from([key.clone()])).await;
                if !(store.moves().get(&key)).is_some_and(|m| same_move(m, &moved)) {
                    return;
                }
                match store.record_move(&key, None).await {
                    Ok(()) => {
                        tracing::info!(key, "the checkpoint recorded the netdev home at last");
                        return;
                    }
                    Err(error) => {
                        tracing::debug!(key, %error, "still cannot record the netdev home")
                    }
                }
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        });
    }

    /// The RDMA device to move with the netdev: the NIC's (today's name,
    /// by PCI address) when the host's RDMA netns mode is exclusive.
    async fn rdma_to_move(
        &self,
        want: &Wanted,
        pci: Option<&str>,
    ) -> Result<Option<String>, SandboxError> {
        let recorded = (want.device.identity.as_ref()).and_then(|i| i.rdma_device.clone());
        let today = pci.and_then(|pci| rdma_device_of(&self.sysfs, pci));
        let Some(name) = today.or(recorded) else {
            return Ok(None);
        };
        let rdma = self.rdma.clone();
        let mode = tokio::task::spawn_blocking(move || rdma.mode())
            .await
            .unwrap_or_else(|e| Err(RdmaError::Malformed(e.to_string())));
        match mode {
            Ok(NetnsMode::Exclusive) => Ok(Some(name)),
            Ok(NetnsMode::Shared) => Ok(None),
            // No RDMA subsystem: no RDMA device to move.
            Err(RdmaError::Unavailable(error)) => {
                tracing::debug!(%error, "no RDMA netlink: the RDMA device stays");
                Ok(None)
            }
            Err(source) => Err(SandboxError::Rdma {
                claim: want.label(),
                device: want.device.device.clone(),
                source,
            }),
        }
    }

    async fn move_rdma(
        &self,
        name: &str,
        from: Option<&Path>,
        to: Option<&Path>,
    ) -> Result<(), RdmaError> {
        let (rdma, name) = (self.rdma.clone(), name.to_string());
        let (from, to) = (from.map(Path::to_path_buf), to.map(Path::to_path_buf));
        tokio::task::spawn_blocking(move || rdma.move_device(&name, from.as_deref(), to.as_deref()))
            .await
            .unwrap_or_else(|e| Err(RdmaError::Malformed(e.to_string())))
    }

    /// Brings home every netdev moved into sandbox `id` of pod `pod_uid`.
    pub async fn detach_sandbox(&self, id: &str, pod_uid: &str) {
        let _gate = self.gate.read().await;
        let of_sandbox = |moved: &NetdevMove| belongs(moved, id, pod_uid);
        let keys: BTreeSet<String> = (self.store.moves().into_iter())
            .filter(|(_, m)| of_sandbox(m))
            .map(|(k, _)| k)
            .collect();
        let _held = self.keys.lock_all(&keys).await;
        for (key, moved) in self.store.moves() {
            if keys.contains(&key) && of_sandbox(&moved) {
                self.bring_home(&key, moved).await;
            }
        }
    }

    /// Brings home every netdev of claim `claim_uid` (before unprepare);
    /// the guard keeps every hook away from the claim's netdevs until the
    /// claim is forgotten.
    pub async fn detach_claim(&self, claim_uid: &str) -> Result<ClaimGuard, SandboxError> {
        let gate = self.gate.clone().read_owned().await;
        let prefix = format!("{claim_uid}/");
        let mut keys: BTreeSet<String> = (self.store.moves().into_keys())
            .filter(|k| k.starts_with(&prefix))
            .collect();
        let record = self.store.get(claim_uid);
        let devices = record.iter().flat_map(|r| &r.devices);
        keys.extend(
            devices
                .filter(|d| d.netdev.is_some())
                .map(|d| move_key(claim_uid, &d.device)),
        );
        let held = self.keys.lock_all(&keys).await;
        for (key, moved) in self.store.moves() {
            if key.starts_with(&prefix) && !self.bring_home(&key, moved.clone()).await {
                return Err(SandboxError::StillAway {
                    claim: claim_uid.to_string(),
                    netdev: moved.host.host_name,
                    pod: moved.pod_uid,
                });
            }
        }
        Ok(ClaimGuard {
            _gate: gate,
            _keys: held,
        })
    }

    /// Converges on the runtime's sandboxes ([`Sandboxes::synchronize`])
    /// in the background, with every hook shut out from now until it is
    /// done: hooks the runtime sends after `Synchronize` see its result.
    /// Returns once the hooks are shut out; the handle ends with the
    /// convergence.
    pub async fn begin_synchronize(
        self: &Arc<Self>,
        pods: Vec<PodSandbox>,
    ) -> tokio::task::JoinHandle<()> {
        self.synced.store(true, Ordering::Relaxed);
        let gate = self.gate.clone().write_owned().await;
        let sandboxes = self.clone();
        tokio::spawn(async move {
            let _gate = gate;
            sandboxes.synchronize_gated(&pods).await;
        })
    }

    /// Converges on the runtime's sandboxes: moves whose sandbox is not
    /// running with its namespace, or that stopped half-way, are undone;
    /// running sandboxes get their netdevs. No hook runs meanwhile.
    pub async fn synchronize(&self, pods: &[PodSandbox]) {
        self.synced.store(true, Ordering::Relaxed);
        let _gate = self.gate.write().await;
        self.synchronize_gated(pods).await;
    }

    async fn synchronize_gated(&self, pods: &[PodSandbox]) {
        // Runtimes list stopped sandboxes too: without a namespace
        // (containerd) or with one that is gone (CRI-O).
        let running: Vec<Sandbox> = (pods.iter().filter_map(Sandbox::of))
            .filter(|s| s.netns.exists())
            .collect();
        for (key, moved) in self.store.moves() {
            let alive = running
                .iter()
                .any(|s| belongs(&moved, &s.id, &s.pod_uid) && s.netns == Path::new(&moved.netns));
            if !alive || moved.phase == MovePhase::Moving {
                self.bring_home(&key, moved).await;
            }
        }
        for sandbox in &running {
            if self.wanted(&sandbox.pod_uid).is_empty() {
                continue;
            }
            if let Err(error) = self.attach_gated(sandbox).await {
                tracing::error!(pod_uid = %sandbox.pod_uid, sandbox = %sandbox.id, %error, "cannot move a running pod's netdev in");
            }
        }
    }

    /// Tells the status writer each claim's moved netdevs as the pod sees
    /// them (one job per claim: the writer keeps a claim's last job).
    fn report_in_pod(&self, wanted: &[Wanted]) {
        let Some(status) = &self.status else { return };
        let moves = self.store.moves();
        let mut jobs: BTreeMap<&str, StatusJob> = BTreeMap::new();
        for want in wanted {
            let key = move_key(&want.claim.uid, &want.device.device);
            let Some(moved) = moves.get(&key) else {
                continue;
            };
            let job = jobs
                .entry(want.claim.uid.as_str())
                .or_insert_with(|| StatusJob::InPod {
                    claim: want.claim.clone(),
                    devices: want.devices.clone(),
                    network: BTreeMap::new(),
                });
            if let StatusJob::InPod { network, .. } = job {
                network.insert(want.device.device.clone(), pod_view(&want.netdev, moved));
            }
        }
        for job in jobs.into_values() {
            let _ = status.send(job);
        }
    }
}

/// The RDMA device of PCI function `pci` in sysfs
/// (`bus/pci/devices/<pci>/infiniband/<name>`).
fn rdma_device_of(sysfs: &Path, pci: &str) -> Option<String> {
    let dir = sysfs.join("bus/pci/devices").join(pci).join("infiniband");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names.into_iter().next()
}

/// A moved netdev's network data inside the pod.
fn pod_view(netdev: &NetdevDevice, moved: &NetdevMove) -> NetworkData {
    let plan = &netdev.plan;
    let ips = (plan.addresses.as_ref())
        .unwrap_or(&moved.host.host_addresses)
        .iter()
        .map(|c| c.to_string())
        .collect();
    NetworkData {
        interface_name: Some(plan.name.clone()),
        hardware_address: moved.host.mac.clone(),
        ips,
    }
}
