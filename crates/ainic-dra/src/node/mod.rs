//! The node agent (`ainic-dra node`): discovers the node's NICs and wires
//! the long-running tasks around one shared inventory:
//! - the kubelet DRA plugin ([`plugin`]): registration socket, `DRAPlugin`
//!   v1/v1beta1 and `DRAResourceHealth` v1/v1alpha1 on the plugin socket;
//! - the CDI specs and checkpoint of prepared claims ([`cdi`], [`checkpoint`]);
//! - the refresh loop feeding health and the inventory ([`health`]);
//! - `/healthz`, `/readyz`, `/metrics` ([`http`]);
//! - the ResourceSlice publisher ([`publisher`]), nudged by watches of
//!   its own slices and the node's labels ([`follow`]), publishing what
//!   [`desired`] decides from the labels and the fabric config file
//!   ([`fabric_config`]), and nothing while tenant fencing is unknown.
//!
//! Start-up order: load the checkpoint, reconcile the CDI dir with it and
//! rebuild every prepared claim's spec from today's devices before any
//! socket is served, so the kubelet's first call sees a consistent state.

pub mod agent;
pub mod cdi;
pub mod checkpoint;
pub mod desired;
pub mod fabric_config;
pub mod faults;
#[cfg(test)]
pub mod fixtures;
pub mod follow;
pub mod health;
pub mod http;
pub mod limits;
pub mod memory;
pub mod metadata;
pub mod netdev;
pub mod node_events;
pub mod plugin;
pub mod publisher;
pub mod rdma_netns;
pub mod sandbox;
pub mod server_version;
pub mod state_lock;
pub mod uevents;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use kubelet_api::dra::{v1, v1beta1};
use kubelet_api::dra_health::{v1 as health_v1, v1alpha1 as health_v1alpha1};
use kubelet_api::pluginregistration::v1 as reg;
use tokio::sync::watch;
use topology::{DiscoveryConfig, Inventory};

use cdi::dir::CdiDir;
use checkpoint::store::CheckpointStore;
use health::refresh::Refresher;
use http::metrics::Metrics;
use plugin::claims::SharedClaims;
use plugin::registration::RegistrationService;
use plugin::resolve::Scope;
use plugin::{Driver, DriverParts};

/// Socket file name of the DRA services inside `--plugin-dir`.
pub const DRA_SOCKET: &str = "dra.sock";

/// Validated settings of the node agent.
pub struct NodeConfig {
    /// Driver name and pool (node name).
    pub scope: Scope,
    /// Root of sysfs.
    pub sysfs_root: PathBuf,
    /// Where the host's device nodes are.
    pub dev: cdi::DevRoots,
    /// Directory of the DRA socket.
    pub plugin_dir: PathBuf,
    /// The kubelet's plugin registry directory.
    pub registry_dir: PathBuf,
    /// Where CDI specs go.
    pub cdi_dir: PathBuf,
    /// Where the checkpoint lives.
    pub state_dir: PathBuf,
    /// Where this boot's ID is read (`/proc/sys/kernel/random/boot_id`).
    pub boot_id_file: PathBuf,
    /// `/healthz`, `/readyz`, `/metrics`; `None` serves no HTTP.
    pub http_addr: Option<SocketAddr>,
    /// Time between health reports (and rediscoveries without kernel
    /// events).
    pub refresh_every: Duration,
    /// Time between cheap rechecks of sysfs while kernel events arrive.
    pub rescan_every: Duration,
    /// Longest time between full rediscoveries while kernel events arrive.
    pub full_rescan_every: Duration,
    /// Time between orphan sweeps ([`plugin::sweep`]); `None` for none.
    pub sweep_every: Option<Duration>,
    /// Write device metadata for containers ([`metadata`]).
    pub device_metadata: bool,
    /// The NRI plugin of exclusive netdev mode ([`sandbox`]); `None` runs
    /// none (claims in that mode are refused).
    pub nri: Option<NriConfig>,
}

/// Where and as what the NRI plugin registers.
#[derive(Clone, Debug)]
pub struct NriConfig {
    /// The runtime's NRI socket.
    pub socket: PathBuf,
    /// The plugin's two-digit index.
    pub index: String,
}

/// What the other tasks of the agent follow once the plugin is up.
pub struct Started {
    /// The shared inventory, refreshed every interval.
    pub inventory: watch::Receiver<Arc<Inventory>>,
    /// Where the publisher tells the plugin the attributes of the devices
    /// it published (device metadata takes them from there).
    pub attributes: watch::Sender<Option<Arc<metadata::DeviceAttributes>>>,
    /// The registration and DRA sockets, to remove on shutdown so the
    /// kubelet sees the plugin go.
    pub sockets: Vec<PathBuf>,
}

