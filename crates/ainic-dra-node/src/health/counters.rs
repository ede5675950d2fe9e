//! NIC health from hardware counters, on the refresh loop's ticks: reads
//! the PFs' port counters ([`topology::read_counters`], on the blocking
//! pool), hands them to the [`CounterMonitor`] with the time of the read,
//! and says what changed: one log line per transition and per counter
//! problem, the metrics, a Warning (or, on recovery, Normal) Event on the
//! Node per transition, and the verdicts the publisher taints by.
//!
//! Events are queued (a bounded channel, oldest kept) until the agent has
//! read its Node and can post them; the logs and metrics say the same at
//! once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dra_model::health::{
    Condition, CounterMonitor, HealthPolicy, Level, Poll, Problem, ProblemKind, Transition,
    Verdicts,
};
use tokio::sync::{mpsc, watch};
use topology::{CounterName, CounterPlan, Inventory, PciAddress};

use crate::http::metrics::Metrics;
use crate::node_events::EventType;

/// Event reason: a NIC's counters cross an `unhealthy` threshold.
pub(crate) const NIC_UNHEALTHY: &str = "NicUnhealthy";
/// Event reason: a NIC's counters cross a `degraded` threshold (or it
/// came down from unhealthy to degraded).
pub(crate) const NIC_DEGRADED: &str = "NicDegraded";
/// Event reason: a NIC's counters crossed no threshold for the quiet period.
pub(crate) const NIC_RECOVERED: &str = "NicRecovered";

/// Events waiting for the Node to be read; more are dropped (logged).
const QUEUED_EVENTS: usize = 64;

/// An Event to post on the Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthEvent {
    /// Warning, or Normal for a recovery.
    pub kind: EventType,
    /// [`NIC_UNHEALTHY`], [`NIC_DEGRADED`] or [`NIC_RECOVERED`].
    pub reason: &'static str,
    /// Which NIC, which counter crossed what, and what follows.
    pub note: String,
}

/// What the rest of the agent follows of counter health.
pub(crate) struct Followers {
    /// The verdicts the slices are tainted by; changes only on a transition.
    pub verdicts: watch::Receiver<Arc<Verdicts>>,
    /// The Events to post on the Node.
    pub events: mpsc::Receiver<HealthEvent>,
}

/// The counter side of health: monitor, plan, and where results go.
pub(crate) struct CounterHealth {
    sysfs_root: PathBuf,
    driver: String,
    monitor: CounterMonitor,
    names: Vec<CounterName>,
    plan: Arc<CounterPlan>,
    planned_for: Option<Arc<Inventory>>,
    verdicts: watch::Sender<Arc<Verdicts>>,
    events: mpsc::Sender<HealthEvent>,
    metrics: Arc<Metrics>,
}

impl CounterHealth {
    /// Judges the NICs below `sysfs_root` by `policy`, for `driver`'s taints.
    pub(crate) fn new(
        sysfs_root: PathBuf,
        driver: &str,
        policy: HealthPolicy,
        metrics: Arc<Metrics>,
    ) -> (Self, Followers) {
        let (verdicts, verdicts_rx) = watch::channel(Arc::default());
        let (events, events_rx) = mpsc::channel(QUEUED_EVENTS);
        let health = CounterHealth {
            sysfs_root,
            driver: driver.to_string(),
            names: policy.counter_names(),
            monitor: CounterMonitor::new(policy),
            plan: Arc::default(),
            planned_for: None,
            verdicts,
            events,
            metrics,
        };
        let followers = Followers {
            verdicts: verdicts_rx,
            events: events_rx,
        };
        (health, followers)
    }

    /// Reads every counter of `inventory`'s PFs and takes the result as of
    /// `now` (a monotonic clock: the agent's time since start).
    pub(crate) async fn poll(&mut self, inventory: &Arc<Inventory>, now: Duration) {
        if !self
            .planned_for
            .as_ref()
            .is_some_and(|p| Arc::ptr_eq(p, inventory))
        {
            self.plan = Arc::new(CounterPlan::new(inventory, &self.names));
            self.planned_for = Some(inventory.clone());
            self.metrics.clear_counter_rates();
        }
        let (root, plan) = (self.sysfs_root.clone(), self.plan.clone());
        let read = tokio::task::spawn_blocking(move || topology::read_counters(&root, &plan));
        match read.await {
            Ok(readings) => {
                let poll = self.monitor.observe(now, &self.plan, &readings);
                self.apply(&poll, inventory);
            }
            Err(error) => tracing::error!(%error, "counter read task failed"),
        }
    }

    /// Every PF below healthy, and why (for the health report).
    pub(crate) fn conditions(&self) -> BTreeMap<PciAddress, Condition> {
        self.monitor.conditions()
    }

