//! The runtime's view of every pod at (re)connection: moves converged to
//! it in the background, the hooks that follow held until done.

use super::attach::pod_view;
use super::*;

impl Sandboxes {
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

    pub(super) async fn synchronize_gated(&self, pods: &[PodSandbox]) {
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
    pub(super) fn report_in_pod(&self, wanted: &[Wanted]) {
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
