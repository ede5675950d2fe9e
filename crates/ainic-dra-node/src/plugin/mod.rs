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
pub mod registration;
pub mod resolve;
pub mod respec;
pub mod status;
pub mod sweep;

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
}

impl Driver {
    /// Assembles a driver.
    pub fn new(parts: DriverParts) -> Self {
        Self {
            parts,
            locks: Mutex::default(),
            under_way: tokio_util::task::TaskTracker::new(),
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
    /// since its sockets are gone); whether they all did. Each of them has
    /// recorded what it did in the checkpoint by the time it finishes.
    pub async fn drain(&self, deadline: Duration) -> bool {
        self.under_way.close();
        let left = self.under_way.len();
        let done = tokio::time::timeout(deadline, self.under_way.wait())
            .await
            .is_ok();
        if left > 0 {
            tracing::info!(left, done, "prepares and unprepares under way at shutdown");
        }
        done
    }

    async fn prepare_timed(&self, claim: &ClaimRef) -> PrepareOutcome {
        let start = Instant::now();
        let span = tracing::info_span!("prepare", claim_uid = %claim.uid, claim = %claim.name, namespace = %claim.namespace);
        let outcome = self
            .prepare_one(claim)
            .instrument(span.clone())
            .await
            .map_err(|e| format!("{e:#}"));
        let _enter = span.enter();
        self.parts
            .metrics
            .observe(Operation::Prepare, start.elapsed(), outcome.is_ok());
        match &outcome {
            Ok(devices) => tracing::info!(devices = devices.len(), "claim prepared"),
            Err(error) => tracing::warn!(%error, "claim not prepared"),
        }
        outcome
    }

    async fn prepare_one(&self, claim: &ClaimRef) -> anyhow::Result<Vec<PreparedDevice>> {
        let lock = self.claim_lock(&claim.uid);
        let _held = lock.lock().await;
        if let Some(done) = self.parts.store.get(&claim.uid) {
            self.refresh_recorded(&claim.uid, &done, true).await?;
            // Idempotent: heals a status write lost to a crash or an API error.
            self.report(status::StatusJob::Prepared {
                claim: claim.clone(),
                devices: done.devices.clone(),
            });
            return Ok(done.devices);
        }
        let started = Instant::now();
        let Some((spec, mut devices, seen, meta)) = self.plan_claim(claim).await? else {
            tracing::debug!("nothing to attach on this node (a fabric partition claim)");
            return Ok(Vec::new());
        };
        let planned = started.elapsed();
        let files = self.parts.metadata.as_ref().map(|m| &m.files);
        let mut written = Written::default();
        if let (Some(files), Some((claim_meta, requests))) = (files, &meta) {
            written = files.write(claim_meta, requests)?;
            add_metadata_ids(&mut devices, &written.ids);
        }
        let spec_files: Vec<String> = written.specs.keys().cloned().collect();
        let recorded = MetadataRecord {
            requests: written.requests.into_iter().collect(),
            pod_claim_name: meta.and_then(|(claim, _)| claim.pod_claim_name),
        };
        let committed = self.commit(claim, spec, &devices, written.specs, recorded);
        if let Err(error) = committed.await {
            let removed = files.map(|f| f.remove(&claim.uid, &spec_files));
            if let Some(Err(cleanup)) = removed {
                tracing::error!(error = %cleanup, "failed to remove device metadata after a failed prepare");
            }
            return Err(error);
        }
        // The inventory changed while this claim was planned: the refresh
        // that followed did not see it yet, so check it now.
        if !Arc::ptr_eq(&seen, &self.parts.inventory.borrow()) {
            let record = self.parts.store.get(&claim.uid).expect("just recorded");
            self.refresh_recorded(&claim.uid, &record, true).await?;
        }
        self.report(status::StatusJob::Prepared {
            claim: claim.clone(),
            devices: devices.clone(),
        });
        tracing::debug!(
            plan_us = planned.as_micros(),
            commit_us = (started.elapsed() - planned).as_micros(),
            "prepare phases"
        );
        Ok(devices)
    }

    /// Writes the device-metadata specs and files of recorded claim `uid`
    /// again where they are missing or damaged (a reboot empties the CDI
    /// directory; the files are not fsynced). Specs come from the record.
    /// Files of entries of older agents too; this agent's are rebuilt from
    /// the claim's devices and today's attributes and network data, the
    /// damaged ones only. Before the node's devices are published, only a
    /// call of the kubelet waits for them (as a prepare does): start-up and
    /// inventory checks leave a damaged file to the kubelet's next prepare
    /// of the claim, which comes before its containers start.
    async fn restore_metadata(
        &self,
        uid: &str,
        record: &PreparedClaim,
        kubelet_waits: bool,
    ) -> anyhow::Result<()> {
        let Some(parts) = &self.parts.metadata else {
            return Ok(());
        };
        for (file, spec) in &record.metadata_specs {
            if parts.files.restore(file, spec)? {
                tracing::info!(claim_uid = %uid, file, "device-metadata CDI spec written again");
            }
        }
        for (request, content) in &record.metadata_files {
            if parts.files.restore_file(uid, request, content)? {
                tracing::info!(claim_uid = %uid, request, "device-metadata file written again");
            }
        }
        let claim = ClaimMeta {
            namespace: record.namespace.clone(),
            name: record.name.clone(),
            uid: uid.to_string(),
            pod_claim_name: record.metadata.pod_claim_name.clone(),
        };
        let damaged = parts.files.damaged(&claim, &record.metadata.requests)?;
        if damaged.is_empty() {
            return Ok(());
        }
        if !kubelet_waits && parts.attributes.borrow().is_none() {
            tracing::warn!(claim_uid = %uid, requests = ?damaged, "device-metadata files missing or cut short: written again at the kubelet's next prepare of the claim, once the devices are published");
            return Ok(());
        }
        let inventory = self.parts.inventory.borrow().clone();
        let mut requests = self
            .request_metadata(parts, &record.devices, &inventory)
            .await;
        requests.retain(|r| damaged.iter().any(|d| d == r.base()));
        parts.files.rewrite(&claim, &requests)?;
        tracing::info!(claim_uid = %uid, requests = ?damaged, "device-metadata files written again");
        Ok(())
    }

    /// Reads the claim and builds its CDI spec, the kubelet's answer and
    /// (when on) the claim's device metadata; writes nothing. `None` when
    /// the claim has nothing to attach here.
    async fn plan_claim(&self, claim: &ClaimRef) -> anyhow::Result<Option<Planned>> {
        let object = self.parts.claims.get(&claim.namespace, &claim.name).await?;
        names::check(claim, &object, &self.parts.scope)?;
        let inventory = self.parts.inventory.borrow().clone();
        let planned = resolve::plan(&object, &claim.uid, &self.parts.scope, &inventory)?;
        if planned.is_empty() {
            return Ok(None);
        }
        let not_ready = match &self.parts.sandboxes {
            Some(sandboxes) => sandboxes.not_ready(),
            None => Some("it is off on this node"),
        };
        if let Some(p) = planned.iter().find(|p| p.netdev.is_some())
            && let Some(why) = not_ready
        {
            anyhow::bail!(
                "claim {}/{}: request {} is in exclusive netdev mode, which needs the node agent's NRI plugin (--nri-socket, chart netdevMode.enabled): {why}",
                claim.namespace,
                claim.name,
                p.request
            );
        }
        let gates = self.parts.cdi.path();
        let attached: Vec<cdi::AttachedDevice> = planned
            .iter()
            .map(|p| cdi::AttachedDevice {
                netdev_gate: (p.netdev.as_ref())
                    .map(|_| cdi::netdev_gate(gates, &claim.uid, &p.attached.device)),
                ..p.attached.clone()
            })
            .collect();
        let spec = cdi::build(
            &claim.uid,
            &attached,
            inventory.rdma_cm.as_ref(),
            &self.parts.dev,
        )?;
        let devices = planned
            .iter()
            .zip(&spec.device_ids)
            .map(|(p, id)| PreparedDevice {
                requests: vec![p.request.clone()],
                pool: self.parts.scope.pool.clone(),
                device: p.attached.device.clone(),
                share_id: p.attached.share.as_ref().map(|s| s.id.clone()),
                admin_access: p.admin_access,
                cdi_ids: vec![id.clone()],
                identity: Some(respec::identity_of(&p.attached)),
                netdev: p.netdev.clone(),
            })
            .collect::<Vec<_>>();
        let meta = match self.parts.metadata.as_ref().filter(|m| m.write) {
            Some(parts) => {
                let requests = self.request_metadata(parts, &devices, &inventory).await;
                Some((claim_meta(claim, &object), requests))
            }
            None => None,
        };
        Ok(Some((spec, devices, inventory, meta)))
    }

    /// The devices of each request, with their published attributes and
    /// network data.
    async fn request_metadata(
        &self,
        parts: &MetadataParts,
        devices: &[PreparedDevice],
        inventory: &Inventory,
    ) -> Vec<RequestMeta> {
        let mut attributes = parts.attributes.clone();
        let waited = tokio::time::timeout(ATTRIBUTES_WAIT, attributes.wait_for(Option::is_some));
        let published = match waited.await {
            Ok(Ok(published)) => published.clone().unwrap_or_default(),
            _ => {
                tracing::warn!("no published attributes yet: device metadata written without them");
                Arc::default()
            }
        };
        let mut requests: Vec<RequestMeta> = Vec::new();
        for device in devices {
            let mut net = status::netdev_of(device, inventory);
            if let Some(ifname) = &net.interface_name {
                net.ips = status::addresses(ifname).await;
            }
            let entry = MetaDevice {
                pool: device.pool.clone(),
                name: device.device.clone(),
                attributes: published.get(&device.device),
                network: net.interface_name.is_some().then(|| net.to_api()),
            };
            let name = device.requests.first().cloned().unwrap_or_default();
            match requests.iter_mut().find(|r| r.request == name) {
                Some(request) => request.devices.push(entry),
                None => requests.push(RequestMeta {
                    request: name,
                    devices: vec![entry],
                }),
            }
        }
        requests
    }

    /// Writes the CDI spec, then records the claim in the checkpoint
    /// unless another claim holds one of its devices exclusively; when it
    /// is not recorded the spec is removed again.
    async fn commit(
        &self,
        claim: &ClaimRef,
        spec: cdi::ClaimSpec,
        devices: &[PreparedDevice],
        metadata_specs: BTreeMap<String, String>,
        metadata: MetadataRecord,
    ) -> anyhow::Result<()> {
        faults::hit(Point::PrepareBeforeCdi);
        self.parts.cdi.write(&spec)?;
        faults::hit(Point::PrepareAfterCdi);
        let record = PreparedClaim {
            namespace: claim.namespace.clone(),
            name: claim.name.clone(),
            devices: devices.to_vec(),
            cdi_file: spec.file_name.clone(),
            // Rebuilt from the devices' identities when needed.
            cdi_spec: String::new(),
            metadata_specs,
            metadata_files: BTreeMap::new(),
            metadata,
        };
        if let Err(e) = self.parts.store.insert_exclusive(&claim.uid, record).await {
            if let Err(cleanup) = self.parts.cdi.remove(&spec.file_name) {
                tracing::error!(error = %cleanup, "failed to remove CDI spec after checkpoint failure");
            }
            return Err(e.into());
        }
        faults::hit(Point::PrepareAfterCheckpoint);
        Ok(())
    }

    /// Makes the spec of recorded claim `uid` name today's devices:
    /// rewritten (and recorded) when the kernel renumbered or renamed them
    /// or the file went missing, removed when a device is gone, so no
    /// container is created with a device number from the past. Whether
    /// the file was rewritten.
    async fn refresh_recorded(
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

    async fn unprepare_timed(&self, claim: &ClaimRef) -> Result<(), String> {
        let start = Instant::now();
        let span = tracing::info_span!("unprepare", claim_uid = %claim.uid, claim = %claim.name, namespace = %claim.namespace);
        let outcome = self
            .unprepare_one(claim)
            .instrument(span.clone())
            .await
            .map_err(|e| format!("{e:#}"));
        let _enter = span.enter();
        self.parts
            .metrics
            .observe(Operation::Unprepare, start.elapsed(), outcome.is_ok());
        match &outcome {
            Ok(()) => tracing::info!("claim unprepared"),
            Err(error) => tracing::warn!(%error, "claim not unprepared"),
        }
        outcome
    }

    async fn unprepare_one(&self, claim: &ClaimRef) -> anyhow::Result<()> {
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
            parts
                .files
                .remove(&claim.uid, record.metadata_specs.keys())?;
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
