//! The agent's second phase ([`Serving::own_state`]): the state
//! directory locked, the checkpoint loaded and reconciled with the CDI
//! directory, every prepared claim rebuilt from today's devices, and the
//! driver handed to the gRPC services waiting for it.

use std::sync::Arc;

use crate::AgentError;
use ainic_dra_daemon::Tasks;
use tokio::sync::watch;
use topology::Inventory;

use crate::cdi::dir::CdiDir;
use crate::checkpoint::{self, store::CheckpointStore};
use crate::plugin::claims::SharedClaims;
use crate::plugin::{self, Driver, DriverParts};
use crate::{NodeConfig, Serving, StateParts, metadata, rdma_netns, sandbox, state_lock};

impl Serving {
    /// Second phase: locks the state directory (waiting, with an instance
    /// ID, for an older agent of the node to let go of it), loads the
    /// checkpoint, reconciles the CDI dir with it, rebuilds every prepared
    /// claim's spec from today's devices, and hands the driver to the
    /// waiting gRPC services. The lock is held until the agent exits.
    pub async fn own_state(&mut self, claims: SharedClaims) -> Result<Arc<Driver>, AgentError> {
        if self.lock.is_none() {
            self.lock = Some(lock_state_dir(&self.parts.config).await?);
        }
        let driver = open_state(&self.parts, claims, self.inventory.clone()).await?;
        self.slot.send_replace(Some(driver.clone()));
        Ok(driver)
    }
}

/// Loads the checkpoint and builds the driver on it (see
/// [`Serving::own_state`]).
async fn open_state(
    parts: &StateParts,
    claims: SharedClaims,
    inventory: watch::Receiver<Arc<Inventory>>,
) -> Result<Arc<Driver>, AgentError> {
    let config = &parts.config;
    let boot = checkpoint::journal::boot_id(&config.boot_id_file);
    let store = Arc::new(CheckpointStore::open_in_boot(&config.state_dir, &boot)?);
    let rebooted = store.previous_boot().map(str::to_string);
    if let Some(previous) = &rebooted {
        // The pods' network namespaces died with the boot and their
        // netdevs are the host's again; device numbers and the CDI dir are
        // rebuilt below from today's devices.
        let forgotten = store.forget_moves().await?;
        tracing::warn!(previous_boot = %previous, boot = %boot, netdev_moves_forgotten = forgotten, "the node rebooted since the checkpoint was written: prepared claims are rebuilt from today's devices");
    }
    let cdi = CdiDir::open(&config.cdi_dir)?;
    let mut reconciled = checkpoint::reconcile::reconcile(&store.snapshot(), &cdi)?;
    // Built with the flag off too: claims prepared while it was on still
    // get their metadata removed.
    let files = metadata::MetadataFiles::new(
        &config.scope.driver,
        &config.metadata_dir,
        &config.plugin_dir,
        cdi.clone(),
    );
    reconciled
        .removed
        .extend(files.remove_orphans(&store.snapshot())?);
    let addresses = crate::addresses::Addresses::watched();
    let metadata = Some(plugin::MetadataParts {
        files,
        write: config.device_metadata,
        attributes: parts.attributes.clone(),
        addresses: addresses.clone(),
    });
    let (status_tx, status_rx) = tokio::sync::mpsc::unbounded_channel();
    let sandboxes = Arc::new(
        sandbox::Sandboxes::new(
            store.clone(),
            &config.sysfs_root,
            Some(status_tx.clone()),
            config.nri.is_some(),
            Arc::new(rdma_netns::Kernel),
        )
        .with_netdev_gates(&config.cdi_dir),
    );
    let tasks = &parts.tasks;
    if let Some(nri) = &config.nri {
        let runtime = sandbox::follow_runtime(nri.clone(), sandboxes.clone());
        tasks.spawn_critical("nri plugin", runtime);
    }
    let writer = plugin::status::run(
        status_rx,
        claims.clone(),
        config.scope.clone(),
        inventory.clone(),
        addresses,
    );
    tasks.spawn_critical("claim status writer", writer);
    let driver = Arc::new(Driver::new(DriverParts {
        scope: config.scope.clone(),
        claims,
        inventory,
        store,
        cdi,
        dev: config.dev.clone(),
        metrics: parts.metrics.clone(),
        status: Some(status_tx),
        metadata,
        sandboxes: Some(sandboxes),
    }));
    converge(&driver, &reconciled.removed).await;
    follow_claims(&driver, config, tasks, rebooted.is_some());
    Ok(driver)
}

/// Rebuilds every prepared claim's spec from today's devices, and reports
/// the claims that could not be.
async fn converge(driver: &Driver, removed: &impl std::fmt::Debug) {
    let refreshed = driver.refresh_all().await;
    tracing::info!(
        claims = driver.prepared_claims(),
        ?removed,
        rewritten = ?refreshed.rewritten,
        "checkpoint reconciled with the CDI directory and today's devices"
    );
    let lost: Vec<String> = refreshed.failed.into_iter().map(|(uid, _)| uid).collect();
    driver.report_all(&lost);
}

/// The driver's followers: today's devices, and the sweep of claims deleted
/// behind the kubelet's back (at once after a reboot: claims deleted
/// while the node was down are asked about now, not at the first sweep
/// interval).
fn follow_claims(driver: &Arc<Driver>, config: &NodeConfig, tasks: &Tasks, rebooted: bool) {
    let following = plugin::follow_inventory(driver.clone());
    tasks.spawn_critical("prepared claims follower", following);
    if let Some(every) = config.sweep_every {
        tasks.spawn_critical("claim sweep", plugin::sweep::run(driver.clone(), every));
    }
    if rebooted {
        let once = plugin::sweep::once(driver.clone());
        tasks.spawn_once("claim sweep after reboot", once);
    }
}

pub(crate) async fn lock_state_dir(
    config: &NodeConfig,
) -> Result<state_lock::StateLock, AgentError> {
    let lock = state_lock::acquire(&config.state_dir, config.state_lock_wait).await?;
    tracing::info!(lock = %lock.path().display(), "state directory locked");
    Ok(lock)
}
