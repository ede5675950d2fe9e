//! The state machine: counter reads in, device levels and transitions out.
//!
//! Per PF, [`Track`] remembers when each level was last crossed. Its
//! level is the highest level crossed within the quiet period: it rises on
//! the read that crosses, and falls once the quiet period passes without
//! that level being crossed. A read that cannot tell (a counter gone bad
//! after reading well, reset, saturated, or a fresh baseline) counts as a
//! crossing of the level the device is at: it holds, never lowers.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use topology::{CounterPlan, CounterReading, PciAddress};

use super::window::{Sampled, Window};
use super::{Condition, Crossing, HealthPolicy, Level, Verdict, Verdicts};

/// Why a counter gave no usable value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProblemKind {
    /// Its file is gone.
    Missing,
    /// Its file holds no number.
    Invalid,
    /// Its file cannot be read.
    Unreadable,
    /// It sits at the most its width holds: new errors would not show.
    Saturated,
    /// It never read as a number: the driver does not provide it, and it
    /// is not watched (said once).
    NotProvided,
    /// It went backwards (said each time; it needs no fixing).
    Reset,
    /// It reads well (after any of the above but [`Self::Reset`]).
    Fixed,
}

/// A change in what a counter gives, worth one log line.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    /// The PF.
    pub function: PciAddress,
    /// The port or netdev.
    pub source: String,
    /// The counter's file name.
    pub counter: String,
    /// What happened.
    pub kind: ProblemKind,
    /// In words.
    pub detail: String,
}

/// A device changing level.
#[derive(Clone, Debug, PartialEq)]
pub struct Transition {
    /// The PF (its VFs change with it).
    pub function: PciAddress,
    /// The level left.
    pub from: Level,
    /// The level entered.
    pub to: Level,
    /// What holds it at the new level (`None` when healthy).
    pub cause: Option<Crossing>,
    /// What held it at the old level (`None` when it was healthy).
    pub was: Option<Crossing>,
    /// When (the monitor's clock).
    pub at: Duration,
}

/// What one round of reads did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Poll {
    /// Devices that changed level, by PF address.
    pub transitions: Vec<Transition>,
    /// Counters that went bad or came back.
    pub problems: Vec<Problem>,
}

/// The last time a level was crossed, and by what.
#[derive(Clone, Debug, PartialEq)]
struct Seen {
    at: Duration,
    cause: Crossing,
}

/// One PF's state.
#[derive(Clone, Debug, Default)]
struct Track {
    level: Level,
    since: Duration,
    /// Last crossing of `degraded` (or worse), and of `unhealthy`.
    degraded: Option<Seen>,
    unhealthy: Option<Seen>,
}

/// What one round of reads says of one PF.
#[derive(Debug)]
struct Observed {
    level: Level,
    cause: Option<Crossing>,
    /// Every counter that ever read well gave a usable rate.
    complete: bool,
}

impl Default for Observed {
    fn default() -> Self {
        Observed {
            level: Level::Healthy,
            cause: None,
            complete: true,
        }
    }
}

impl Observed {
    /// Keeps the worst crossing; among equals, the one furthest over.
    fn consider(&mut self, crossing: Crossing) {
        let worse = crossing.level > self.level
            || (crossing.level == self.level
                && self
                    .cause
                    .as_ref()
                    .is_some_and(|c| crossing.ratio() > c.ratio()));
        if worse {
            self.level = crossing.level;
            self.cause = Some(crossing);
        }
    }
}

impl Track {
    fn seen(&self, level: Level) -> Option<&Seen> {
        match level {
            Level::Healthy => None,
            Level::Degraded => self.degraded.as_ref(),
            Level::Unhealthy => self.unhealthy.as_ref(),
        }
    }

    /// Records what was observed at `now`; the new level and its cause
    /// when the level changed.
    fn step(
        &mut self,
        function: PciAddress,
        now: Duration,
        obs: Observed,
        quiet: Duration,
    ) -> Option<Transition> {
        let was = self.condition().map(|c| c.cause);
        if let Some(cause) = &obs.cause {
            let seen = || {
                Some(Seen {
                    at: now,
                    cause: cause.clone(),
                })
            };
            if obs.level == Level::Unhealthy {
                self.unhealthy = seen();
            }
            self.degraded = seen();
        }
        if !obs.complete {
            // Cannot tell: the current level counts as crossed now.
            for seen in [&mut self.degraded, &mut self.unhealthy] {
                if let Some(seen) = seen.as_mut().filter(|s| s.at.saturating_add(quiet) > now) {
                    seen.at = now;
                }
            }
        }
        let within = |s: &Seen| s.at == now || now.saturating_sub(s.at) < quiet;
        let target = [Level::Unhealthy, Level::Degraded]
            .into_iter()
            .find(|l| self.seen(*l).is_some_and(within))
            .unwrap_or(Level::Healthy);
        if target == self.level {
            return None;
        }
        let from = self.level;
        self.level = target;
        self.since = now;
        Some(Transition {
            function,
            from,
            to: target,
            cause: self.seen(target).map(|s| s.cause.clone()),
            was,
            at: now,
        })
    }

