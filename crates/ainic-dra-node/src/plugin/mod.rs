//! The kubelet DRA plugin: one [`Driver`] that prepares and unprepares
//! claims, served over gRPC as `DRAPlugin` v1 and v1beta1 (thin adapters in
//! [`grpc`]) next to the registration service ([`registration`]).
//!
//! Prepare of one claim, checkpoint-first and idempotent:
//! 1. if the checkpoint has the claim, answer what it recorded (a shared
//!    claim used by several pods is prepared once), after [`respec`]
//!    checked it against today's devices;
//! 2. GET the claim, [`resolve::plan`] its devices, build its CDI spec;
//! 3. write the spec into the CDI dir, then record the claim (with the
//!    devices' identity and the spec's content) in the checkpoint,
//!    durably; answer.
//!
//! A crash between 3's two writes leaves a spec no checkpoint entry owns;
//! start-up reconciliation removes it and the kubelet's retry redoes 2–3.
//! Unprepare works from the checkpoint alone: remove the spec, then the entry.
//!
//! Each claim's work runs in a task of its own: when the kubelet's
//! deadline drops the gRPC call, the work already begun still finishes
//! (memory and disk agree), and the kubelet's retry, waiting on the
//! claim's lock, finds it done.

pub mod claims;
pub mod grpc;
pub mod names;
mod prepare;
mod refresh;
pub mod registration;
pub mod resolve;
pub mod respec;
pub mod status;
pub mod sweep;
mod unprepare;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use tokio::sync::watch;
use topology::Inventory;
use tracing::Instrument;

use crate::cdi::{self, CdiDir};
use crate::checkpoint::store::CheckpointStore;
use crate::checkpoint::{MetadataRecord, PreparedClaim, PreparedDevice};
use crate::faults::{self, Point};
use crate::http::metrics::{Metrics, Operation};
use crate::metadata::{
    ClaimMeta, DeviceAttributes, MetaDevice, MetadataFiles, POD_CLAIM_NAME, RequestMeta, Written,
};
use claims::SharedClaims;
use resolve::Scope;

pub use dra_model::claim::ClaimRef;

/// Per-claim outcome of a prepare call: the devices, or a one-line error.
pub type PrepareOutcome = Result<Vec<PreparedDevice>, String>;

/// What [`Driver::refresh_all`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Refreshed {
    /// Claims whose spec file was rewritten (missing, or devices renumbered).
    pub rewritten: Vec<String>,
    /// Claims naming a device that is gone, with the error; their specs are removed.
    pub failed: Vec<(String, String)>,
}

/// Everything a [`Driver`] needs.
pub struct DriverParts {
    /// Driver name and pool.
    pub scope: Scope,
    /// Where claims are read.
    pub claims: SharedClaims,
    /// The node's devices, kept fresh by the health loop.
    pub inventory: watch::Receiver<Arc<Inventory>>,
    /// The checkpoint.
    pub store: Arc<CheckpointStore>,
    /// The CDI directory.
    pub cdi: CdiDir,
    /// Where the host's device nodes are.
    pub dev: cdi::DevRoots,
    /// Metrics to update.
    pub metrics: Arc<Metrics>,
    /// Where claim status jobs go ([`status::run`]); `None` writes none.
    pub status: Option<tokio::sync::mpsc::UnboundedSender<status::StatusJob>>,
    /// Device metadata for containers (`metadata`); `None` in drivers
    /// that never write any (tests).
    pub metadata: Option<MetadataParts>,
    /// Exclusive netdev mode's pod sandbox hooks: unprepare brings a
    /// claim's netdevs home through them; `None` where nothing moves.
    pub sandboxes: Option<Arc<crate::sandbox::Sandboxes>>,
}

/// What device metadata needs.
pub struct MetadataParts {
    /// Where the files and their CDI specs go. Used for removal even when
    /// `write` is off, so claims prepared while it was on are cleaned up.
    pub files: MetadataFiles,
    /// Write metadata for new claims (`--device-metadata`).
    pub write: bool,
    /// The attributes of the published devices; `None` until the
    /// publisher first built its slices.
    pub attributes: watch::Receiver<Option<Arc<DeviceAttributes>>>,
    /// The interfaces' addresses, for the metadata's network data.
    pub addresses: crate::addresses::Addresses,
}

