//! The fabric controller (`ainic-dra-controller`, the image's second
//! binary; `ainic-dra controller` in a default build): RDMA fabric
//! partitions as DRA devices, so that the pods of one job land in one
//! partition without naming it. Its flags are [`cli`].
//!
//! From the `fabric` attribute of the PFs the node agents publish (it
//! never reads sysfs: the agents stay the only source of hardware facts)
//! the controller works out each partition's nodes, keeps the node label
//! `ainic.amd.com/fabric-partition` on them, and publishes one device per
//! partition in a pool of its own whose slice selects exactly those nodes
//! (`dra_model::partitions`). Pods sharing one claim of class
//! `ainic-fabric` are then kept in one partition by the scheduler: the
//! claim's allocation carries the slice's node selector.
//!
//! One replica leads (`lease`); the others wait. The leader renews its
//! Lease every [`RENEW_EVERY`] (on a task of its own, so a long pass never
//! delays it) and stops writing when it could not for [`RENEW_DEADLINE`]:
//! a pass then stops where it is. It runs a pass (`reconcile`) when a watch sees the
//! driver's slices change or a Node come, go or change its partition label
//! or a ResourceClaim change (at most once per [`PASS_GAP`]), and every
//! resync. The slices come from an index the slice watch keeps
//! (`slice_index`; listed again only when it cannot be trusted), the
//! Nodes' labels and the claims from lists. Each partition device says how full it is (`nodesAllocated`,
//! from the claims allocated from it), and an unallocated claim of the
//! partition class that no partition has room for gets a Warning Event
//! (`NoFabricPartitionFits`) naming each partition's free nodes. It also
//! answers the binding conditions of sticky shared PFs (`tenants`,
//! `dra_model::tenancy`): a shared PF no one assigned goes to the first
//! tenant taking a share, until its last share is released. A pass writes
//! only what differs, so at rest it writes nothing (the Lease renewal is the
//! only write). Stopping the controller leaves its slices,
//! labels and every claim allocated from them alone.

pub mod cli;
mod labels;
mod lease;
mod reconcile;
mod slice_index;
mod tenants;
pub mod webhook;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dra_model::partitions::NODE_LABELS;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::core::PartialObjectMeta;
use tokio::sync::mpsc;
use tokio::time::Instant;

use ainic_dra_daemon::follow::{Seen, watch};
use ainic_dra_daemon::supervise::Done;
use ainic_dra_daemon::{Stopped, Supervisor, TaskFailed, Tasks};
use slice_index::SliceIndex;
use tokio_util::sync::CancellationToken;

/// How often the leader renews (and a candidate tries for) the Lease.
pub const RENEW_EVERY: Duration = Duration::from_secs(2);
/// How long a Lease holds without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// A leader that could not renew for this long stops writing (well before
/// the Lease expires for the others), as client-go's renew deadline.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Passes triggered by changes run at most this often.
pub const PASS_GAP: Duration = Duration::from_secs(1);
/// A pass still running after this long is stopped where it is and tried
/// again: four times the longest measured (the first pass at 5,000 nodes,
/// docs/scale.md), so that a stuck request cannot hold the leader for
/// ever while its renewals keep the others waiting.
pub const PASS_LIMIT: Duration = Duration::from_secs(120);

/// What the controller runs with.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// The DRA driver name.
    pub driver: String,
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub lease_name: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    /// Time between passes when nothing changed.
    pub resync_every: Duration,
    /// Publish partition devices for sharing (consumable capacity).
    pub shared: bool,
    /// DeviceClass of partition claims (for the "fits no partition" Events).
    pub fabric_class: String,
    /// Namespace label naming a namespace's tenant (sticky tenant binding).
    pub tenant_label: String,
}

/// Feeds a nudge into `nudges` for every event of `seen`.
async fn nudge_on<K: Send + 'static>(mut seen: mpsc::Receiver<K>, nudges: mpsc::Sender<()>) {
    while seen.recv().await.is_some() {
        if let Err(mpsc::error::TrySendError::Closed(())) = nudges.try_send(()) {
            return;
        }
    }
}

