//! Unprepare of one claim, from the checkpoint alone: the netdev brought
//! home, the spec removed, then the entry.

use super::*;

impl Driver {
    pub(super) async fn unprepare_one(&self, claim: &ClaimRef) -> anyhow::Result<()> {
        let lock = self.claim_lock(&claim.uid);
        let _held = lock.lock().await;
        let Some(record) = self.parts.store.get(&claim.uid) else {
            return Ok(());
        };
        // A netdev still in a pod (its sandbox stop was missed) comes home
        // before the claim is forgotten; failing that, the kubelet retries.
        // The guard keeps the hooks from moving it out again meanwhile.
        let _no_moves = match &self.parts.sandboxes {
            Some(sandboxes) => Some(sandboxes.detach_claim(&claim.uid).await?),
            None => None,
        };
        faults::hit(Point::UnprepareBeforeCdi);
        self.parts.cdi.remove(&record.cdi_file)?;
        if let Some(parts) = &self.parts.metadata {
            (parts.files).remove_recorded(&claim.uid, &record.metadata_specs)?;
        }
        faults::hit(Point::UnprepareAfterCdi);
        self.parts.store.remove(&claim.uid).await?;
        faults::hit(Point::UnprepareAfterCheckpoint);
        self.report(status::StatusJob::Unprepared {
            claim: claim.clone(),
        });
        Ok(())
    }
}
