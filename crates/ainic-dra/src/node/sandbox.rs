//! Exclusive netdev mode at pod sandbox events (the NRI plugin's hooks):
//! a prepared claim's netdevs move into the pod's network namespace when
//! its sandbox runs, and come home when it stops.
//!
//! Prepare did the slow part (resolving names, checking the settings, the
//! one pod the claim is for); a hook only moves. Every move is recorded in
//! the checkpoint before the netdev leaves the host
//! ([`MovePhase::Moving`]), marked [`MovePhase::InPod`] once configured
//! there, and forgotten once home, so an agent killed at any point finds
//! on restart what to bring home: the runtime's `Synchronize` names the
//! pods still running; a move whose pod is gone, or that stopped half-way,
//! is undone (the netdev is looked for in the pod, then on the host by
//! host name, pod name and PCI address), and running pods get what they
//! lack. Unprepare brings a claim's netdevs home too, so a pod that
//! stopped while the agent was down strands nothing.
//!
//! In the kernel's exclusive RDMA netns mode the NIC's RDMA device moves
//! with its netdev ([`crate::node::rdma_netns`]): in after the netdev, home before it
//! (the netdev's return makes the agent rescan, which should find the RDMA
//! device home already).
//!
//! One lock serialises all moves: hooks take tens of milliseconds, and two
//! moves of the same netdev must never interleave.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nri::api::PodSandbox;
use tokio::sync::{Mutex, mpsc};

use crate::node::checkpoint::store::CheckpointStore;
use crate::node::checkpoint::{MovePhase, NetdevDevice, NetdevMove, PreparedDevice, move_key};
use crate::node::netdev;
use crate::node::plugin::ClaimRef;
use crate::node::plugin::status::{NetworkData, StatusJob};
use crate::node::rdma_netns::{NetnsMode, RdmaError, RdmaNetns};

/// The pod sandbox hooks of one node agent.
pub struct Sandboxes {
    store: Arc<CheckpointStore>,
    sysfs: PathBuf,
    status: Option<mpsc::UnboundedSender<StatusJob>>,
    moving: Mutex<()>,
    serving: bool,
    rdma: Arc<dyn RdmaNetns>,
}

/// A device of a prepared claim that moves into a pod.
struct Wanted {
    claim: ClaimRef,
    devices: Vec<PreparedDevice>,
    device: PreparedDevice,
    netdev: NetdevDevice,
}

impl Sandboxes {
    /// Hooks over the agent's checkpoint; `sysfs` finds netdevs by PCI
    /// address; `status` gets the moved devices' network data; `serving`
    /// says whether an NRI plugin calls them (without one, claims in
    /// netdev mode are refused at prepare); `rdma` moves RDMA devices
    /// ([`rdma_netns::Kernel`] but in tests).
    pub fn new(
        store: Arc<CheckpointStore>,
        sysfs: &Path,
        status: Option<mpsc::UnboundedSender<StatusJob>>,
        serving: bool,
        rdma: Arc<dyn RdmaNetns>,
    ) -> Sandboxes {
        Sandboxes {
            store,
            sysfs: sysfs.to_path_buf(),
            status,
            moving: Mutex::new(()),
            serving,
            rdma,
        }
    }