/// Applies every event of the slice watch to `index`, and nudges.
async fn index_slices(
    mut seen: mpsc::Receiver<Seen<ResourceSlice>>,
    index: Arc<Mutex<SliceIndex>>,
    nudges: mpsc::Sender<()>,
) {
    while let Some(event) = seen.recv().await {
        slice_index::lock(&index).apply(event);
        if let Err(mpsc::error::TrySendError::Closed(())) = nudges.try_send(()) {
            return;
        }
    }
}

/// Feeds a nudge into `nudges` when a Node comes or goes or one of the
/// fabric labels the controller keeps changes: not on the status updates
/// every kubelet sends.
async fn nudge_on_nodes(
    mut seen: mpsc::Receiver<Seen<PartialObjectMeta<Node>>>,
    nudges: mpsc::Sender<()>,
) {
    let mut labels: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
    while let Some(event) = seen.recv().await {
        let relevant = match event {
            Seen::Applied(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                let kept: Vec<Option<String>> = NODE_LABELS
                    .iter()
                    .map(|key| node.metadata.labels.as_ref()?.get(*key).cloned())
                    .collect();
                labels.insert(name, kept.clone()) != Some(kept)
            }
            Seen::Deleted(node) => {
                labels.remove(&node.metadata.name.unwrap_or_default());
                true
            }
            Seen::Restarted => true,
        };
        if relevant && let Err(mpsc::error::TrySendError::Closed(())) = nudges.try_send(()) {
            return;
        }
    }
}

/// Starts the watches of slices, Nodes and claims under `tasks`; the
/// reconciler reading what they keep, and the nudges they send.
fn start_watches(
    client: &kube::Client,
    config: &ControllerConfig,
    tasks: &Tasks,
) -> (reconcile::Reconciler, mpsc::Receiver<()>) {
    let slices: kube::Api<ResourceSlice> = kube::Api::all(client.clone());
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let claims: kube::Api<ResourceClaim> = kube::Api::all(client.clone());
    let (nudge_tx, nudges) = mpsc::channel(1);
    let by_driver = format!("spec.driver={}", config.driver);
    let index = Arc::new(Mutex::new(SliceIndex::new(&config.driver)));
    let seen = watch(slices.clone(), by_driver, "resource slices");
    let indexing = index_slices(seen, index.clone(), nudge_tx.clone());
    tasks.spawn_critical("slice watch", indexing);
    // Metadata only: at 5,000 nodes whole Nodes (images, conditions) would
    // be most of what the watch carries and decodes, for labels.
    let node_metadata: kube::Api<PartialObjectMeta<Node>> = kube::Api::all(client.clone());
    let seen = watch(node_metadata, String::new(), "nodes");
    tasks.spawn_critical("node watch", nudge_on_nodes(seen, nudge_tx.clone()));
    let seen = watch(claims.clone(), String::new(), "resource claims");
    tasks.spawn_critical("claim watch", nudge_on(seen, nudge_tx));
    let reconciler = reconcile::Reconciler {
        slices,
        nodes,
        claims,
        client: client.clone(),
        driver: config.driver.clone(),
        shared: config.shared,
        fabric_class: config.fabric_class.clone(),
        identity: config.identity.clone(),
        reported: BTreeMap::new(),
        tenant_label: config.tenant_label.clone(),
        known: BTreeMap::new(),
        told: BTreeMap::new(),
        untrusted: BTreeSet::new(),
        index,
    };
    (reconciler, nudges)
}

/// Runs until `shutdown` completes or one of its tasks fails (returned);
/// gives the Lease up then. With `webhook`, serves the admission webhook
/// too.
pub async fn run(
    client: kube::Client,
    config: ControllerConfig,
    webhook: Option<webhook::WebhookConfig>,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), TaskFailed> {
    let (mut supervisor, tasks) = Supervisor::new();
    ainic_dra_daemon::memory::spawn_trimmer(&tasks);
    if let Some(webhook) = webhook {
        let serving = webhook::run(client.clone(), webhook, tasks.clone());
        tasks.spawn_critical("webhook certificates", serving);
    }
    let (mut reconciler, nudges) = start_watches(&client, &config, &tasks);
    let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), &config.namespace);
    let elector = lease::Elector::new(leases, &config.lease_name, &config.identity, LEASE_DURATION);
    let elector = Arc::new(elector);
    let renewing = CancellationToken::new();
    let (renewer, lead) = keep_leading(elector.clone(), &config.identity, &tasks, &renewing);
    let stopped = {
        let watching = supervisor.watch(shutdown);
        let passes = Passes {
            lead: lead.clone(),
            nudges,
            resync_every: config.resync_every,
        };
        passes.run(&mut reconciler, watching).await
    };
    supervisor.shutting_down();
    // No renewal may come after the release.
    renewing.cancel();
    renewer.wait().await;
    let leading = lead.borrow().is_some_and(|until| until > Instant::now());
    if leading && let Err(error) = elector.release().await {
        tracing::warn!(%error, "cannot give the lease up");
    }
    supervisor.stop(Duration::from_secs(2)).await;
    tracing::info!("controller stopped");
    stopped.failure().map_or(Ok(()), Err)
}

