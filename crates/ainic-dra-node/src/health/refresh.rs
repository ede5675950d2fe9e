//! The refresh loop: rediscovers sysfs when the kernel says something
//! changed (netlink link events, uevents); hands a changed inventory to
//! everyone who follows it (driver, publisher) and publishes a health
//! report every refresh interval (the stream's heartbeat).
//!
//! Each tick also reads the PFs' hardware error counters
//! ([`super::counters`]) before the report, so the counters are sampled
//! once per refresh interval and a device crossing a threshold is reported
//! at that tick.
//!
//! Two safety nets catch what no event announces while both event sources
//! run: every rescan interval a cheap re-read of the facts events do not
//! cover ([`topology::recheck`], about 0.2 ms on an 8 PF × 256 VF node),
//! which rediscovers only if one moved; and every full-rescan interval a
//! full rediscovery (about 230 ms there), for the VF facts the cheap one
//! leaves out. Without both event sources it rediscovers every refresh
//! interval, as nothing else would tell it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ainic_dra_daemon::Tasks;
use dra_model::health::Verdicts;
use tokio::sync::{mpsc, watch};
use topology::{DiscoveryConfig, Inventory, Recheck};

use super::counters::CounterHealth;
use super::{HealthReport, assess};
use crate::http::metrics::Metrics;
use crate::publisher::{LinkEvent, next_event, settle};

/// Keeps the inventory and the health report fresh.
pub(crate) struct Refresher {
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
    /// Kernel uevents of PCI, net and RDMA devices ([`crate::uevents`]).
    pub uevents: Option<mpsc::Receiver<()>>,
    /// Time between cheap rechecks while both event sources run.
    pub rescan_every: Duration,
    /// Longest time between two full discoveries while both event sources
    /// run.
    pub full_rescan_every: Duration,
    /// Health from the PFs' hardware counters; `None` when turned off.
    pub counters: Option<CounterHealth>,
    /// The counters' clock starts here.
    pub started: tokio::time::Instant,
}

/// What a refresh tick does besides reporting health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TickWork {
    /// Nothing: the events keep the inventory fresh.
    Nothing,
    /// The cheap recheck ([`topology::recheck`]).
    Recheck,
    /// A full discovery.
    Rediscover,
}

/// The safety nets' intervals and how long ago each last ran.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rescans {
    /// Time since the last recheck or full discovery.
    pub since_check: Duration,
    /// Time since the last full discovery.
    pub since_full: Duration,
    /// `--rescan-interval`.
    pub check_every: Duration,
    /// `--full-rescan-interval`.
    pub full_every: Duration,
}

