//! Bringing a pod's netdevs home when its sandbox stops or its claim is
//! unprepared, the record forgotten last.

use super::*;

impl Sandboxes {
    /// Moves the netdev (and RDMA device) of `moved` home and forgets the
    /// move; whether it is home (failures are logged and the move kept
    /// as moving, to retry). The caller holds the move's key. A move home
    /// the checkpoint cannot record (a full disk) happens all the same:
    /// a NIC must not stay in a pod that is going, and the record that it
    /// is away makes a restart bring it home again; forgetting the move
    /// is retried ([`Sandboxes::retry_forget`]).
    pub(super) async fn bring_home(&self, key: &str, mut moved: NetdevMove) -> bool {
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
    pub(super) fn retry_forget(&self, key: &str, moved: NetdevMove) {
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
}