/// How long a prepare waits for the first published attributes before it
/// writes metadata without them.
const ATTRIBUTES_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Adds each request's metadata CDI ID to its first device.
fn add_metadata_ids(devices: &mut [PreparedDevice], ids: &BTreeMap<String, String>) {
    for (request, id) in ids {
        let first = devices
            .iter_mut()
            .find(|d| (d.requests.iter()).any(|r| r.split('/').next() == Some(request.as_str())));
        if let Some(device) = first {
            device.cdi_ids.push(id.clone());
        }
    }
}

/// Prepares and unprepares claims; one per node agent, shared by every
/// gRPC adapter.
pub struct Driver {
    parts: DriverParts,
    /// One lock per claim UID, so two calls for the same claim never interleave.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Every prepare and unprepare under way, so a stopping agent finishes
    /// them before it lets go of its state ([`Driver::drain`]).
    under_way: tokio_util::task::TaskTracker,
    /// Held by the orphan sweep while it unprepares a claim, and by a
    /// drain before it returns: the sweep's unprepare under way ends
    /// first, and none starts once the agent drains ([`Driver::drain`]).
    sweeping: tokio::sync::Mutex<()>,
}

impl Driver {
    /// Assembles a driver.
    pub fn new(parts: DriverParts) -> Self {
        Self {
            parts,
            locks: Mutex::default(),
            under_way: tokio_util::task::TaskTracker::new(),
            sweeping: tokio::sync::Mutex::new(()),
        }
    }

    fn report(&self, job: status::StatusJob) {
        if let Some(status) = &self.parts.status {
            // The writer is gone only at shutdown; nothing to tell then.
            let _ = status.send(job);
        }
    }

    /// Asks for the status of every recorded claim to be written again
    /// (at start-up: a write lost to a crash is made good).
    pub fn report_all(&self, except: &[String]) {
        for (uid, record) in self.parts.store.snapshot().claims {
            if except.contains(&uid) {
                continue;
            }
            self.report(status::StatusJob::Prepared {
                claim: record.claim_ref(&uid),
                devices: record.devices,
            });
        }
    }

    /// How many claims are prepared.
    pub fn prepared_claims(&self) -> usize {
        self.parts.store.claim_count()
    }

    fn claim_lock(&self, uid: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        // Drop locks nobody holds, so the map does not grow with every claim ever seen.
        locks.retain(|_, l| Arc::strong_count(l) > 1);
        locks.entry(uid.to_string()).or_default().clone()
    }

    /// Prepares every claim concurrently, each in a task of its own that
    /// finishes even if this future is dropped; one outcome per claim UID.
    pub async fn prepare(
        self: &Arc<Self>,
        claims: &[ClaimRef],
    ) -> BTreeMap<String, PrepareOutcome> {
        self.each_in_task(claims, "prepare", |driver, claim| async move {
            driver.prepare_timed(&claim).await
        })
        .await
    }

    /// Unprepares every claim concurrently, each in a task of its own that
    /// finishes even if this future is dropped; one outcome per claim UID.
    pub async fn unprepare(
        self: &Arc<Self>,
        claims: &[ClaimRef],
    ) -> BTreeMap<String, Result<(), String>> {
        self.each_in_task(claims, "unprepare", |driver, claim| async move {
            driver.unprepare_timed(&claim).await
        })
        .await
    }

    async fn each_in_task<T, Work, Done>(
        self: &Arc<Self>,
        claims: &[ClaimRef],
        what: &str,
        work: Work,
    ) -> BTreeMap<String, Result<T, String>>
    where
        T: Send + 'static,
        Work: Fn(Arc<Self>, ClaimRef) -> Done,
        Done: Future<Output = Result<T, String>> + Send + 'static,
    {
        let tasks = claims
            .iter()
            .map(|c| self.under_way.spawn(work(self.clone(), c.clone())));
        let outcomes = join_all(tasks).await.into_iter().map(|joined| {
            joined.unwrap_or_else(|e| Err(format!("{what} of the claim failed: {e}")))
        });
        let outcomes = claims.iter().map(|c| c.uid.clone()).zip(outcomes).collect();
        ainic_dra_daemon::memory::after_burst();
        outcomes
    }

