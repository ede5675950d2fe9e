//! The refresh loop: rediscovers sysfs when the kernel says something
//! changed (netlink link events, uevents) and, as a safety net, every
//! rescan interval; hands a changed inventory to everyone who follows it
//! (driver, publisher) and publishes a health report every refresh
//! interval (the stream's heartbeat). Without both event sources it
//! rediscovers every refresh interval, as nothing else would tell it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, watch};
use topology::{DiscoveryConfig, Inventory};

use super::{HealthReport, assess};
use crate::node::http::metrics::Metrics;
use crate::node::publisher::{LinkEvent, next_event, settle};

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
    /// Kernel uevents of PCI, net and RDMA devices ([`crate::node::uevents`]).
    pub uevents: Option<mpsc::Receiver<()>>,
    /// Longest time between two discoveries while both event sources run.
    pub rescan_every: Duration,
}

/// Whether a refresh tick rediscovers: always without both event sources,
/// else once the last discovery is `rescan_every` old.
pub fn rescan_due(events: bool, since_last: Duration, rescan_every: Duration) -> bool {
    !events || since_last >= rescan_every
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

    /// Refreshes forever: rediscovers after each burst of kernel events
    /// and when [`rescan_due`], reports health every interval.
    pub async fn run(mut self) {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        let mut links = self.links.take();
        let mut uevents = self.uevents.take();
        let mut last = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = ticks.tick() => {
                    let events = links.is_some() && uevents.is_some();
                    if !rescan_due(events, last.elapsed(), self.rescan_every) {
                        self.report();
                        continue;
                    }
                }
                event = next_event(&mut links) => {
                    match event {
                        Some(event) => {
                            tracing::debug!(ifname = %event.ifname, up = event.up, "link event");
                            settle(&mut links, LINK_SETTLE).await;
                        }
                        None => {
                            tracing::warn!("netlink link events ended; rediscovering every refresh interval");
                            links = None;
                            continue;
                        }
                    }
                }
                event = next_event(&mut uevents) => {
                    if event.is_none() {
                        tracing::warn!("uevents ended; rediscovering every refresh interval");
                        uevents = None;
                        continue;
                    }
                    tracing::debug!("uevent");
                    settle(&mut uevents, LINK_SETTLE).await;
                }
            }
            self.refresh().await;
            last = tokio::time::Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_both_event_sources_a_tick_rediscovers_only_once_the_rescan_is_due() {
        let (s, rescan) = (Duration::from_secs, Duration::from_secs(600));
        assert!(!rescan_due(true, s(10), rescan));
        assert!(rescan_due(true, s(600), rescan));
        assert!(rescan_due(false, s(10), rescan), "no events: every tick");
        assert!(
            rescan_due(true, s(1), s(1)),
            "--rescan-interval 1: every tick"
        );
    }
}