    fn condition(&self) -> Option<Condition> {
        self.seen(self.level).map(|s| Condition {
            level: self.level,
            cause: s.cause.clone(),
            since: self.since,
        })
    }
}

/// Counter windows and device levels across rounds of reads.
#[derive(Debug)]
pub struct CounterMonitor {
    policy: HealthPolicy,
    windows: HashMap<(PciAddress, String, usize), Window>,
    devices: BTreeMap<PciAddress, Track>,
}

impl CounterMonitor {
    /// A monitor judging by `policy`; every device starts healthy.
    pub fn new(policy: HealthPolicy) -> Self {
        CounterMonitor {
            policy,
            windows: HashMap::new(),
            devices: BTreeMap::new(),
        }
    }

    /// The policy it judges by.
    pub fn policy(&self) -> &HealthPolicy {
        &self.policy
    }

    /// Takes one round of reads made at `now` (any clock that only moves
    /// forward): `readings[i]` is what `plan.counters[i]` held, the plan
    /// made of [`HealthPolicy::counter_names`]. PFs no longer in the plan
    /// are forgotten.
    pub fn observe(
        &mut self,
        now: Duration,
        plan: &CounterPlan,
        readings: &[CounterReading],
    ) -> Poll {
        let mut poll = Poll::default();
        let mut observed: BTreeMap<PciAddress, Observed> = plan
            .functions
            .iter()
            .map(|f| (*f, Observed::default()))
            .collect();
        let mut seen = HashSet::new();
        for (planned, reading) in plan.counters.iter().zip(readings) {
            let Some(threshold) = self.policy.thresholds().get(planned.counter) else {
                continue;
            };
            let key = (planned.function, planned.source.clone(), planned.counter);
            let window = self.windows.entry(key.clone()).or_default();
            seen.insert(key);
            let sampled = window.push(now, reading, &threshold.counter, self.policy.window());
            let problem = |kind, detail| Problem {
                function: planned.function,
                source: planned.source.clone(),
                counter: threshold.counter.label().to_string(),
                kind,
                detail,
            };
            let obs = observed.entry(planned.function).or_default();
            let mut now_bad = None;
            match sampled {
                Sampled::Rate {
                    per_minute,
                    saturated,
                } => {
                    if let Some((level, at)) = threshold.level(per_minute) {
                        obs.consider(Crossing {
                            counter: threshold.counter.label().to_string(),
                            source: planned.source.clone(),
                            per_minute,
                            threshold: at,
                            level,
                            window: self.policy.window(),
                        });
                    }
                    if saturated {
                        obs.complete = false;
                        now_bad = Some((ProblemKind::Saturated, "sits at the most it can hold: new errors do not show until the counters are reset".to_string()));
                    }
                }
                Sampled::Baseline => obs.complete = false,
                Sampled::NotProvided => {
                    let why =
                        "has never read as a number (the driver does not provide it): not watched";
                    now_bad = Some((ProblemKind::NotProvided, why.to_string()));
                }
                Sampled::Gap(kind, detail) => {
                    obs.complete = false;
                    now_bad = Some((kind, detail));
                }
            }
            match now_bad {
                Some((ProblemKind::Reset, detail)) => {
                    poll.problems.push(problem(ProblemKind::Reset, detail));
                }
                Some((kind, detail)) if window.problem != Some(kind) => {
                    window.problem = Some(kind);
                    poll.problems.push(problem(kind, detail));
                }
                Some(_) => {}
                None if window.problem.take().is_some() => {
                    poll.problems
                        .push(problem(ProblemKind::Fixed, "reads well again".into()));
                }
                None => {}
            }
        }
        self.windows.retain(|k, _| seen.contains(k));
        self.devices.retain(|f, _| observed.contains_key(f));
        let quiet = self.policy.quiet();
        for (function, obs) in observed {
            let track = self.devices.entry(function).or_default();
            poll.transitions
                .extend(track.step(function, now, obs, quiet));
        }
        poll
    }

    /// Every PF below healthy, with the crossing that holds it there.
    pub fn conditions(&self) -> BTreeMap<PciAddress, Condition> {
        (self.devices.iter())
            .filter_map(|(f, t)| t.condition().map(|c| (*f, c)))
            .collect()
    }

    /// Every PF below healthy, with the counter behind it.
    pub fn verdicts(&self) -> Verdicts {
        (self.conditions().into_iter())
            .map(|(f, c)| {
                let verdict = Verdict {
                    level: c.level,
                    counter: c.cause.counter,
                };
                (f, verdict)
            })
            .collect()
    }

    /// The last rate of every counter that has one: PF, port or netdev,
    /// counter file name, per minute.
    pub fn rates(&self) -> impl Iterator<Item = (PciAddress, &str, &str, f64)> {
        self.windows.iter().filter_map(|((f, source, i), w)| {
            let counter = self.policy.thresholds().get(*i)?.counter.label();
            Some((*f, source.as_str(), counter, w.per_minute?))
        })
    }
}
