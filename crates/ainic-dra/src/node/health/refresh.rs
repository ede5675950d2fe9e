//! The refresh loop: re-reads sysfs every interval (no busy polling), hands
//! a changed inventory to everyone who follows it (driver, publisher) and
//! publishes a health report each time (the stream's heartbeat).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, watch};
use topology::{DiscoveryConfig, Inventory};

use super::{HealthReport, assess};
use crate::node::http::metrics::Metrics;
use crate::node::publisher::LinkEvent;

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
    /// Kernel link events (netlink), when the host gives them: each burst
    /// triggers a refresh at once instead of at the next tick, so a link
    /// going down reaches health, slices and the classic plugin quickly.
    pub links: Option<mpsc::Receiver<LinkEvent>>,
}

/// How long to wait for a burst of link events to end before refreshing.
const LINK_SETTLE: Duration = Duration::from_millis(200);

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

    /// Refreshes forever, every interval and after each burst of link events.
    pub async fn run(mut self) {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        let mut links = self.links.take();
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                event = next_link_event(&mut links) => {
                    match event {
                        Some(event) => {
                            tracing::debug!(ifname = %event.ifname, up = event.up, "link event");
                            settle(links.as_mut()).await;
                        }
                        None => {
                            tracing::warn!("netlink link events ended; refreshing on the interval only");
                            links = None;
                            continue;
                        }
                    }
                }
            }
            self.refresh().await;
        }
    }
}

/// The next link event; pending forever when there is no source.
async fn next_link_event(links: &mut Option<mpsc::Receiver<LinkEvent>>) -> Option<LinkEvent> {
    match links {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Swallows the rest of a burst: returns once no event came for [`LINK_SETTLE`].
async fn settle(links: Option<&mut mpsc::Receiver<LinkEvent>>) {
    let Some(rx) = links else { return };
    while let Ok(Some(_)) = tokio::time::timeout(LINK_SETTLE, rx.recv()).await {}
}
