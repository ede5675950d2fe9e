//! The node agent (`ainic-dra node`): discovers the node's NICs and wires
//! the long-running tasks around one shared inventory:
//! - the kubelet DRA plugin ([`plugin`]): registration socket, `DRAPlugin`
//!   v1/v1beta1 and `DRAResourceHealth` v1/v1alpha1 on the plugin socket;
//! - the CDI specs and checkpoint of prepared claims ([`cdi`], [`checkpoint`]);
//! - the refresh loop feeding health (link state and the NICs' hardware
//!   error counters) and the inventory (`health`);
//! - `/healthz`, `/readyz`, `/metrics` (`http`);
//! - the ResourceSlice publisher ([`publisher`]), nudged by watches of
//!   its own slices and the node's labels ([`ainic_dra_daemon::follow`]), publishing what
//!   `desired` decides from the labels and the fabric config file
//!   ([`fabric_config`]), and nothing while tenant fencing is unknown.
//!
//! Start-up in two phases. [`serve`]: discover the devices and answer the
//! kubelet (registration, DRA, health) at once. [`Serving::own_state`]:
//! lock the state directory, load the checkpoint, reconcile the CDI dir
//! with it and rebuild every prepared claim's spec from today's devices;
//! prepare and unprepare calls wait for that, so the kubelet's first call
//! sees a consistent state. With `--instance-id` a new agent of a rolling
//! update serves beside the old one under socket names of its own and
//! owns the state once the old one has let go of it.

pub mod addresses;
pub mod agent;
pub mod cdi;
pub mod checkpoint;
pub mod classic;
pub(crate) mod desired;
mod error;
pub mod fabric_config;
pub mod faults;
#[cfg(test)]
pub mod fixtures;
pub(crate) mod health;
pub(crate) mod http;
pub mod limits;
pub(crate) mod metadata;
pub mod netdev;
pub(crate) mod node_events;
pub mod plugin;
pub mod publisher;
pub mod rdma_netns;
pub mod sandbox;
mod state;
pub(crate) mod state_lock;
pub(crate) mod uevents;
pub(crate) mod uninstall;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ainic_dra_daemon::Tasks;
pub use error::{AgentError, BoxError};
use kubelet_api::dra::{v1, v1beta1};
use kubelet_api::dra_health::{v1 as health_v1, v1alpha1 as health_v1alpha1};
use kubelet_api::pluginregistration::v1 as reg;
pub use metadata::MetadataError;
pub use state_lock::LockError;
use tokio::sync::watch;
use topology::{DiscoveryConfig, Inventory};

use dra_model::health::{HealthPolicy, Verdicts};
use http::metrics::Metrics;
use plugin::Driver;
use plugin::registration::RegistrationService;
use plugin::resolve::Scope;

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
    /// Where the device-metadata files go (tmpfs; all of it ours).
    pub metadata_dir: PathBuf,
    /// Where the checkpoint lives.
    pub state_dir: PathBuf,
    /// Where this boot's ID is read (`/proc/sys/kernel/random/boot_id`).
    pub boot_id_file: PathBuf,
    /// How long to wait for another agent to release the state directory.
    pub state_lock_wait: Duration,
    /// This agent's own name for its sockets (the pod's UID), so that an
    /// old and a new agent of a rolling update serve side by side; `None`
    /// uses the kubelet's default names.
    pub instance: Option<String>,
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
    /// Write device metadata for containers (`metadata`).
    pub device_metadata: bool,
    /// The NRI plugin of exclusive netdev mode ([`sandbox`]); `None` runs
    /// none (claims in that mode are refused).
    pub nri: Option<NriConfig>,
    /// Health from the NICs' hardware error counters, read every refresh
    /// interval (`health::counters`); `None` reads none.
    pub counter_health: Option<HealthPolicy>,
}

/// Where and as what the NRI plugin registers.
#[derive(Clone, Debug)]
pub struct NriConfig {
    /// The runtime's NRI socket.
    pub socket: PathBuf,
    /// The plugin's two-digit index.
    pub index: String,
}

