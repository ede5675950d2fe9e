//! The classic kubelet device plugin path (`ainic-dra node --device-plugin`):
//! one `DevicePlugin` server per extended resource (`amd.com/nic`,
//! `amd.com/vnic` by default), served from the same inventory as the DRA
//! path, registered with the kubelet and re-registered when it restarts.
//!
//! The logic (config, split, scoring, answers) is in
//! [`dra_model::classic`]; this module is the shell around it:
//! - [`args`]: the command-line flags, turned into [`ClassicSettings`];
//! - [`snapshot`]: the inventory and its split, followed by every stream;
//! - [`service`]: the gRPC `DevicePlugin` service of one resource;
//! - [`lifecycle`]: serve, register, watch `kubelet.sock`, start over;
//! - [`cdi`]: the node-wide CDI spec used with `--cdi-enabled`.
//!
//! The inventory comes in through a `watch` channel: the node agent's
//! refresh loop re-reads sysfs, so link and RDMA port changes reach
//! `ListAndWatch` within one refresh interval.

pub mod args;
pub mod cdi;
pub mod lifecycle;
#[cfg(test)]
mod rescan;
pub mod service;
pub mod snapshot;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ainic_dra_daemon::Tasks;
use ainic_dra_daemon::supervise::Done;
use anyhow::Context;
use dra_model::classic::{AllocateOptions, ClassicConfig};
use tokio::sync::watch;
use topology::Inventory;

use crate::cdi::DevRoots;
use lifecycle::ResourcePlugin;
use snapshot::Snapshot;

/// Validated settings of the classic path.
#[derive(Clone, Debug)]
pub struct ClassicSettings {
    /// The kubelet's device plugin directory.
    pub dir: PathBuf,
    /// Resources, selectors, devices left to DRA.
    pub config: ClassicConfig,
    /// Where to write the classic CDI spec; `Some` means `--cdi-enabled`.
    pub cdi_dir: Option<PathBuf>,
    /// Where the host's device nodes are (host paths in CDI specs).
    pub dev: DevRoots,
    /// How often socket files are checked for a kubelet restart.
    pub poll: Duration,
    /// The DRA device model's config, whose fabric facts give the rails
    /// the scoring uses; `None` keeps each PF's ordinal as its rail.
    pub fabric: Option<dra_model::ModelConfig>,
    /// The agent's instance ID (`--instance-id`): it names the sockets, so
    /// the plugins of an old and a new agent of a rolling update never
    /// share (and remove) one file.
    pub instance: Option<String>,
}

/// Why the classic path could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClassicError {
    /// The config offers a device through two paths (two resources, or a
    /// resource and DRA).
    #[error("refusing to start the device plugin")]
    Overlap(#[source] dra_model::classic::OverlapError),
    /// The classic CDI spec could not be built or written.
    #[error("failed to write the classic CDI spec")]
    Cdi(#[source] crate::BoxError),
}

/// Starts the classic path's tasks under `tasks`. Fails before serving
/// anything when the config offers a device through two paths on the
/// current inventory. The returned tasks end after `shutdown` flips to
/// `true`.
pub fn start(
    settings: ClassicSettings,
    inventories: watch::Receiver<Arc<Inventory>>,
    shutdown: watch::Receiver<bool>,
    tasks: &Tasks,
) -> Result<Vec<Done>, ClassicError> {
    let config = Arc::new(settings.config);
    let first = Snapshot::new(
        &config,
        settings.fabric.as_ref(),
        Arc::clone(&inventories.borrow()),
    );
    first.assignment.check().map_err(ClassicError::Overlap)?;
    for r in &first.assignment.resources {
        tracing::info!(resource = %r.name, devices = r.devices.len(), "classic resource");
    }
    let (snapshot_tx, snapshots) = watch::channel(Arc::new(first));
    let mut started = Vec::new();
    let follow = snapshot::follow(
        Arc::clone(&config),
        settings.fabric.clone(),
        inventories,
        snapshot_tx,
    );
    let follow = with_shutdown(follow, shutdown.clone());
    started.push(tasks.spawn_critical("classic snapshot follower", follow));
    let options = AllocateOptions {
        char_devices: config.char_devices,
        cdi_enabled: settings.cdi_dir.is_some(),
    };
    if let Some(dir) = settings.cdi_dir.clone() {
        // The spec exists before any plugin can answer with its names.
        write_cdi(&dir, &settings.dev, options, &snapshots.borrow())
            .map_err(|e| ClassicError::Cdi(e.into()))?;
        let task = follow_cdi(dir, settings.dev.clone(), options, snapshots.clone());
        let task = with_shutdown(task, shutdown.clone());
        started.push(tasks.spawn_critical("classic cdi follower", task));
    }
    for spec in &config.resources {
        let plugin = ResourcePlugin {
            resource: spec.name.clone(),
            dir: settings.dir.clone(),
            snapshots: snapshots.clone(),
            options,
            poll: settings.poll,
            host_dev: settings.dev.on_host.clone(),
            instance: settings.instance.clone(),
        };
        let serving = plugin.run(shutdown.clone());
        started.push(tasks.spawn_critical("classic device plugin", serving));
    }
    Ok(started)
}

/// Runs `task` until it ends or `shutdown` flips.
async fn with_shutdown(task: impl Future<Output = ()>, mut shutdown: watch::Receiver<bool>) {
    tokio::select! {
        () = task => {}
        _ = shutdown.wait_for(|s| *s) => {}
    }
}

fn write_cdi(
    dir: &Path,
    dev: &DevRoots,
    options: AllocateOptions,
    snapshot: &Snapshot,
) -> anyhow::Result<()> {
    let spec = cdi::build(snapshot, options.char_devices, dev)?;
    cdi::write(dir, &spec).with_context(|| format!("cannot write into {}", dir.display()))
}

/// Keeps the classic CDI spec (written once by [`start`]) in step with the
/// split. It stays when the agent stops: containers of pods allocated by
/// the classic path that restart meanwhile still find their devices, and
/// the next start rewrites it from that day's devices.
async fn follow_cdi(
    dir: PathBuf,
    dev: DevRoots,
    options: AllocateOptions,
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
) {
    while snapshots.changed().await.is_ok() {
        let snapshot = Arc::clone(&snapshots.borrow_and_update());
        if let Err(e) = write_cdi(&dir, &dev, options, &snapshot) {
            tracing::error!(dir = %dir.display(), error = %format!("{e:#}"), "cannot update classic CDI spec");
        }
    }
}