    /// Logs, counts and announces what one poll found.
    fn apply(&self, poll: &Poll, inventory: &Inventory) {
        for problem in &poll.problems {
            log_problem(problem, &device_of(inventory, problem.function));
        }
        for t in &poll.transitions {
            let device = device_of(inventory, t.function);
            log_transition(t, &device, self.monitor.policy().quiet());
            self.metrics.nic_transition(&device.name, t);
            self.announce(self.event(t, &device));
        }
        for (f, source, counter, per_minute) in self.monitor.rates() {
            let device = device_of(inventory, f);
            (self.metrics).set_counter_rate(&device.name, source, counter, per_minute);
        }
        let conditions = self.monitor.conditions();
        for f in &self.plan.functions {
            let level = conditions.get(f).map_or(Level::Healthy, |c| c.level);
            self.metrics
                .set_nic_level(&device_of(inventory, *f).name, level);
        }
        let verdicts = self.monitor.verdicts();
        self.verdicts.send_if_modified(|held| {
            let changed = **held != verdicts;
            if changed {
                *held = Arc::new(verdicts);
            }
            changed
        });
    }

    fn announce(&self, event: HealthEvent) {
        if let Err(mpsc::error::TrySendError::Full(event)) = self.events.try_send(event) {
            tracing::warn!(reason = event.reason, note = %event.note, "too many health events waiting for the node to be read; this one is not posted");
        }
    }

    /// The Event of one transition.
    fn event(&self, t: &Transition, device: &Device) -> HealthEvent {
        let quiet = self.monitor.policy().quiet().as_secs();
        let nic = device.describe();
        let taint = |key: &str, effect: &str| {
            format!(
                "{}/{key}={}:{effect}",
                self.driver,
                t.cause.as_ref().map_or("", |c| c.counter.as_str())
            )
        };
        let (kind, reason, note) = match (t.to, &t.cause) {
            (Level::Unhealthy, Some(cause)) => (
                EventType::Warning,
                NIC_UNHEALTHY,
                format!(
                    "{nic} is unhealthy: {cause}. Its VFs with it: reported UNHEALTHY to the kubelet (pod status shows it) and tainted {} where DRADeviceTaints is on; healthy again after {quiet}s without crossing a threshold",
                    taint("unhealthy", "NoSchedule")
                ),
            ),
            (Level::Degraded, Some(cause)) => {
                let from = match t.from {
                    Level::Unhealthy => format!(" (no unhealthy rate for {quiet}s)"),
                    _ => String::new(),
                };
                let note = format!(
                    "{nic} is degraded{from}: {cause}. Its VFs with it: still allocatable, tainted {} where the release has effect None (1.35+) and DRADeviceTaints is on",
                    taint("degraded", "None")
                );
                (EventType::Warning, NIC_DEGRADED, note)
            }
            _ => {
                let was = t
                    .was
                    .as_ref()
                    .map_or(String::new(), |c| format!(" (it was {}: {c})", t.from));
                let note = format!(
                    "{nic} is healthy again: no counter crossed a threshold for {quiet}s{was}"
                );
                (EventType::Normal, NIC_RECOVERED, note)
            }
        };
        HealthEvent { kind, reason, note }
    }
}

/// A PF as messages name it.
struct Device {
    name: String,
    address: PciAddress,
    netdev: Option<String>,
}

impl Device {
    /// `NIC pf-0000-04-00-0 (0000:04:00.0, enp4s0)`.
    fn describe(&self) -> String {
        match &self.netdev {
            Some(ifname) => format!("NIC {} ({}, {ifname})", self.name, self.address),
            None => format!("NIC {} ({})", self.name, self.address),
        }
    }
}

fn device_of(inventory: &Inventory, address: PciAddress) -> Device {
    let nic = inventory.nic(address);
    Device {
        name: nic.map_or_else(|| address.to_string(), dra_model::names::device_name),
        address,
        netdev: nic.and_then(|n| n.netdevs.first()).map(|n| n.name.clone()),
    }
}

fn log_transition(t: &Transition, device: &Device, quiet: Duration) {
    let (name, pci, from, to) = (&device.name, t.function, t.from, t.to);
    match &t.cause {
        Some(c) if to > from => {
            tracing::warn!(device = %name, %pci, %from, %to, counter = %c.counter, source = %c.source, per_minute = c.per_minute, threshold = c.threshold, "NIC {to}: {c}")
        }
        Some(c) => {
            tracing::info!(device = %name, %pci, %from, %to, counter = %c.counter, source = %c.source, per_minute = c.per_minute, threshold = c.threshold, "NIC {to}: no {from} rate for {}s; {c}", quiet.as_secs())
        }
        None => {
            let was = t
                .was
                .as_ref()
                .map_or(String::new(), |c| format!(" (was {from}: {c})"));
            tracing::info!(device = %name, %pci, %from, %to, "NIC {to}: no counter crossed a threshold for {}s{was}", quiet.as_secs())
        }
    }
}

fn log_problem(p: &Problem, device: &Device) {
    let (name, source, counter) = (&device.name, &p.source, &p.counter);
    match p.kind {
        ProblemKind::NotProvided | ProblemKind::Reset | ProblemKind::Fixed => {
            tracing::info!(device = %name, source = %source, counter = %counter, "counter {counter} of {source}: {}", p.detail)
        }
        _ => {
            tracing::warn!(device = %name, source = %source, counter = %counter, "counter {counter} of {source}: {}; its NIC's level holds until it reads well", p.detail)
        }
    }
}

#[cfg(test)]
mod tests;
