//! Prepared claims checked against today's devices: a recorded claim's
//! specs rewritten when device numbers moved, reported when a device is
//! gone.

use super::*;

impl Driver {
    /// Makes the spec of recorded claim `uid` name today's devices:
    /// rewritten (and recorded) when the kernel renumbered or renamed them
    /// or the file went missing, removed when a device is gone, so no
    /// container is created with a device number from the past. Whether
    /// the file was rewritten.
    pub(super) async fn refresh_recorded(
        &self,
        uid: &str,
        record: &PreparedClaim,
        kubelet_waits: bool,
    ) -> anyhow::Result<bool> {
        // A netdev (and maybe its RDMA device) in a pod is gone from the
        // host's view: the spec stays as prepared while the pod has them.
        if (self.parts.sandboxes.as_ref()).is_some_and(|s| s.has_moves(uid)) {
            return Ok(false);
        }
        let inventory = self.parts.inventory.borrow().clone();
        let content = match respec::rebuild(
            uid,
            record,
            &inventory,
            &self.parts.dev,
            self.parts.cdi.path(),
        ) {
            Ok(content) => content,
            Err(stale) => {
                self.parts.metrics.stale();
                let stale = anyhow::Error::from(stale);
                if let Err(e) = self.parts.cdi.remove(&record.cdi_file) {
                    return Err(
                        stale.context(format!("and its stale spec could not be removed: {e}"))
                    );
                }
                return Err(stale);
            }
        };
        let on_disk = self.parts.cdi.read(&record.cdi_file)?;
        let rewrite = on_disk.as_deref() != Some(content.as_bytes());
        if rewrite {
            self.parts
                .cdi
                .write_file(&record.cdi_file, content.as_bytes())?;
        }
        // A spec on disk (or, for an entry of an older agent, the recorded
        // one) that differs from today's: the kernel renumbered or renamed.
        let renumbered = if record.cdi_spec.is_empty() {
            rewrite && on_disk.is_some()
        } else {
            content != record.cdi_spec
        };
        if renumbered {
            tracing::warn!(claim_uid = %uid, claim = %record.name, namespace = %record.namespace, "devices of a prepared claim were renumbered or renamed: CDI spec rebuilt from today's devices");
            self.parts.metrics.respecced();
        }
        if !record.cdi_spec.is_empty() && content != record.cdi_spec {
            // The file is right already; the record catches up on the next check.
            if let Err(error) = self.parts.store.update_spec(uid, content).await {
                tracing::warn!(claim_uid = %uid, %error, "rebuilt CDI spec not recorded in the checkpoint");
            }
        }
        // Last: a failure here must not hide the renumbering found above.
        self.restore_metadata(uid, record, kubelet_waits).await?;
        Ok(rewrite)
    }

    /// Checks every prepared claim against today's devices
    /// (`refresh_recorded`) and logs each that lost one: at
    /// start-up and after every inventory change.
    pub async fn refresh_all(&self) -> Refreshed {
        let mut done = Refreshed::default();
        for uid in self.parts.store.snapshot().claims.into_keys() {
            let lock = self.claim_lock(&uid);
            let _held = lock.lock().await;
            // Unprepared while this loop waited for the lock.
            let Some(record) = self.parts.store.get(&uid) else {
                continue;
            };
            match self.refresh_recorded(&uid, &record, false).await {
                Ok(true) => done.rewritten.push(uid),
                Ok(false) => {}
                Err(error) => {
                    let error = format!("{error:#}");
                    tracing::error!(claim_uid = %uid, %error, "prepared claim lost a device");
                    done.failed.push((uid, error));
                }
            }
        }
        done
    }
}
