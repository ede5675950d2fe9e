//! Moving a pod's netdevs (and their RDMA devices) into its network
//! namespace when its sandbox starts, each move recorded first.

use super::*;

impl Sandboxes {
    /// Moves every netdev the pod's claims want into `sandbox`; on a
    /// failure brings back what it moved and says which netdev failed.
    pub async fn attach_sandbox(&self, sandbox: &Sandbox) -> Result<(), SandboxError> {
        let _gate = self.gate.read().await;
        self.attach_gated(sandbox).await
    }

    /// [`Sandboxes::attach_sandbox`] under the gate.
    pub(super) async fn attach_gated(&self, sandbox: &Sandbox) -> Result<(), SandboxError> {
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

    pub(super) async fn attach_one(
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
    pub(super) async fn set_phase(
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
    pub(super) fn set_gate(&self, key: &str, open: bool) {
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

    /// The RDMA device to move with the netdev: the NIC's (today's name,
    /// by PCI address) when the host's RDMA netns mode is exclusive.
    pub(super) async fn rdma_to_move(
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

    pub(super) async fn move_rdma(
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
}

/// The RDMA device of PCI function `pci` in sysfs
/// (`bus/pci/devices/<pci>/infiniband/<name>`).
pub(super) fn rdma_device_of(sysfs: &Path, pci: &str) -> Option<String> {
    let dir = sysfs.join("bus/pci/devices").join(pci).join("infiniband");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    names.sort();
    names.into_iter().next()
}

/// A moved netdev's network data inside the pod.
pub(super) fn pod_view(netdev: &NetdevDevice, moved: &NetdevMove) -> NetworkData {
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
