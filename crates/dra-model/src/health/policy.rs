//! The thresholds, window and quiet period of counter health, validated
//! from flags (`--health-threshold COUNTER=DEGRADED,UNHEALTHY`).

use std::str::FromStr;
use std::time::Duration;

use topology::CounterName;

use super::Level;

/// The window rates are measured over, by default.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
/// How long a level must go uncrossed before a device leaves it, by default.
pub const DEFAULT_QUIET: Duration = Duration::from_secs(300);

/// One counter's thresholds, per minute; `None` for a level it never
/// reaches.
#[derive(Clone, Debug, PartialEq)]
pub struct Threshold {
    /// The counter.
    pub counter: CounterName,
    /// The rate at which a device is degraded.
    pub degraded: Option<f64>,
    /// The rate at which a device is unhealthy.
    pub unhealthy: Option<f64>,
}

impl Threshold {
    /// The highest level `per_minute` reaches, and that level's threshold.
    pub fn level(&self, per_minute: f64) -> Option<(Level, f64)> {
        let reached = |t: Option<f64>| t.filter(|t| per_minute >= *t);
        reached(self.unhealthy)
            .map(|t| (Level::Unhealthy, t))
            .or_else(|| reached(self.degraded).map(|t| (Level::Degraded, t)))
    }
}

/// The thresholds used unless a flag replaces them: a starting point for
/// 400G RoCE links, per minute over the window. Carrier changes and link
/// downs count flaps (a flap is two carrier changes: down, up); symbol and
/// receive errors are bursts of bit errors the FEC did not correct; link
/// integrity errors and buffer overruns mean a port that cannot keep its
/// link or its receive buffers.
pub fn default_thresholds() -> Vec<Threshold> {
    [
        ("carrier_changes", 2.0, 6.0),
        ("link_downed", 1.0, 3.0),
        ("link_error_recovery", 1.0, 10.0),
        ("local_link_integrity_errors", 1.0, 10.0),
        ("excessive_buffer_overrun_errors", 1.0, 10.0),
        ("symbol_error", 10.0, 600.0),
        ("port_rcv_errors", 10.0, 600.0),
    ]
    .into_iter()
    .map(|(name, degraded, unhealthy)| Threshold {
        counter: name.parse().expect("the default counter names parse"),
        degraded: Some(degraded),
        unhealthy: Some(unhealthy),
    })
    .collect()
}

/// One `--health-threshold` value: `COUNTER=DEGRADED,UNHEALTHY` (rates per
/// minute, `-` for a level never reached) or `COUNTER=off`.
#[derive(Clone, Debug, PartialEq)]
pub struct ThresholdSpec {
    /// The counter.
    pub counter: CounterName,
    /// `(degraded, unhealthy)`, or `None` for `off`.
    pub levels: Option<(Option<f64>, Option<f64>)>,
}

impl FromStr for ThresholdSpec {
    type Err = HealthConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| HealthConfigError::Threshold {
            spec: s.to_string(),
            why: why.to_string(),
        };
        let (counter, levels) = s
            .split_once('=')
            .ok_or_else(|| bad("expected COUNTER=DEGRADED,UNHEALTHY or COUNTER=off"))?;
        let counter: CounterName = counter.trim().parse().map_err(|e| bad(&format!("{e}")))?;
        if levels.trim() == "off" {
            return Ok(ThresholdSpec {
                counter,
                levels: None,
            });
        }
        let (degraded, unhealthy) = levels
            .split_once(',')
            .ok_or_else(|| bad("expected two rates per minute, DEGRADED,UNHEALTHY (- for none)"))?;
        let degraded = per_minute(degraded).map_err(|why| bad(&why))?;
        let unhealthy = per_minute(unhealthy).map_err(|why| bad(&why))?;
        match (degraded, unhealthy) {
            (None, None) => Err(bad("both levels are -: write COUNTER=off")),
            (Some(d), Some(u)) if d > u => Err(bad("the degraded rate is above the unhealthy one")),
            _ => Ok(ThresholdSpec {
                counter,
                levels: Some((degraded, unhealthy)),
            }),
        }
    }
}

/// A rate per minute: a positive decimal, or `-` for none.
fn per_minute(s: &str) -> Result<Option<f64>, String> {
    let s = s.trim();
    if s == "-" {
        return Ok(None);
    }
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(Some(v)),
        _ => Err(format!("{s:?} is not a rate per minute above 0 (or -)")),
    }
}

/// Why the counter health settings were refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HealthConfigError {
    /// A `--health-threshold` value is malformed.
    #[error("invalid health threshold {spec:?}: {why}")]
    Threshold {
        /// The value as given.
        spec: String,
        /// What is wrong.
        why: String,
    },
    /// A duration below one second.
    #[error("invalid {what}: must be at least one second")]
    TooShort {
        /// Which setting.
        what: &'static str,
    },
}

/// Validated counter health settings.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthPolicy {
    thresholds: Vec<Threshold>,
    window: Duration,
    quiet: Duration,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        HealthPolicy {
            thresholds: default_thresholds(),
            window: DEFAULT_WINDOW,
            quiet: DEFAULT_QUIET,
        }
    }
}

impl HealthPolicy {
    /// The defaults, with each of `specs` replacing (or, `off`, removing)
    /// its counter's thresholds or adding a counter, in order.
    pub fn new(
        specs: &[ThresholdSpec],
        window: Duration,
        quiet: Duration,
    ) -> Result<Self, HealthConfigError> {
        if window < Duration::from_secs(1) {
            return Err(HealthConfigError::TooShort {
                what: "health window",
            });
        }
        if quiet < Duration::from_secs(1) {
            return Err(HealthConfigError::TooShort {
                what: "health quiet period",
            });
        }
        let mut thresholds = default_thresholds();
        for spec in specs {
            thresholds.retain(|t| t.counter != spec.counter);
            if let Some((degraded, unhealthy)) = spec.levels {
                thresholds.push(Threshold {
                    counter: spec.counter.clone(),
                    degraded,
                    unhealthy,
                });
            }
        }
        Ok(HealthPolicy {
            thresholds,
            window,
            quiet,
        })
    }

    /// The thresholds, one per counter.
    pub fn thresholds(&self) -> &[Threshold] {
        &self.thresholds
    }

    /// The counters to read, in the order of [`HealthPolicy::thresholds`]
    /// (a [`topology::CounterPlan`] made of them indexes both).
    pub fn counter_names(&self) -> Vec<CounterName> {
        self.thresholds.iter().map(|t| t.counter.clone()).collect()
    }

    /// The window rates are measured over.
    pub fn window(&self) -> Duration {
        self.window
    }

    /// How long a level must go uncrossed before a device leaves it.
    pub fn quiet(&self) -> Duration {
        self.quiet
    }
}