/// What decides when a pass runs.
struct Passes {
    lead: tokio::sync::watch::Receiver<Option<Instant>>,
    nudges: mpsc::Receiver<()>,
    resync_every: Duration,
}

impl Passes {
    /// Runs passes while leading, on nudges (at most one per [`PASS_GAP`])
    /// and every resync, until `stopped` resolves; says why it stopped.
    async fn run(
        mut self,
        reconciler: &mut reconcile::Reconciler,
        stopped: impl std::future::Future<Output = Stopped>,
    ) -> Stopped {
        tokio::pin!(stopped);
        let mut dirty = true;
        let mut last_pass: Option<Instant> = None;
        loop {
            let resync = last_pass.is_none_or(|t| t.elapsed() >= self.resync_every);
            let settled = last_pass.is_none_or(|t| t.elapsed() >= PASS_GAP);
            let leading = self
                .lead
                .borrow()
                .is_some_and(|until| until > Instant::now());
            if leading && (resync || (dirty && settled)) {
                let pass = while_leading(&mut self.lead, reconciler.pass());
                let pass = tokio::select! {
                    pass = tokio::time::timeout(PASS_LIMIT, pass) => pass,
                    why = &mut stopped => return why,
                };
                dirty = !report(pass);
                last_pass = Some(Instant::now());
                // A pass's lists are freed at its end; hand their pages back.
                ainic_dra_daemon::memory::after_burst();
            }
            tokio::select! {
                why = &mut stopped => return why,
                Some(()) = self.nudges.recv() => dirty = true,
                () = tokio::time::sleep(PASS_GAP) => {}
            }
        }
    }
}

/// Logs how a pass ended; whether it completed.
fn report(
    pass: Result<
        Option<Result<reconcile::Pass, reconcile::PassError>>,
        tokio::time::error::Elapsed,
    >,
) -> bool {
    match pass {
        Ok(Some(Ok(pass))) => {
            tracing::debug!(?pass, "pass done");
            return true;
        }
        Ok(Some(Err(error))) => tracing::error!(%error, "pass failed; trying again"),
        Ok(None) => tracing::error!("leadership ended during a pass; stopped it there"),
        Err(_) => tracing::error!(limit = ?PASS_LIMIT, "pass took too long; stopped it there"),
    }
    false
}

/// Tries for the Lease every [`RENEW_EVERY`] on a task of its own, so that
/// a long pass (thousands of nodes to label) never delays a renewal, until
/// `renewing` is cancelled; the receiver holds until when this replica
/// leads (`None`: it does not).
fn keep_leading(
    elector: Arc<lease::Elector>,
    identity: &str,
    tasks: &Tasks,
    renewing: &CancellationToken,
) -> (Done, tokio::sync::watch::Receiver<Option<Instant>>) {
    let (tx, rx) = tokio::sync::watch::channel(None);
    let (identity, renewing) = (identity.to_string(), renewing.clone());
    let renewals = async move {
        let mut leadership = Leadership::default();
        loop {
            // The Lease holds from when the renewal was sent, not answered.
            let sent = Instant::now();
            let tried = match tokio::time::timeout(RENEW_EVERY, elector.try_lead()).await {
                Ok(answer) => answer.map_err(|e| e.to_string()),
                // Unanswered is not refused: leading goes on until the deadline.
                Err(_) => Err(format!("no answer within {RENEW_EVERY:?}")),
            };
            leadership.record(tried, sent, &identity);
            tx.send_replace(leadership.until());
            tokio::time::sleep(RENEW_EVERY).await;
        }
    };
    let task = tasks.spawn_critical("lease renewal", async move {
        tokio::select! {
            () = renewals => {}
            () = renewing.cancelled() => {}
        }
    });
    (task, rx)
}

