//! NIC health from hardware error counters: per-PF counter rates held
//! against thresholds, with hysteresis, as a pure state machine.
//!
//! The node agent reads the counters of every PF port
//! ([`topology::read_counters`]) each refresh interval and hands them to a
//! [`CounterMonitor`] with the time of the read. For each counter the
//! monitor keeps the samples of the last window and turns them into a rate
//! per minute: the increase over the window, divided by the window (or by
//! the time covered, when longer), so a fresh start or a short history
//! never inflates a rate.
//!
//! A device's level is the highest any of its counters crosses
//! ([`Threshold`]): `degraded` or `unhealthy`. It rises at once, on the
//! first read that crosses; it falls only when that level has not been
//! crossed for the quiet period ([`HealthPolicy::quiet`]), to the highest
//! level crossed within it. So a counter that stops growing clears after
//! about window + quiet period, and one that flaps (errors, calm, errors)
//! keeps its device down instead of toggling it.
//!
//! Bad input never makes a device look better than it is: a counter that
//! goes missing, turns to garbage, cannot be read, goes backwards (a
//! driver reload resets it: its history starts again) or sits at the most
//! its width can hold holds the device at its level (the quiet period
//! starts again once the counter reads well); a counter that never read
//! well is simply not one the driver provides, and is left out. VFs share
//! their PF's port: their level is the PF's ([`Verdicts`] is keyed by PF).

mod monitor;
mod policy;
mod window;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use topology::PciAddress;

pub use monitor::{CounterMonitor, Poll, Problem, ProblemKind, Transition};
pub use policy::{
    DEFAULT_QUIET, DEFAULT_WINDOW, HealthConfigError, HealthPolicy, Threshold, ThresholdSpec,
    default_thresholds,
};

/// How well a device is doing by its counters, worst last.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// No counter crosses a threshold.
    #[default]
    Healthy,
    /// A counter crosses its `degraded` threshold: still usable, worth a
    /// look (an informational taint where the release has effect `None`).
    Degraded,
    /// A counter crosses its `unhealthy` threshold: new claims kept away
    /// (taint `NoSchedule`), reported UNHEALTHY to the kubelet.
    Unhealthy,
}

impl Level {
    /// `healthy`, `degraded` or `unhealthy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Healthy => "healthy",
            Level::Degraded => "degraded",
            Level::Unhealthy => "unhealthy",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A counter seen above a threshold: which, where, how fast, against what.
#[derive(Clone, Debug, PartialEq)]
pub struct Crossing {
    /// The counter's file name, e.g. `symbol_error`.
    pub counter: String,
    /// The port or netdev, e.g. `rocep4s0/1`, `enp4s0`.
    pub source: String,
    /// Its rate, per minute, over the window.
    pub per_minute: f64,
    /// The threshold crossed, per minute.
    pub threshold: f64,
    /// The level of that threshold.
    pub level: Level,
    /// The window the rate is measured over.
    pub window: Duration,
}

impl Crossing {
    /// How far over its threshold: what picks one cause among several.
    fn ratio(&self) -> f64 {
        self.per_minute / self.threshold
    }
}

impl fmt::Display for Crossing {
    /// `symbol_error of rocep4s0/1 at 120/min over the last 60s (unhealthy at 60/min)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} at {}/min over the last {}s ({} at {}/min)",
            self.counter,
            self.source,
            rate(self.per_minute),
            self.window.as_secs(),
            self.level,
            rate(self.threshold),
        )
    }
}

/// A rate for people: whole when it is, else one decimal.
pub fn rate(per_minute: f64) -> String {
    if (per_minute - per_minute.round()).abs() < 0.05 {
        format!("{per_minute:.0}")
    } else {
        format!("{per_minute:.1}")
    }
}

/// A device below healthy, and why.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    /// Degraded or unhealthy.
    pub level: Level,
    /// The crossing that holds it there (the latest one seen).
    pub cause: Crossing,
    /// When it entered this level (the monitor's clock).
    pub since: Duration,
}

/// What the published device model needs of a device's counter health:
/// its level and the counter behind it (a taint's value).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Degraded or unhealthy.
    pub level: Level,
    /// The counter's file name, e.g. `symbol_error`.
    pub counter: String,
}

/// The verdicts of every PF below healthy, by PF address (a VF takes its
/// PF's). Changes only when a device changes level or cause, so following
/// it costs nothing while nothing happens.
pub type Verdicts = BTreeMap<PciAddress, Verdict>;

#[cfg(test)]
mod tests;
