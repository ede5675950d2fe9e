//! The publish loop: publish at start, then again whenever the followed
//! inventory changes, after bursts of link events, after nudges from the
//! API side (a watch saw our slices changed or deleted by someone else, or
//! the node's labels change), and on a periodic resync, until shutdown.
//!
//! Triggers come in on channels so any source can feed them: the agent's
//! refresh loop (a `watch` of the inventory), a netlink listener, API
//! watches or a test. A failed build or publish is logged and leaves the
//! last published slices in place; it is tried again after the backoff's
//! cap (jittered) and so on for ever, or sooner if another trigger comes.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::resource::v1::ResourceSlice;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, error, info, warn};

use super::netlink::{LinkSource, NetlinkLinks};
use super::{PublishOutcome, SlicePublisher};

/// A network link changed state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkEvent {
    /// Interface name (`ens1f0np0`, ...).
    pub ifname: String,
    /// Whether the link is now up (operationally).
    pub up: bool,
}

/// What makes the loop publish, and where it reports.
#[derive(Debug)]
pub struct RunOptions<T> {
    /// Period of the resync.
    pub resync_every: Duration,
    /// A followed value (the inventory): each change triggers a publish.
    pub follow: Option<watch::Receiver<T>>,
    /// Link events; a burst collapses into one publish.
    pub links: Option<mpsc::Receiver<LinkEvent>>,
    /// Quiet time after a link event before publishing.
    pub debounce: Duration,
    /// Nudges from the API side; a burst collapses into one publish.
    pub nudges: Option<mpsc::Receiver<()>>,
    /// Receives the result of every sync (tests, health reporting).
    pub reports: Option<mpsc::UnboundedSender<Result<PublishOutcome, String>>>,
}

impl<T> RunOptions<T> {
    /// Resync every `resync_every`, no other trigger, 500 ms debounce.
    pub fn new(resync_every: Duration) -> Self {
        Self {
            resync_every,
            follow: None,
            links: None,
            nudges: None,
            debounce: Duration::from_millis(500),
            reports: None,
        }
    }
}

/// Why a sync runs (for the logs).
#[derive(Debug, Clone, Copy)]
enum Trigger {
    Startup,
    Periodic,
    Changed,
    Link,
    Nudged,
    Retry,
    /// The server dropped a gated field: build again without its gate.
    Refused,
}

/// How one sync went.
#[derive(Clone, Copy)]
enum Synced {
    Ok,
    /// Worked, but a gate was refused: build and publish again at once.
    Again,
    Failed,
}

/// Publishes once.
async fn sync<F, T>(
    publisher: &mut SlicePublisher,
    build: &mut F,
    trigger: Trigger,
    options: &RunOptions<T>,
) -> Synced
where
    F: FnMut() -> anyhow::Result<Vec<ResourceSlice>>,
{
    debug!(?trigger, "building desired resource slices");
    let result = match build() {
        Ok(desired) => publisher
            .publish(&desired)
            .await
            .map_err(anyhow::Error::from),
        Err(e) => Err(e.context("failed to build the desired resource slices")),
    };
    if let Err(e) = &result {
        error!(
            ?trigger,
            error = format!("{e:#}"),
            "resource slices not published; keeping the last ones"
        );
    }
    let synced = match &result {
        Ok(outcome) if outcome.refused => Synced::Again,
        Ok(_) => Synced::Ok,
        Err(_) => Synced::Failed,
    };
    if let Some(reports) = &options.reports {
        let _ = reports.send(result.map_err(|e| format!("{e:#}")));
    }
    ainic_dra_daemon::memory::after_burst();
    synced
}

/// Waits for the next event; pending forever once there is no source.
pub(crate) async fn next_event<E>(events: &mut Option<mpsc::Receiver<E>>) -> Option<E> {
    match events {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Drains events that arrive within `debounce` of the previous one.
pub(crate) async fn settle<E: std::fmt::Debug>(
    events: &mut Option<mpsc::Receiver<E>>,
    debounce: Duration,
) {
    while let Ok(Some(event)) = tokio::time::timeout(debounce, next_event(events)).await {
        debug!(?event, "event while settling");
    }
}

/// Waits until `at`; pending forever when there is nothing to wait for.
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Waits for the followed value to change; pending forever once there is none.
async fn next_change<T>(follow: &mut Option<watch::Receiver<T>>) -> bool {
    match follow {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

/// Runs until `shutdown` completes; returns the publisher. `build` produces
/// the desired slices from the current inventory.
pub async fn run<F, T>(
    mut publisher: SlicePublisher,
    mut build: F,
    mut options: RunOptions<T>,
    shutdown: impl Future<Output = ()>,
) -> SlicePublisher
where
    F: FnMut() -> anyhow::Result<Vec<ResourceSlice>>,
{
    tokio::pin!(shutdown);
    let every = options.resync_every;
    let mut ticks = tokio::time::interval_at(Instant::now() + every, every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut links = options.links.take();
    let mut nudges = options.nudges.take();
    let mut follow = options.follow.take();
    let mut trigger = Trigger::Startup;
    'publishing: loop {
        let synced = sync(&mut publisher, &mut build, trigger, &options).await;
        let backoff = publisher.config().backoff;
        let retry = match synced {
            Synced::Ok => None,
            Synced::Again => Some(Instant::now()),
            Synced::Failed => Some(Instant::now() + backoff.jittered(backoff.max)),
        };
        let again = matches!(synced, Synced::Again);
        // Waits for the next trigger; a source that closes is dropped and
        // the wait goes on without it.
        trigger = loop {
            tokio::select! {
                biased;
                () = &mut shutdown => break 'publishing,
                alive = next_change(&mut follow) => match alive {
                    true => break Trigger::Changed,
                    false => follow = None,
                },
                event = next_event(&mut links) => match event {
                    Some(event) => {
                        debug!(ifname = %event.ifname, up = event.up, "link event");
                        settle(&mut links, options.debounce).await;
                        break Trigger::Link;
                    }
                    None => links = None,
                },
                nudge = next_event(&mut nudges) => match nudge {
                    Some(()) => {
                        settle(&mut nudges, options.debounce).await;
                        break Trigger::Nudged;
                    }
                    None => nudges = None,
                },
                () = until(retry) => break if again { Trigger::Refused } else { Trigger::Retry },
                _ = ticks.tick() => break Trigger::Periodic,
            }
        };
    }
    info!("resource slice publisher stopped");
    publisher
}

/// [`run`] on a plain task of its own: publishes at once, then follows
/// `inventory`, netlink link events (when the host allows a netlink
/// socket) and a resync every `resync_every`, until `shutdown`. The agent
/// wires [`run`] itself under its supervisor (`agent/wiring.rs`); this is
/// the publisher alone, as the publisher's own tests drive it.
pub fn spawn<F, T>(
    publisher: SlicePublisher,
    build: F,
    inventory: watch::Receiver<T>,
    resync_every: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<SlicePublisher>
where
    F: FnMut() -> anyhow::Result<Vec<ResourceSlice>> + Send + 'static,
    T: Send + Sync + 'static,
{
    let mut options = RunOptions::new(resync_every);
    options.follow = Some(inventory);
    options.links = match NetlinkLinks.subscribe() {
        Ok(links) => Some(links),
        Err(error) => {
            warn!(%error, "no netlink link events; relying on inventory changes and resyncs");
            None
        }
    };
    tokio::spawn(run(publisher, build, options, shutdown))
}
