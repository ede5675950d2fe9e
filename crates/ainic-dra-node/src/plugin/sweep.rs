//! The orphan sweep: checkpoint entries whose claims are gone.
//!
//! The kubelet unprepares every claim it prepared, but not one deleted
//! while the kubelet or the agent was down, or whose pod it forgot. Such
//! an entry keeps a CDI spec on disk and, since an exclusive device is
//! never prepared for two claims, keeps its device from the next claim.
//! Every interval the sweep asks the API server about each prepared claim
//! and unprepares those that no longer exist, were recreated under another
//! UID, or are no longer allocated devices of this node. A claim the API
//! server cannot be asked about is kept for the next sweep: only an answer
//! reclaims. A stopping agent waits for the sweep's unprepare under way;
//! the sweep then starts no other and asks the API server nothing more
//! ([`Driver::drain`]).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceClaim;

use super::Driver;
use super::claims::ClaimFetchError;
use super::resolve::Scope;

/// Why a prepared claim is an orphan; `None` when it is still in use here.
pub fn orphan_reason(
    answer: &Result<ResourceClaim, ClaimFetchError>,
    uid: &str,
    scope: &Scope,
) -> Option<String> {
    let claim = match answer {
        Err(ClaimFetchError::NotFound { .. }) => return Some("the claim no longer exists".into()),
        Err(ClaimFetchError::Api { .. }) => return None,
        Ok(claim) => claim,
    };
    let found = claim.metadata.uid.as_deref().unwrap_or_default();
    if found != uid {
        return Some(format!("the claim was recreated (its UID is now {found})"));
    }
    let results = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref());
    let Some(results) = results else {
        return Some("the claim is no longer allocated".into());
    };
    let here = results.iter().any(|r| scope.serves(r));
    (!here).then(|| "the claim is now allocated devices of another node or driver".into())
}

impl Driver {
    /// Unprepares every orphaned checkpoint entry; returns how many.
    pub async fn sweep_orphans(&self) -> usize {
        let mut reclaimed = 0;
        for (uid, record) in self.parts.store.snapshot().claims {
            if self.under_way.is_closed() {
                tracing::info!("sweep: stopped, the agent is shutting down");
                break;
            }
            let answer = self.parts.claims.get(&record.namespace, &record.name).await;
            if let Err(error @ ClaimFetchError::Api { .. }) = &answer {
                tracing::warn!(claim_uid = %uid, %error, "sweep: claim kept, the API server did not answer");
                continue;
            }
            let Some(reason) = orphan_reason(&answer, &uid, &self.parts.scope) else {
                continue;
            };
            // Checked again under the lock: the drain may have begun during
            // the GET, and it waits on this lock for an unprepare under way.
            let _sweeping = self.sweeping.lock().await;
            if self.under_way.is_closed() {
                tracing::info!(claim_uid = %uid, "sweep: stopped, the agent is shutting down");
                break;
            }
            match self.unprepare_one(&record.claim_ref(&uid)).await {
                Ok(()) => {
                    reclaimed += 1;
                    tracing::info!(claim_uid = %uid, claim = %record.name, namespace = %record.namespace, %reason, "sweep: orphaned claim unprepared");
                }
                Err(error) => {
                    tracing::warn!(claim_uid = %uid, %reason, error = %format!("{error:#}"), "sweep: cannot unprepare orphaned claim")
                }
            }
        }
        self.parts.metrics.reclaimed(reclaimed);
        reclaimed
    }
}

/// Sweeps every `every` until the process ends.
pub async fn run(driver: Arc<Driver>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.tick().await; // the first tick is immediate: start-up reconcile just ran
    loop {
        ticks.tick().await;
        driver.sweep_orphans().await;
    }
}

/// Sweeps once now (after a reboot: claims deleted while the node was
/// down); a claim the API server does not answer about waits for the next
/// sweep.
pub async fn once(driver: Arc<Driver>) {
    let reclaimed = driver.sweep_orphans().await;
    tracing::info!(reclaimed, "sweep after a reboot done");
}