/// Starts every task of the DRA plugin on the current runtime and returns
/// once the sockets are listening. `metrics` may already hold other
/// components' metrics; `published` says why the devices published are
/// less than configured (for `/readyz`).
pub async fn start(
    config: NodeConfig,
    claims: SharedClaims,
    metrics: Arc<Metrics>,
    published: watch::Receiver<Option<String>>,
) -> Result<Started> {
    let discovery = DiscoveryConfig::default();
    let inventory = topology::discover(&config.sysfs_root, &discovery).with_context(|| {
        format!(
            "failed to discover NICs under {}",
            config.sysfs_root.display()
        )
    })?;
    for warning in &inventory.warnings {
        tracing::warn!(%warning, "discovery");
    }
    tracing::info!(
        nics = inventory.nics.len(),
        gpus = inventory.gpus.len(),
        "inventory discovered"
    );
    let (inventory_tx, inventory_rx) = watch::channel(Arc::new(inventory));

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
    let (attributes_tx, attributes) = watch::channel(None);
    // Built with the flag off too: claims prepared while it was on still
    // get their metadata removed.
    let files = metadata::MetadataFiles::new(&config.scope.driver, &config.plugin_dir, cdi.clone());
    reconciled
        .removed
        .extend(files.remove_orphans(&store.snapshot())?);
    let metadata = Some(plugin::MetadataParts {
        files,
        write: config.device_metadata,
        attributes,
    });

    let (status_tx, status_rx) = tokio::sync::mpsc::unbounded_channel();
    let sandboxes = Arc::new(sandbox::Sandboxes::new(
        store.clone(),
        &config.sysfs_root,
        Some(status_tx.clone()),
        config.nri.is_some(),
        Arc::new(rdma_netns::Kernel),
    ));
    if let Some(nri) = &config.nri {
        tokio::spawn(sandbox::follow_runtime(nri.clone(), sandboxes.clone()));
    }
    tokio::spawn(plugin::status::run(
        status_rx,
        claims.clone(),
        config.scope.clone(),
        inventory_rx.clone(),
    ));
    let driver = Arc::new(Driver::new(DriverParts {
        scope: config.scope.clone(),
        claims,
        inventory: inventory_rx.clone(),
        store,
        cdi,
        dev: config.dev.clone(),
        metrics: metrics.clone(),
        status: Some(status_tx),
        metadata,
        sandboxes: Some(sandboxes),
    }));

    let refreshed = driver.refresh_all().await;
    tracing::info!(
        claims = driver.prepared_claims(),
        removed = ?reconciled.removed,
        rewritten = ?refreshed.rewritten,
        "checkpoint reconciled with the CDI directory and today's devices"
    );
    let lost: Vec<String> = refreshed
        .failed
        .iter()
        .map(|(uid, _)| uid.clone())
        .collect();
    driver.report_all(&lost);
    tokio::spawn(plugin::follow_inventory(driver.clone()));

    if let Some(every) = config.sweep_every {
        tokio::spawn(plugin::sweep::run(driver.clone(), every));
    }
    if rebooted.is_some() {
        // Claims deleted while the node was down: asked about at once, not
        // at the first sweep interval.
        tokio::spawn(plugin::sweep::once(driver.clone()));
    }

    let (reports_tx, reports_rx) = watch::channel(Arc::default());
    let refresher = Refresher {
        sysfs_root: config.sysfs_root.clone(),
        discovery,
        interval: config.refresh_every,
        inventory: inventory_tx,
        reports: reports_tx,
        metrics: metrics.clone(),
        links: subscribe_links(),
        uevents: subscribe_uevents(),
        rescan_every: config.rescan_every,
        full_rescan_every: config.full_rescan_every,
    };
    refresher.report();
    tokio::spawn(refresher.run());

    let timeout =
        i64::try_from(config.refresh_every.as_secs().saturating_mul(3).max(30)).unwrap_or(i64::MAX);
    let health_service = health::HealthService::new(&config.scope.pool, reports_rx, timeout);
    let dra_socket = config.plugin_dir.join(DRA_SOCKET);
    let dra_incoming = kubelet_api::uds::bind(&dra_socket)?;
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(v1::dra_plugin_server::DraPluginServer::new(
                plugin::grpc::V1(driver.clone()),
            ))
            .add_service(v1beta1::dra_plugin_server::DraPluginServer::new(
                plugin::grpc::V1beta1(driver.clone()),
            ))
            .add_service(
                health_v1::dra_resource_health_server::DraResourceHealthServer::new(
                    health_service.clone(),
                ),
            )
            .add_service(
                health_v1alpha1::dra_resource_health_server::DraResourceHealthServer::new(
                    health_service,
                ),
            )
            .serve_with_incoming(dra_incoming),
    );

    let registration = RegistrationService::new(&config.scope.driver, dra_socket, metrics.clone());
    let registration_rx = registration.status();
    let reg_socket = config
        .registry_dir
        .join(format!("{}-reg.sock", config.scope.driver));
    let reg_incoming = kubelet_api::uds::bind(&reg_socket)?;
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(reg::registration_server::RegistrationServer::new(
                registration,
            ))
            .serve_with_incoming(reg_incoming),
    );
    tracing::info!(registration = %reg_socket.display(), "DRA plugin serving");

    match config.http_addr {
        Some(addr) => {
            let state = http::HttpState {
                metrics,
                registration: registration_rx,
                published,
            };
            let (bound, server) = http::serve(addr, state)
                .await
                .with_context(|| format!("failed to listen on {addr}"))?;
            tokio::spawn(server);
            tracing::info!(%bound, "http serving");
        }
        None => tracing::info!("http endpoint disabled"),
    }

    Ok(Started {
        inventory: inventory_rx,
        attributes: attributes_tx,
        sockets: vec![reg_socket, config.plugin_dir.join(DRA_SOCKET)],
    })
}

/// Kernel link events for the refresher; `None` (logged) where the host
/// gives no netlink socket, leaving the periodic refresh alone.
fn subscribe_links() -> Option<tokio::sync::mpsc::Receiver<publisher::LinkEvent>> {
    use publisher::LinkSource;
    match publisher::NetlinkLinks.subscribe() {
        Ok(links) => Some(links),
        Err(error) => {
            tracing::warn!(%error, "no netlink link events; refreshing on the interval only");
            None
        }
    }
}

fn subscribe_uevents() -> Option<tokio::sync::mpsc::Receiver<()>> {
    match uevents::subscribe() {
        Ok(events) => Some(events),
        Err(error) => {
            tracing::warn!(%error, "no uevents; rediscovering every refresh interval");
            None
        }
    }
}

/// Resolves when SIGTERM or SIGINT arrives.
pub async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(error) => {
            tracing::error!(%error, "cannot watch SIGTERM; stopping on Ctrl-C only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
