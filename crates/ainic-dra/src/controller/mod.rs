//! `ainic-dra controller`: RDMA fabric partitions as DRA devices, so that
//! the pods of one job land in one partition without naming it.
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
//! One replica leads ([`lease`]); the others wait. The leader renews its
//! Lease every [`RENEW_EVERY`] and runs a pass ([`reconcile`]) whenever a
//! watch sees slices of the driver or Nodes change, and every resync. A
//! pass writes only what differs, so at rest it writes nothing (the Lease
//! renewal is the only write). Stopping the controller leaves its slices,
//! labels and every claim allocated from them alone.

pub mod lease;
pub mod reconcile;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use tokio::sync::mpsc;

use crate::node::follow::watch;

/// How often the leader renews (and a candidate tries for) the Lease.
pub const RENEW_EVERY: Duration = Duration::from_secs(2);
/// How long a Lease holds without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);

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
}

/// Feeds a nudge into `nudges` for every event of `seen`.
fn nudge_on<K: Send + 'static>(mut seen: mpsc::Receiver<K>, nudges: mpsc::Sender<()>) {
    tokio::spawn(async move {
        while seen.recv().await.is_some() {
            if let Err(mpsc::error::TrySendError::Closed(())) = nudges.try_send(()) {
                return;
            }
        }
    });
}

/// Runs until `shutdown` completes; gives the Lease up then.
pub async fn run(
    client: kube::Client,
    config: ControllerConfig,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), &config.namespace);
    let elector = lease::Elector::new(leases, &config.lease_name, &config.identity, LEASE_DURATION);
    let slices: kube::Api<ResourceSlice> = kube::Api::all(client.clone());
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let (nudge_tx, mut nudges) = mpsc::channel(1);
    let by_driver = format!("spec.driver={}", config.driver);
    nudge_on(
        watch(slices.clone(), by_driver, "resource slices"),
        nudge_tx.clone(),
    );
    nudge_on(watch(nodes.clone(), String::new(), "nodes"), nudge_tx);
    let mut reconciler = reconcile::Reconciler {
        slices,
        nodes,
        driver: config.driver.clone(),
        shared: config.shared,
    };
    tokio::pin!(shutdown);
    let mut leading = false;
    let mut dirty = true;
    let mut last_pass = tokio::time::Instant::now();
    loop {
        match elector.try_lead().await {
            Ok(now) if now != leading => {
                tracing::info!(identity = %config.identity, leading = now, "leadership changed");
                leading = now;
                dirty |= now;
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "cannot renew the lease"),
        }
        if leading && (dirty || last_pass.elapsed() >= config.resync_every) {
            match reconciler.pass().await {
                Ok(pass) => {
                    dirty = false;
                    tracing::debug!(?pass, "pass done");
                }
                Err(error) => tracing::error!(%error, "pass failed; trying again"),
            }
            last_pass = tokio::time::Instant::now();
        }
        tokio::select! {
            () = &mut shutdown => break,
            Some(()) = nudges.recv() => dirty = true,
            () = tokio::time::sleep(RENEW_EVERY) => {}
        }
    }
    if leading && let Err(error) = elector.release().await {
        tracing::warn!(%error, "cannot give the lease up");
    }
    tracing::info!("controller stopped");
}