/// Runs `work` while this replica leads (`lead`, from [`keep_leading`]);
/// `None` when leadership ended first, `work` then dropped where it was.
/// A pass must write nothing once the lease may be someone else's.
async fn while_leading<T>(
    lead: &mut tokio::sync::watch::Receiver<Option<Instant>>,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::pin!(work);
    loop {
        let until = (*lead.borrow_and_update())?;
        if until <= Instant::now() {
            return None;
        }
        tokio::select! {
            // The deadline first: once it is past, `work` sends nothing more.
            biased;
            // Then look again: a renewal may have moved it.
            () = tokio::time::sleep_until(until) => {}
            changed = lead.changed() => changed.ok()?,
            out = &mut work => return Some(out),
        }
    }
}

/// Whether this replica leads: it does while its last successful renewal
/// is younger than [`RENEW_DEADLINE`], whatever the API says meanwhile.
#[derive(Debug, Default)]
struct Leadership {
    renewed: Option<Instant>,
    was_leading: bool,
}

impl Leadership {
    /// Takes the answer to a renewal `sent` then (an error: none came).
    fn record(&mut self, result: Result<bool, String>, sent: Instant, identity: &str) {
        match result {
            Ok(true) => self.renewed = Some(sent),
            Ok(false) => self.renewed = None,
            Err(error) => tracing::warn!(%error, "cannot renew the lease"),
        }
        let leading = self.leading();
        if leading != self.was_leading {
            tracing::info!(%identity, leading, "leadership changed");
            self.was_leading = leading;
        }
    }

    /// Until when this replica leads, if it has renewed.
    fn until(&self) -> Option<Instant> {
        Some(self.renewed? + RENEW_DEADLINE)
    }

    fn leading(&self) -> bool {
        self.until().is_some_and(|until| until > Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_leader_that_cannot_renew_stops_leading_before_the_lease_expires() {
        let mut l = Leadership::default();
        assert!(!l.leading() && l.until().is_none());
        let sent = Instant::now();
        tokio::time::advance(RENEW_EVERY / 2).await;
        l.record(Ok(true), sent, "me");
        assert_eq!(
            l.until(),
            Some(sent + RENEW_DEADLINE),
            "from when it was sent"
        );
        tokio::time::advance(RENEW_EVERY).await;
        // The API is down or slow: still leading while the last renewal is young.
        l.record(Err("no answer".into()), Instant::now(), "me");
        assert!(l.leading());
        tokio::time::advance(RENEW_DEADLINE).await;
        assert!(!l.leading(), "stopped well before {LEASE_DURATION:?}");
        l.record(Ok(true), Instant::now(), "me");
        assert!(l.leading());
        l.record(Ok(false), Instant::now(), "me");
        assert!(!l.leading(), "someone else holds it");
    }

    /// Issue 35: at 5,000 nodes a pass takes longer than the 5 s it was
    /// cut at (it never finished, and the controller never converged); it
    /// now runs while renewals keep coming and stops when they do not.
    #[tokio::test(start_paused = true)]
    async fn a_pass_runs_as_long_as_the_lease_is_renewed_and_stops_when_it_is_not() {
        let (tx, mut lead) = tokio::sync::watch::channel(Some(Instant::now() + RENEW_DEADLINE));
        let renewals = tokio::spawn(async move {
            for _ in 0..10 {
                tokio::time::sleep(RENEW_EVERY).await;
                tx.send_replace(Some(Instant::now() + RENEW_DEADLINE));
            }
            // Then no more renewals: the leader's deadline passes.
            tx
        });
        let long = tokio::time::sleep(RENEW_DEADLINE * 2);
        let started = Instant::now();
        assert_eq!(while_leading(&mut lead, long).await, Some(()));
        assert_eq!(started.elapsed(), RENEW_DEADLINE * 2);
        let endless = std::future::pending::<()>();
        assert_eq!(while_leading(&mut lead, endless).await, None);
        let last_renewal = started + RENEW_EVERY * 10;
        assert_eq!(Instant::now(), last_renewal + RENEW_DEADLINE);
        let tx = renewals.await.unwrap();
        tx.send_replace(None);
        let at_once = while_leading(&mut lead, std::future::ready(1)).await;
        assert_eq!(at_once, None, "not leading: the work never starts");
    }
}
