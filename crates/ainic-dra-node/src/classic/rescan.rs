//! Test support: re-discovery of a rendered sysfs tree, standing in for the
//! node agent's refresh loop so the classic path can be tested alone.
//!
//! Discovery runs on the blocking pool every interval; a new inventory is
//! published only when it differs from the last one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use topology::{DiscoveryConfig, Inventory, discover};

/// Discovers once now (an unusable root is an error), then again every
/// `interval` until `shutdown` flips.
pub fn spawn(
    sysfs_root: PathBuf,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<(watch::Receiver<Arc<Inventory>>, JoinHandle<()>)> {
    let config = DiscoveryConfig::default();
    let first = discover(&sysfs_root, &config)
        .with_context(|| format!("failed to discover devices under {}", sysfs_root.display()))?;
    let (tx, rx) = watch::channel(Arc::new(first));
    let task = tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            let (root, cfg) = (sysfs_root.clone(), config.clone());
            match tokio::task::spawn_blocking(move || discover(&root, &cfg)).await {
                Ok(Ok(next)) => {
                    tx.send_if_modified(|current| {
                        let changed = **current != next;
                        if changed {
                            *current = Arc::new(next);
                        }
                        changed
                    });
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "re-discovery failed; keeping the last inventory")
                }
                Err(e) => tracing::warn!(error = %e, "re-discovery task failed"),
            }
        }
    });
    Ok((rx, task))
}