/// The agent in its first phase ([`serve`]): the kubelet's sockets answer
/// and the node's devices are followed, but the state directory (the
/// checkpoint, the CDI dir) is not the agent's yet: [`Serving::own_state`]
/// takes it.
pub struct Serving {
    /// The shared inventory, refreshed every interval.
    pub inventory: watch::Receiver<Arc<Inventory>>,
    /// Where the publisher tells the plugin the attributes of the devices
    /// it published (device metadata takes them from there).
    pub attributes: watch::Sender<Option<Arc<metadata::DeviceAttributes>>>,
    /// The registration and DRA sockets, to remove on shutdown so the
    /// kubelet sees the plugin go.
    pub sockets: Vec<PathBuf>,
    /// The counter health verdicts the publisher taints by.
    pub verdicts: watch::Receiver<Arc<Verdicts>>,
    /// Counter health Events to post on the Node, once it is read (taken
    /// by the agent; `None` without counter health).
    pub health_events: Option<tokio::sync::mpsc::Receiver<health::counters::HealthEvent>>,
    /// The driver, once the state is owned; calls wait for it meanwhile.
    slot: watch::Sender<Option<Arc<Driver>>>,
    /// Held from the start when the sockets' names are not this agent's
    /// own (no `--instance-id`): then no second agent may touch them.
    lock: Option<state_lock::StateLock>,
    parts: StateParts,
}

/// What the second phase needs from the first.
struct StateParts {
    config: NodeConfig,
    metrics: Arc<Metrics>,
    attributes: watch::Receiver<Option<Arc<metadata::DeviceAttributes>>>,
    tasks: Tasks,
}

/// The sockets' file names: the kubelet's defaults, or, with an instance
/// ID (the pod's UID), names of this agent's own, so that a new agent of
/// a rolling update registers beside the old one (kubelet 1.33 and later
/// keep both registrations and use the newest).
fn socket_names(config: &NodeConfig) -> (PathBuf, PathBuf) {
    let driver = &config.scope.driver;
    match &config.instance {
        None => (
            config.registry_dir.join(format!("{driver}-reg.sock")),
            config.plugin_dir.join(DRA_SOCKET),
        ),
        Some(id) => (
            config.registry_dir.join(format!("{driver}-{id}-reg.sock")),
            config.plugin_dir.join(format!("dra-{id}.sock")),
        ),
    }
}

