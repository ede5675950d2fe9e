//! One counter's recent samples, and its rate over the window.

use std::collections::VecDeque;
use std::time::Duration;

use topology::{CounterBase, CounterName, CounterReading};

use super::monitor::ProblemKind;

/// What one read of a counter adds to what is known.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Sampled {
    /// Its rate per minute; `saturated` when the counter sits at the most
    /// its width holds, so further errors would not show.
    Rate { per_minute: f64, saturated: bool },
    /// The first value (after a start or a reset): no rate yet.
    Baseline,
    /// The counter has never read well: the driver does not provide it.
    NotProvided,
    /// It read well before and does not now.
    Gap(ProblemKind, String),
}

/// The samples of one counter: the oldest is the newest one at least a
/// window old, so the increase spans the whole window.
#[derive(Debug, Default)]
pub(crate) struct Window {
    samples: VecDeque<(Duration, u64)>,
    /// The problem last reported, so each is said once.
    pub(crate) problem: Option<ProblemKind>,
    /// The last rate computed, per minute.
    pub(crate) per_minute: Option<f64>,
}

impl Window {
    /// Adds the read made at `now`.
    pub(crate) fn push(
        &mut self,
        now: Duration,
        reading: &CounterReading,
        counter: &CounterName,
        window: Duration,
    ) -> Sampled {
        let value = match reading {
            CounterReading::Value(v) => *v,
            _ if self.samples.is_empty() => return Sampled::NotProvided,
            CounterReading::Missing => {
                return Sampled::Gap(ProblemKind::Missing, "the file is gone".into());
            }
            CounterReading::Invalid(text) => {
                return Sampled::Gap(
                    ProblemKind::Invalid,
                    format!("holds {text:?}, not a number"),
                );
            }
            CounterReading::Unreadable(why) => {
                return Sampled::Gap(ProblemKind::Unreadable, why.clone());
            }
        };
        if let Some(&(_, last)) = self.samples.back()
            && value < last
        {
            self.samples.clear();
            self.samples.push_back((now, value));
            self.per_minute = None;
            let why = format!(
                "went back from {last} to {value} (reset, e.g. a driver reload); its history starts again"
            );
            return Sampled::Gap(ProblemKind::Reset, why);
        }
        self.samples.push_back((now, value));
        if let Some(start) = now.checked_sub(window) {
            while self.samples.len() >= 2 && self.samples[1].0 <= start {
                self.samples.pop_front();
            }
        }
        if self.samples.len() < 2 {
            return Sampled::Baseline;
        }
        let (first_at, first) = self.samples[0];
        let covered = now.saturating_sub(first_at).max(window);
        let per_minute = (value - first) as f64 * 60.0 / covered.as_secs_f64();
        self.per_minute = Some(per_minute);
        let saturated = saturation_limit(counter) == Some(value);
        Sampled::Rate {
            per_minute,
            saturated,
        }
    }
}

/// The most a standard port counter holds (the widths of the IBTA
/// PortCounters attribute, which the kernel reads them from; they stop
/// there rather than wrap). `None` for the others (64-bit, or unknown).
pub(crate) fn saturation_limit(counter: &CounterName) -> Option<u64> {
    if counter.base() != CounterBase::Port || !counter.path().starts_with("counters/") {
        return None;
    }
    let bits = match counter.label() {
        "local_link_integrity_errors" | "excessive_buffer_overrun_errors" => 4,
        "link_downed"
        | "link_error_recovery"
        | "port_xmit_constraint_errors"
        | "port_rcv_constraint_errors" => 8,
        "symbol_error"
        | "port_rcv_errors"
        | "port_rcv_remote_physical_errors"
        | "port_rcv_switch_relay_errors"
        | "port_xmit_discards"
        | "VL15_dropped" => 16,
        _ => return None,
    };
    Some((1u64 << bits) - 1)
}