/// What a tick does: rediscover without both event sources (`events`
/// false) or once the full rescan is due, else recheck once the rescan is
/// due.
pub(crate) fn tick_work(events: bool, r: Rescans) -> TickWork {
    if !events || r.since_full >= r.full_every {
        TickWork::Rediscover
    } else if r.since_check >= r.check_every {
        TickWork::Recheck
    } else {
        TickWork::Nothing
    }
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
    pub(crate) fn report(&self) {
        let counters = (self.counters.as_ref())
            .map(CounterHealth::conditions)
            .unwrap_or_default();
        let report = assess(&self.inventory.borrow(), &counters, now());
        self.metrics.set_devices(&report.counts());
        self.reports.send_replace(Arc::new(report));
    }

    /// Reads the hardware counters of the current inventory's PFs.
    pub(crate) async fn poll_counters(&mut self) {
        let Some(counters) = self.counters.as_mut() else {
            return;
        };
        let inventory = self.inventory.borrow().clone();
        counters.poll(&inventory, self.started.elapsed()).await;
    }

    /// One refresh: discover, replace the inventory if it changed, report.
    /// A failed discovery keeps the last inventory and logs why.
    pub(crate) async fn refresh(&self) {
        let root = self.sysfs_root.clone();
        let config = self.discovery.clone();
        let began = std::time::Instant::now();
        let found = tokio::task::spawn_blocking(move || topology::discover(&root, &config)).await;
        match found {
            Ok(Ok(inventory)) => {
                tracing::debug!(took = ?began.elapsed(), "rediscovered");
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

    /// The cheap recheck of the held inventory; true when nothing moved
    /// (the health report is then re-sent as on any tick).
    async fn recheck(&self) -> bool {
        let root = self.sysfs_root.clone();
        let held = self.inventory.borrow().clone();
        match tokio::task::spawn_blocking(move || topology::recheck(&root, &held)).await {
            Ok(Recheck::Unchanged) => {
                tracing::debug!("rescan: nothing changed");
                self.report();
                true
            }
            Ok(Recheck::Changed { function, what }) => {
                tracing::info!(%function, what, "rescan found a change no event announced; rediscovering");
                false
            }
            Err(error) => {
                tracing::error!(%error, "rescan task failed; rediscovering");
                false
            }
        }
    }

    /// Refreshes forever: rediscovers after each burst of kernel events
    /// and as [`tick_work`] says, reports health every interval.
    ///
    /// The safety nets are timed by the ticks' own instants (a multiple of
    /// the interval apart), not by when the work ended, so a rescan due
    /// every 600 s with 10 s ticks runs every 600 s, not every 610 s.
    pub(crate) async fn run(mut self) {
        let mut ticks = tokio::time::interval(self.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let first = ticks.tick().await;
        let mut links = self.links.take();
        let mut uevents = self.uevents.take();
        let (mut last_check, mut last_full) = (first, first);
        loop {
            let began = tokio::select! {
                at = ticks.tick() => {
                    crate::faults::fail(crate::faults::Point::RefreshTick);
                    self.poll_counters().await;
                    let rescans = Rescans {
                        since_check: at.duration_since(last_check),
                        since_full: at.duration_since(last_full),
                        check_every: self.rescan_every,
                        full_every: self.full_rescan_every,
                    };
                    match tick_work(links.is_some() && uevents.is_some(), rescans) {
                        TickWork::Nothing => {
                            self.report();
                            continue;
                        }
                        TickWork::Recheck => {
                            last_check = at;
                            if self.recheck().await {
                                continue;
                            }
                        }
                        TickWork::Rediscover => {}
                    }
                    at
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
                    tokio::time::Instant::now()
                }
                event = next_event(&mut uevents) => {
                    if event.is_none() {
                        tracing::warn!("uevents ended; rediscovering every refresh interval");
                        uevents = None;
                        continue;
                    }
                    tracing::debug!("uevent");
                    settle(&mut uevents, LINK_SETTLE).await;
                    tokio::time::Instant::now()
                }
            };
            self.refresh().await;
            (last_check, last_full) = (began, began);
        }
    }
}

/// What [`spawn`] hands on: the health reports for the kubelet,
/// the counter health verdicts the publisher taints by, and the counter
/// health Events for the Node (`None` without counter health).
pub(crate) struct Followers {
    pub(crate) reports: watch::Receiver<Arc<HealthReport>>,
    pub(crate) verdicts: watch::Receiver<Arc<Verdicts>>,
    pub(crate) health_events: Option<mpsc::Receiver<super::counters::HealthEvent>>,
}

/// The refresh loop (health reports, the NICs' error counters and the
/// inventory), on a task of its own, after a first read of the counters
/// (their baseline: rates from the first tick on).
pub(crate) async fn spawn(
    config: &crate::NodeConfig,
    discovery: DiscoveryConfig,
    inventory: watch::Sender<Arc<Inventory>>,
    metrics: &Arc<Metrics>,
    tasks: &Tasks,
) -> Followers {
    let (reports_tx, reports) = watch::channel(Arc::default());
    let (counters, verdicts, health_events) = match config.counter_health.clone() {
        Some(policy) => {
            let (counters, followers) = CounterHealth::new(
                config.sysfs_root.clone(),
                &config.scope.driver,
                policy,
                metrics.clone(),
            );
            (Some(counters), followers.verdicts, Some(followers.events))
        }
        None => (None, watch::channel(Arc::default()).1, None),
    };
    let mut refresher = Refresher {
        sysfs_root: config.sysfs_root.clone(),
        discovery,
        interval: config.refresh_every,
        inventory,
        reports: reports_tx,
        metrics: metrics.clone(),
        links: subscribe_links(),
        uevents: subscribe_uevents(),
        rescan_every: config.rescan_every,
        full_rescan_every: config.full_rescan_every,
        counters,
        started: tokio::time::Instant::now(),
    };
    refresher.poll_counters().await;
    refresher.report();
    tasks.spawn_critical("refresher", refresher.run());
    Followers {
        reports,
        verdicts,
        health_events,
    }
}

/// Kernel link events for the refresher; `None` (logged) where the host
/// gives no netlink socket, leaving the periodic refresh alone.
fn subscribe_links() -> Option<mpsc::Receiver<LinkEvent>> {
    use crate::publisher::LinkSource;
    match crate::publisher::NetlinkLinks.subscribe() {
        Ok(links) => Some(links),
        Err(error) => {
            tracing::warn!(%error, "no netlink link events; refreshing on the interval only");
            None
        }
    }
}

fn subscribe_uevents() -> Option<mpsc::Receiver<()>> {
    match crate::uevents::subscribe() {
        Ok(events) => Some(events),
        Err(error) => {
            tracing::warn!(%error, "no uevents; rediscovering every refresh interval");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_both_event_sources_a_tick_rechecks_when_due_and_rediscovers_when_the_full_rescan_is() {
        let s = Duration::from_secs;
        let at = |since_check, since_full| Rescans {
            since_check: s(since_check),
            since_full: s(since_full),
            check_every: s(600),
            full_every: s(3600),
        };
        assert_eq!(tick_work(true, at(10, 10)), TickWork::Nothing);
        assert_eq!(tick_work(true, at(600, 600)), TickWork::Recheck);
        assert_eq!(tick_work(true, at(10, 3600)), TickWork::Rediscover);
        assert_eq!(tick_work(true, at(600, 3600)), TickWork::Rediscover);
        assert_eq!(
            tick_work(false, at(10, 10)),
            TickWork::Rediscover,
            "no events: every tick"
        );
        let every_second = Rescans {
            check_every: s(1),
            full_every: s(1),
            ..at(1, 1)
        };
        assert_eq!(
            tick_work(true, every_second),
            TickWork::Rediscover,
            "--full-rescan-interval 1: every tick"
        );
    }
}