    /// Whether an NRI plugin calls these hooks.
    pub fn serving(&self) -> bool {
        self.serving
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
                    claim: ClaimRef::of(&uid, &record),
                    devices: record.devices.clone(),
                    device: device.clone(),
                    netdev,
                });
            }
        }
        out
    }

    /// Moves every netdev the pod's claims want into `netns`; on a
    /// failure brings back what it moved and says which netdev failed.
    pub async fn attach_pod(&self, pod_uid: &str, netns: &Path) -> Result<(), String> {
        let _held = self.moving.lock().await;
        let wanted = self.wanted(pod_uid);
        let mut done = Vec::new();
        for want in &wanted {
            let key = move_key(&want.claim.uid, &want.device.device);
            match self.attach_one(&key, want, pod_uid, netns).await {
                Ok(()) => done.push(key),
                Err(error) => {
                    for key in &done {
                        if let Some(moved) = self.store.moves().get(key) {
                            self.bring_home(key, moved).await;
                        }
                    }
                    return Err(error);
                }
            }
        }
        self.report_in_pod(&wanted);
        Ok(())
    }

    async fn attach_one(
        &self,
        key: &str,
        want: &Wanted,
        pod_uid: &str,
        netns: &Path,
    ) -> Result<(), String> {
        let netns_text = netns.display().to_string();
        match self.store.moves().get(key) {
            // A retried hook: it is there already.
            Some(m) if m.phase == MovePhase::InPod && m.netns == netns_text => return Ok(()),
            // Left half-way, or in another sandbox of the pod: home first.
            Some(m) if !self.bring_home(key, m).await => {
                return Err(format!(
                    "netdev {} of claim {}: an earlier move could not be undone",
                    m.host.host_name, want.claim.name
                ));
            }
            _ => {}
        }
        let plan = &want.netdev.plan;
        let pci = (want.device.identity.as_ref()).map(|i| i.pci_address.as_str());
        let host_name = pci
            .and_then(|pci| netdev::host_netdev(&self.sysfs, pci))
            .unwrap_or_else(|| want.netdev.host_name.clone());
        let fail = |e: netdev::NetdevError| {
            format!(
                "claim {}/{} device {}: {e}",
                want.claim.namespace, want.claim.name, want.device.device
            )
        };
        let host = netdev::survey(&host_name, plan, &self.sysfs)
            .await
            .map_err(fail)?;
        let rdma_device = self.rdma_to_move(want, pci).await.map_err(|e| {
            format!(
                "claim {}/{} device {}: {e}",
                want.claim.namespace, want.claim.name, want.device.device
            )
        })?;
        let mut record = NetdevMove {
            pod_uid: pod_uid.to_string(),
            netns: netns_text,
            phase: MovePhase::Moving,
            host,
            rdma_device,
        };
        self.record(key, Some(record.clone())).await?;
        crate::node::faults::hit(crate::node::faults::Point::AttachAfterRecord);
        if let Err(error) = netdev::attach(&record.host, netns, plan, &self.sysfs).await {
            // attach undid its own move; forget it only once sure.
            self.bring_home(key, &record).await;
            return Err(fail(error));
        }
        if let Some(rdma) = &record.rdma_device {
            let to = netns.to_path_buf();
            if let Err(error) = self.move_rdma(rdma, None, Some(to)).await {
                // The RDMA device did not move: only the netdev comes home.
                let netdev_only = NetdevMove {
                    rdma_device: None,
                    ..record.clone()
                };
                self.bring_home(key, &netdev_only).await;
                return Err(format!(
                    "claim {}/{} device {}: {error}",
                    want.claim.namespace, want.claim.name, want.device.device
                ));
            }
        }
        crate::node::faults::hit(crate::node::faults::Point::AttachAfterMove);
        record.phase = MovePhase::InPod;
        self.record(key, Some(record)).await
    }

    async fn record(&self, key: &str, entry: Option<NetdevMove>) -> Result<(), String> {
        (self.store.record_move(key, entry).await)
            .map_err(|e| format!("cannot record the netdev move {key}: {e}"))
    }

    /// Moves the netdev of `moved` home and forgets the move; whether it
    /// is home (failures are logged and the move kept, to retry).
    async fn bring_home(&self, key: &str, moved: &NetdevMove) -> bool {
        let netns = Path::new(&moved.netns);
        if let Some(rdma) = &moved.rdma_device {
            let from = Some(netns.to_path_buf());
            match self.move_rdma(rdma, from, None).await {
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
        crate::node::faults::hit(crate::node::faults::Point::DetachBeforeForget);
        if let Err(error) = self.store.record_move(key, None).await {
            tracing::warn!(key, %error, "netdev home, but the checkpoint still records the move");
            return false;
        }
        true
    }

    /// The RDMA device to move with the netdev: the NIC's (today's name,
    /// by PCI address) when the host's RDMA netns mode is exclusive.
    async fn rdma_to_move(
        &self,
        want: &Wanted,
        pci: Option<&str>,
    ) -> Result<Option<String>, RdmaError> {
        let recorded = want
            .device
            .identity
            .as_ref()
            .and_then(|i| i.rdma_device.clone());
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
            Err(error) => Err(error),
        }
    }

    async fn move_rdma(
        &self,
        name: &str,
        from: Option<PathBuf>,
        to: Option<PathBuf>,
    ) -> Result<(), RdmaError> {
        let (rdma, name) = (self.rdma.clone(), name.to_string());
        tokio::task::spawn_blocking(move || rdma.move_device(&name, from.as_deref(), to.as_deref()))
            .await
            .unwrap_or_else(|e| Err(RdmaError::Malformed(e.to_string())))
    }

    /// Brings home every netdev moved into pod `pod_uid`.
    pub async fn detach_pod(&self, pod_uid: &str) {
        let _held = self.moving.lock().await;
        for (key, moved) in self.store.moves() {
            if moved.pod_uid == pod_uid {
                self.bring_home(&key, &moved).await;
            }
        }
    }

    /// Brings home every netdev of claim `claim_uid` (before unprepare).
    pub async fn detach_claim(&self, claim_uid: &str) -> Result<(), String> {
        let _held = self.moving.lock().await;
        let prefix = format!("{claim_uid}/");
        for (key, moved) in self.store.moves() {
            if key.starts_with(&prefix) && !self.bring_home(&key, &moved).await {
                return Err(format!(
                    "netdev {} is still in pod {} and could not be brought home",
                    moved.host.host_name, moved.pod_uid
                ));
            }
        }
        Ok(())
    }

    /// Converges on the runtime's running pods: moves whose pod is gone or
    /// that stopped half-way are undone, running pods get their netdevs.
    pub async fn synchronize(&self, pods: &[PodSandbox]) {
        let running: BTreeMap<&str, Option<&str>> = pods
            .iter()
            .map(|p| (p.uid.as_str(), nri::network_namespace(p)))
            .collect();
        {
            let _held = self.moving.lock().await;
            for (key, moved) in self.store.moves() {
                let alive = running.contains_key(moved.pod_uid.as_str());
                if !alive || moved.phase == MovePhase::Moving {
                    self.bring_home(&key, &moved).await;
                }
            }
        }
        for (uid, netns) in running {
            let Some(netns) = netns else { continue };
            if self.wanted(uid).is_empty() {
                continue;
            }
            if let Err(error) = self.attach_pod(uid, Path::new(netns)).await {
                tracing::error!(pod_uid = uid, %error, "cannot move a running pod's netdev in");
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

/// Keeps the NRI plugin connected to the runtime: registers, serves the
/// hooks until the runtime closes the connection (a runtime restart), and
/// connects again, waiting 1 s after a failure and doubling up to 30 s.
pub async fn follow_runtime(config: crate::node::NriConfig, sandboxes: Arc<Sandboxes>) {
    let identity = match nri::Identity::new("ainic-dra", &config.index) {
        Ok(identity) => identity,
        Err(error) => {
            tracing::error!(%error, "no NRI plugin: exclusive netdev mode cannot work");
            return;
        }
    };
    let mut wait = std::time::Duration::from_secs(1);
    loop {
        match nri::run(&config.socket, &identity, sandboxes.clone()).await {
            Ok(()) => {
                tracing::warn!(socket = %config.socket.display(), "the container runtime closed the NRI connection; reconnecting");
                wait = std::time::Duration::from_secs(1);
            }
            Err(error) => {
                tracing::warn!(%error, retry_in_s = wait.as_secs(), "NRI plugin not connected");
                wait = (wait * 2).min(std::time::Duration::from_secs(30));
            }
        }
        tokio::time::sleep(wait).await;
    }
}

impl nri::PodHooks for Sandboxes {
    async fn synchronize(&self, pods: Vec<PodSandbox>) {
        Sandboxes::synchronize(self, &pods).await;
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> Result<(), String> {
        if self.wanted(&pod.uid).is_empty() {
            return Ok(());
        }
        let Some(netns) = nri::network_namespace(&pod) else {
            return Err(format!(
                "pod {}/{} has a claim in exclusive netdev mode but no network namespace of its own (hostNetwork pods cannot take a netdev)",
                pod.namespace, pod.name
            ));
        };
        let started = std::time::Instant::now();
        let result = self.attach_pod(&pod.uid, Path::new(netns)).await;
        tracing::info!(pod = %pod.name, pod_uid = %pod.uid, elapsed_us = started.elapsed().as_micros(), ok = result.is_ok(), "pod sandbox start: netdevs moved in");
        result
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) {
        let started = std::time::Instant::now();
        self.detach_pod(&pod.uid).await;
        tracing::debug!(pod = %pod.name, elapsed_us = started.elapsed().as_micros(), "pod sandbox stop: netdevs home");
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) {
        self.detach_pod(&pod.uid).await;
    }
}