    /// Waits up to `deadline` for the prepares and unprepares under way to
    /// finish (the agent is stopping: the kubelet sends nothing new here
    /// since its sockets are gone), the orphan sweep's among them, and
    /// stops the sweep; whether they all did. Each of them has recorded
    /// what it did in the checkpoint by the time it finishes. When this
    /// returns true, neither a kubelet call nor the sweep changes a claim
    /// after it (an uninstall removes the node's state; a newer agent
    /// takes it over); when false, what is left runs until the agent's
    /// tasks are stopped, and a restart converges from the checkpoint.
    pub async fn drain(&self, deadline: Duration) -> bool {
        self.under_way.close();
        let left = self.under_way.len();
        let all = async {
            let _no_sweep = self.sweeping.lock().await;
            self.under_way.wait().await;
        };
        let done = tokio::time::timeout(deadline, all).await.is_ok();
        if !done {
            tracing::warn!(
                left,
                ?deadline,
                "prepares, unprepares or the orphan sweep's unprepare still under way at the drain's deadline"
            );
        } else if left > 0 {
            tracing::info!(
                left,
                "prepares and unprepares under way at shutdown finished"
            );
        }
        done
    }

    /// Prepares `claim`, timed and logged ([`Driver::timed`]).
    async fn prepare_timed(&self, claim: &ClaimRef) -> PrepareOutcome {
        let work = self.prepare_one(claim);
        self.timed(Operation::Prepare, claim, work, |devices| {
            tracing::info!(devices = devices.len(), "claim prepared")
        })
        .await
    }

    /// Unprepares `claim`, timed and logged ([`Driver::timed`]).
    async fn unprepare_timed(&self, claim: &ClaimRef) -> Result<(), String> {
        let work = self.unprepare_one(claim);
        self.timed(Operation::Unprepare, claim, work, |()| {
            tracing::info!("claim unprepared")
        })
        .await
    }

    /// Runs `work`, the `op` of `claim`, in a span naming the claim; counts
    /// it with its latency; logs its error or, by `succeeded`, its result.
    async fn timed<T>(
        &self,
        op: Operation,
        claim: &ClaimRef,
        work: impl Future<Output = anyhow::Result<T>>,
        succeeded: impl FnOnce(&T),
    ) -> Result<T, String> {
        let start = Instant::now();
        let span = match op {
            Operation::Prepare => {
                tracing::info_span!("prepare", claim_uid = %claim.uid, claim = %claim.name, namespace = %claim.namespace)
            }
            Operation::Unprepare => {
                tracing::info_span!("unprepare", claim_uid = %claim.uid, claim = %claim.name, namespace = %claim.namespace)
            }
        };
        let outcome = work
            .instrument(span.clone())
            .await
            .map_err(|e| format!("{e:#}"));
        let _enter = span.enter();
        self.parts
            .metrics
            .observe(op, start.elapsed(), outcome.is_ok());
        match &outcome {
            Ok(done) => succeeded(done),
            Err(error) => tracing::warn!(%error, "claim not {}d", op.as_str()),
        }
        outcome
    }
}

/// What planning a claim gave: its CDI spec, the kubelet's answer, the
/// inventory it was planned on and, when metadata is on, the metadata.
type Planned = (
    cdi::ClaimSpec,
    Vec<PreparedDevice>,
    Arc<Inventory>,
    Option<(ClaimMeta, Vec<RequestMeta>)>,
);

/// The claim as its metadata names it.
fn claim_meta(
    claim: &ClaimRef,
    object: &k8s_openapi::api::resource::v1::ResourceClaim,
) -> ClaimMeta {
    let annotations = object.metadata.annotations.as_ref();
    ClaimMeta {
        namespace: claim.namespace.clone(),
        name: claim.name.clone(),
        uid: claim.uid.clone(),
        pod_claim_name: annotations.and_then(|a| a.get(POD_CLAIM_NAME)).cloned(),
    }
}

/// Checks every prepared claim again after each inventory change, until
/// the inventory's sender is gone.
pub async fn follow_inventory(driver: Arc<Driver>) {
    let mut inventory = driver.parts.inventory.clone();
    while inventory.changed().await.is_ok() {
        let done = driver.refresh_all().await;
        if !done.rewritten.is_empty() {
            tracing::info!(claims = ?done.rewritten, "CDI specs rewritten after an inventory change");
        }
    }
}

#[cfg(test)]
mod tests;