/// First phase of the agent: discovers the node's devices and serves the
/// registration and DRA sockets, health and HTTP at once; prepare and
/// unprepare wait until [`Serving::own_state`] made the driver. Without
/// an instance ID the state directory is locked first (the default
/// socket names are shared by every agent of the node). `metrics` may
/// already hold other components' metrics; `published` says why the
/// devices published are less than configured (for `/readyz`).
pub async fn serve(
    config: NodeConfig,
    metrics: Arc<Metrics>,
    published: watch::Receiver<Option<String>>,
    tasks: &Tasks,
) -> Result<Serving, AgentError> {
    let lock = match config.instance {
        None => Some(state::lock_state_dir(&config).await?),
        Some(_) => None,
    };
    let discovery = DiscoveryConfig::default();
    let inventory = topology::discover(&config.sysfs_root, &discovery).map_err(|source| {
        AgentError::Discover {
            root: config.sysfs_root.clone(),
            source,
        }
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
    let (attributes_tx, attributes) = watch::channel(None);
    let followers = health::refresh::spawn(&config, discovery, inventory_tx, &metrics, tasks).await;
    let (slot_tx, slot) = plugin::grpc::DriverSlot::empty();
    let (reg_socket, dra_socket) = socket_names(&config);
    serve_dra(&config, &dra_socket, slot, followers.reports, tasks)?;
    let registration = serve_registration(&config, &reg_socket, &dra_socket, &metrics, tasks)?;
    if let Some(addr) = config.http_addr {
        let state = http::HttpState {
            metrics: metrics.clone(),
            registration,
            published,
        };
        serve_http(addr, state, config.instance.is_some(), tasks).await?;
    } else {
        tracing::info!("http endpoint disabled");
    }
    Ok(Serving {
        inventory: inventory_rx,
        attributes: attributes_tx,
        sockets: vec![reg_socket, dra_socket],
        verdicts: followers.verdicts,
        health_events: followers.health_events,
        slot: slot_tx,
        lock,
        parts: StateParts {
            config,
            metrics,
            attributes,
            tasks: tasks.clone(),
        },
    })
}

/// Serves HTTP on `addr`. With `wait` (an agent with an instance ID) an
/// address in use is an older agent of a rolling update on the host's
/// network: its endpoint answers the probes meanwhile, and this one binds
/// as soon as the older one has exited (tried every second).
async fn serve_http(
    addr: SocketAddr,
    state: http::HttpState,
    wait: bool,
    tasks: &Tasks,
) -> Result<(), AgentError> {
    let in_use = |e: &std::io::Error| e.kind() == std::io::ErrorKind::AddrInUse;
    match http::serve(addr, state.clone()).await {
        Ok((bound, server)) => {
            tasks.spawn_critical("http server", server);
            tracing::info!(%bound, "http serving");
        }
        Err(error) if wait && in_use(&error) => {
            tracing::info!(%addr, "http address in use (an older agent?): binding when it is free");
            tasks.spawn_critical("http server", async move {
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    match http::serve(addr, state.clone()).await {
                        Ok((bound, server)) => {
                            tracing::info!(%bound, "http serving");
                            return server.await;
                        }
                        Err(error) if in_use(&error) => {}
                        Err(error) => {
                            return tracing::error!(%addr, %error, "cannot serve http");
                        }
                    }
                }
            });
        }
        Err(source) => return Err(AgentError::Http { addr, source }),
    }
    Ok(())
}

/// Serves `DRAPlugin` v1 and v1beta1 and `DRAResourceHealth` v1 and
/// v1alpha1 on `socket`.
fn serve_dra(
    config: &NodeConfig,
    socket: &std::path::Path,
    slot: plugin::grpc::DriverSlot,
    reports: watch::Receiver<Arc<health::HealthReport>>,
    tasks: &Tasks,
) -> Result<(), AgentError> {
    let timeout =
        i64::try_from(config.refresh_every.as_secs().saturating_mul(3).max(30)).unwrap_or(i64::MAX);
    let health_service = health::HealthService::new(&config.scope.pool, reports, timeout);
    let incoming = kubelet_api::uds::bind(socket)?;
    let server = tonic::transport::Server::builder()
        .add_service(v1::dra_plugin_server::DraPluginServer::new(
            plugin::grpc::V1(slot.clone()),
        ))
        .add_service(v1beta1::dra_plugin_server::DraPluginServer::new(
            plugin::grpc::V1beta1(slot),
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
        .serve_with_incoming(incoming);
    tasks.spawn_critical("dra server", logged("dra server", server));
    Ok(())
}

/// Serves the registration socket; the registration status it reports.
fn serve_registration(
    config: &NodeConfig,
    socket: &std::path::Path,
    dra_socket: &std::path::Path,
    metrics: &Arc<Metrics>,
    tasks: &Tasks,
) -> Result<watch::Receiver<plugin::registration::Registration>, AgentError> {
    let registration = RegistrationService::new(
        &config.scope.driver,
        dra_socket.to_path_buf(),
        metrics.clone(),
    );
    let status = registration.status();
    let incoming = kubelet_api::uds::bind(socket)?;
    let server = tonic::transport::Server::builder()
        .add_service(reg::registration_server::RegistrationServer::new(
            registration,
        ))
        .serve_with_incoming(incoming);
    tasks.spawn_critical("registration server", logged("registration server", server));
    tracing::info!(registration = %socket.display(), "DRA plugin serving");
    Ok(status)
}

/// A gRPC server's future, its error logged with its name (the supervisor
/// then reports the end).
async fn logged<E: std::fmt::Display>(
    name: &'static str,
    server: impl Future<Output = Result<(), E>>,
) {
    if let Err(error) = server.await {
        tracing::error!(server = name, %error, "server failed");
    }
}
