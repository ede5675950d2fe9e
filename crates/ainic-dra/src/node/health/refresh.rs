//! The refresh loop: re-reads sysfs every interval (no busy polling), hands
//! a changed inventory to everyone who follows it (driver, publisher) and
//! publishes a health report each time (the stream's heartbeat).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use topology::{DiscoveryConfig, Inventory};

use super::{HealthReport, assess};
use crate::node::http::metrics::Metrics;

/// Keeps the inventory and the health report fresh.
pub struct Refresher {
    /// Root of sysfs.
    pub sysfs_root: PathBuf,
    /// What discovery looks for.
    pub discovery: DiscoveryConfig,
    /// Time between refreshes.
    pub interval: Duration,
    /// Followers of the inventory.
    pub inventory: watch::Sender<Arc<Inventory>>,
    /// Followers of the health report.
    pub reports: watch::Sender<Arc<HealthReport>>,
    /// Device-state gauges.
    pub metrics: Arc<Metrics>,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl Refresher {
    /// Publishes the health of the current inventory.
    pub fn report(&self) {
        let report = assess(&self.inventory.borrow(), now());
        self.metrics.set_devices(&report.counts());
        self.reports.send_replace(Arc::new(report));
    }

    /// One refresh: discover, replace the inventory if it changed, report.
    /// A failed discovery keeps the last inventory and logs why.
    pub async fn refresh(&self) {
        let root = self.sysfs_root.clone();
        let config = self.discovery.clone();
        let found = tokio::task::spawn_blocking(move || topology::discover(&root, &config)).await;
        match found {
            Ok(Ok(inventory)) => {
                self.inventory.send_if_modified(|current| {
                    let changed = **current != inventory;
                    if changed {
                        tracing::info!(nics = inventory.nics.len(), "inventory changed");
                        *current = Arc::new(inventory);
                    }
                    changed
                });
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "inventory refresh failed; keeping the last one")
            }
            Err(error) => tracing::error!(%error, "inventory refresh task failed"),
        }
        self.report();
    }

    /// Refreshes forever, every interval.
    pub async fn run(self) {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            self.refresh().await;
        }
    }
}
