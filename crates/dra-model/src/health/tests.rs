use std::collections::HashMap;

use topology::{CounterPlan, CounterReading, PciAddress};

use super::*;
use crate::sample;
use Level::{Degraded, Healthy, Unhealthy};

/// Two PFs (`ionic_0`, `ionic_1`, port 1; `enp16s0`, `enp32s0`), read
/// every 10 s by a monitor with the default policy (60 s window, 300 s
/// quiet period).
struct Node {
    plan: CounterPlan,
    names: Vec<String>,
    values: HashMap<(PciAddress, String), CounterReading>,
    monitor: CounterMonitor,
    now: Duration,
    transitions: Vec<Transition>,
}

const EVERY: Duration = Duration::from_secs(10);

fn pf(i: usize) -> PciAddress {
    sample::pf_address(i)
}

impl Node {
    fn new() -> Self {
        let policy = HealthPolicy::default();
        let plan = CounterPlan::new(&sample::inventory(2, 2), &policy.counter_names());
        let names = policy
            .thresholds()
            .iter()
            .map(|t| t.counter.label().to_string())
            .collect();
        Node {
            plan,
            names,
            values: HashMap::new(),
            monitor: CounterMonitor::new(policy),
            now: Duration::ZERO,
            transitions: Vec::new(),
        }
    }

    fn reading(&self, f: PciAddress, counter: &str) -> CounterReading {
        let key = (f, counter.to_string());
        self.values
            .get(&key)
            .cloned()
            .unwrap_or(CounterReading::Value(0))
    }

    fn set(&mut self, i: usize, counter: &str, reading: CounterReading) {
        self.values.insert((pf(i), counter.to_string()), reading);
    }

    fn add(&mut self, i: usize, counter: &str, by: u64) {
        let CounterReading::Value(v) = self.reading(pf(i), counter) else {
            panic!("{counter} holds no value");
        };
        self.set(i, counter, CounterReading::Value(v + by));
    }

    /// One read at the current time, then the clock moves on 10 s.
    fn poll(&mut self) -> Poll {
        let readings: Vec<CounterReading> = (self.plan.counters.iter())
            .map(|c| self.reading(c.function, &self.names[c.counter]))
            .collect();
        let poll = self.monitor.observe(self.now, &self.plan, &readings);
        self.transitions.extend(poll.transitions.clone());
        self.now += EVERY;
        poll
    }

    /// Polls until (not including) time `t` seconds.
    fn run_until(&mut self, t: u64) {
        while self.now < Duration::from_secs(t) {
            self.poll();
        }
    }

    fn level(&self, i: usize) -> Level {
        self.monitor
            .conditions()
            .get(&pf(i))
            .map_or(Healthy, |c| c.level)
    }

    fn moves(&self) -> Vec<(u64, Level, Level)> {
        (self.transitions.iter())
            .map(|t| (t.at.as_secs(), t.from, t.to))
            .collect()
    }
}

#[test]
fn a_growing_counter_degrades_then_fails_its_device_at_once_naming_the_counter() {
    let mut node = Node::new();
    node.poll(); // t=0: the baseline
    for _ in 0..3 {
        node.add(0, "symbol_error", 100);
        node.poll();
    }
    // 100 in the first 10 s is 100/min over the 60 s window: degraded at
    // once; 300 by t=30 is 300/min; the rate keeps climbing with the count.
    assert_eq!(node.moves(), [(10, Healthy, Degraded)]);
    for _ in 0..3 {
        node.add(0, "symbol_error", 100);
        node.poll();
    }
    assert_eq!(
        node.moves(),
        [(10, Healthy, Degraded), (60, Degraded, Unhealthy)]
    );
    let t = &node.transitions[1];
    assert_eq!(t.function, pf(0));
    let cause = t.cause.as_ref().unwrap();
    assert_eq!(
        cause.to_string(),
        "symbol_error of ionic_0/1 at 600/min over the last 60s (unhealthy at 600/min)"
    );
    assert_eq!(t.was.as_ref().unwrap().level, Degraded);
    assert_eq!(node.level(1), Healthy, "the other PF is untouched");
    let verdicts = node.monitor.verdicts();
    assert_eq!(verdicts.len(), 1);
    assert_eq!(
        verdicts[&pf(0)],
        Verdict {
            level: Unhealthy,
            counter: "symbol_error".into()
        }
    );
}

#[test]
fn a_counter_that_stops_clears_its_device_after_the_window_and_the_quiet_period() {
    let mut node = Node::new();
    node.poll();
    node.add(0, "carrier_changes", 10); // five flaps in 10 s
    node.poll();
    assert_eq!(node.moves(), [(10, Healthy, Unhealthy)]);
    // The burst stays in the 60 s window until t=70: crossed last at t=60.
    node.run_until(360);
    assert_eq!(node.level(0), Unhealthy, "quiet for 290 s only");
    node.poll();
    assert_eq!(
        node.moves(),
        [(10, Healthy, Unhealthy), (360, Unhealthy, Healthy)]
    );
    let t = &node.transitions[1];
    assert_eq!(
        (t.cause.clone(), t.was.as_ref().unwrap().counter.as_str()),
        (None, "carrier_changes")
    );
    assert!(node.monitor.verdicts().is_empty());
}

#[test]
fn a_counter_that_flaps_keeps_its_device_down_instead_of_toggling() {
    let mut node = Node::new();
    node.poll();
    // A burst of link downs every 200 s, for 1,000 s: calmer than the
    // quiet period each time, never for long enough.
    while node.now < Duration::from_secs(1000) {
        if node.now.as_secs() % 200 == 10 {
            node.add(0, "link_downed", 5);
        }
        node.poll();
    }
    assert_eq!(node.moves(), [(10, Healthy, Unhealthy)]);
    // Then it stops (last burst at t=810, in the window until t=860).
    node.run_until(1200);
    assert_eq!(
        node.moves(),
        [(10, Healthy, Unhealthy), (1160, Unhealthy, Healthy)]
    );
}

#[test]
fn errors_that_ease_to_the_degraded_rate_step_the_device_down_one_level_at_a_time() {
    let mut node = Node::new();
    node.poll();
    node.add(0, "symbol_error", 1000);
    node.poll(); // t=10: unhealthy; in the window until t=70
    // Then 2 every 10 s: 12/min, degraded, for as long as it lasts.
    while node.now < Duration::from_secs(600) {
        node.add(0, "symbol_error", 2);
        node.poll();
    }
    assert_eq!(
        node.moves(),
        [(10, Healthy, Unhealthy), (360, Unhealthy, Degraded)]
    );
    let cause = node.transitions[1].cause.clone().unwrap();
    assert_eq!((cause.level, cause.per_minute), (Degraded, 12.0));
    // The last 2 come at t=590; from t=610 the window holds fewer than 10
    // a minute: crossed last at t=600.
    node.run_until(1000);
    assert_eq!(node.moves()[2..], [(900, Degraded, Healthy)]);
}

#[test]
fn a_counter_that_goes_backwards_restarts_its_history_and_neither_spikes_nor_clears() {
    let mut node = Node::new();
    node.set(1, "symbol_error", CounterReading::Value(1_000_000));
    node.poll();
    node.add(0, "port_rcv_errors", 10_000);
    node.poll(); // PF 0 unhealthy
    // A driver reload: both PFs' counters start again from zero.
    node.set(0, "port_rcv_errors", CounterReading::Value(0));
    node.set(1, "symbol_error", CounterReading::Value(0));
    let poll = node.poll();
    let resets: Vec<_> = poll.problems.iter().map(|p| (p.function, p.kind)).collect();
    assert_eq!(
        resets,
        [(pf(0), ProblemKind::Reset), (pf(1), ProblemKind::Reset)]
    );
    node.add(1, "symbol_error", 5);
    node.poll();
    assert_eq!(
        node.level(1),
        Healthy,
        "5 since the reset, not 1,000,000 back"
    );
    // PF 0 was last crossed at t=10 but held by the reset at t=20 (whose
    // value is the new baseline): the quiet period runs from there.
    node.run_until(320);
    assert_eq!(node.level(0), Unhealthy);
    node.poll();
    assert_eq!(
        node.moves(),
        [(10, Healthy, Unhealthy), (320, Unhealthy, Healthy)]
    );
}

#[test]
fn garbage_or_a_vanished_counter_holds_an_unhealthy_device_until_it_reads_well_again() {
    let mut node = Node::new();
    node.poll();
    node.add(0, "link_downed", 10);
    node.poll(); // unhealthy at t=10
    let good = node.reading(pf(0), "link_downed");
    let mut reported = Vec::new();
    for (t, bad) in [
        (20, CounterReading::Invalid("\u{fffd}\u{fffd}".into())),
        (500, CounterReading::Missing),
        (800, CounterReading::Unreadable("Input/output error".into())),
    ] {
        node.set(0, "link_downed", bad);
        node.run_until(t + 300);
        reported.extend(node.poll().problems);
    }
    assert_eq!(
        node.moves(),
        [(10, Healthy, Unhealthy)],
        "never cleared while unreadable"
    );
    node.set(0, "link_downed", good);
    let back = node.poll(); // t=1110; held last at t=1100
    assert_eq!(back.problems[0].kind, ProblemKind::Fixed);
    node.run_until(1500);
    assert_eq!(
        node.moves(),
        [(10, Healthy, Unhealthy), (1400, Unhealthy, Healthy)]
    );
    // Each problem said once, when it started (polls at 320, 800, 1100 see
    // the three, none of them new then).
    assert!(reported.is_empty(), "{reported:?}");
}

#[test]
fn each_bad_counter_is_said_once_and_never_panics_the_monitor() {
    let mut node = Node::new();
    node.poll();
    node.set(1, "symbol_error", CounterReading::Invalid("n/a".into()));
    let first = node.poll();
    assert_eq!(first.problems.len(), 1);
    assert_eq!(first.problems[0].kind, ProblemKind::Invalid);
    assert!(
        first.problems[0].detail.contains("n/a"),
        "{:?}",
        first.problems
    );
    for _ in 0..5 {
        assert!(node.poll().problems.is_empty());
    }
    assert_eq!(node.level(1), Healthy, "a healthy device stays healthy");
}

#[test]
fn a_counter_the_driver_never_provides_is_not_watched_and_blocks_nothing() {
    let mut node = Node::new();
    node.set(0, "link_error_recovery", CounterReading::Missing);
    let first = node.poll();
    let kinds: Vec<_> = first
        .problems
        .iter()
        .map(|p| (p.counter.as_str(), p.kind))
        .collect();
    assert_eq!(kinds, [("link_error_recovery", ProblemKind::NotProvided)]);
    node.add(0, "symbol_error", 1000);
    node.poll();
    node.run_until(400);
    assert_eq!(
        node.moves(),
        [(10, Healthy, Unhealthy), (360, Unhealthy, Healthy)]
    );
}

#[test]
fn a_port_counter_at_the_top_of_its_width_holds_its_device() {
    let mut node = Node::new();
    node.poll();
    node.add(0, "local_link_integrity_errors", 15); // 4 bits: 15 is the most
    let poll = node.poll();
    assert_eq!(node.level(0), Unhealthy);
    assert_eq!(poll.problems[0].kind, ProblemKind::Saturated);
    node.run_until(2000);
    assert_eq!(
        node.moves(),
        [(10, Healthy, Unhealthy)],
        "errors could go unseen"
    );
}

#[test]
fn a_short_history_never_inflates_a_rate() {
    let mut node = Node::new();
    node.poll();
    node.add(0, "symbol_error", 9);
    node.poll();
    // 9 in 10 s: 9/min over the window, not 54/min.
    let rate = node
        .monitor
        .rates()
        .find(|r| r.0 == pf(0) && r.2 == "symbol_error");
    assert_eq!(rate.map(|r| r.3), Some(9.0));
    assert_eq!(node.level(0), Healthy);
}

#[test]
fn a_pf_that_leaves_the_inventory_is_forgotten() {
    let mut node = Node::new();
    node.poll();
    node.add(1, "symbol_error", 10_000);
    node.poll();
    assert_eq!(node.level(1), Unhealthy);
    let policy = node.monitor.policy().clone();
    node.plan = CounterPlan::new(&sample::inventory(1, 0), &policy.counter_names());
    node.poll();
    assert!(node.monitor.conditions().is_empty());
    assert!(node.monitor.rates().all(|r| r.0 == pf(0)));
}

#[test]
fn threshold_flags_parse_replace_remove_and_add_counters() {
    let spec = |s: &str| s.parse::<ThresholdSpec>();
    let policy = HealthPolicy::new(
        &[
            spec("symbol_error=5,50").unwrap(),
            spec("link_downed=off").unwrap(),
            spec("hw_counters/out_of_buffer=-,100.5").unwrap(),
        ],
        Duration::from_secs(30),
        Duration::from_secs(120),
    )
    .unwrap();
    let by_name: HashMap<String, (Option<f64>, Option<f64>)> = (policy.thresholds().iter())
        .map(|t| (t.counter.to_string(), (t.degraded, t.unhealthy)))
        .collect();
    assert_eq!(by_name["symbol_error"], (Some(5.0), Some(50.0)));
    assert!(!by_name.contains_key("link_downed"));
    assert_eq!(by_name["hw_counters/out_of_buffer"], (None, Some(100.5)));
    assert_eq!(
        by_name["carrier_changes"],
        (Some(2.0), Some(6.0)),
        "defaults stay"
    );
    assert_eq!(
        (policy.window().as_secs(), policy.quiet().as_secs()),
        (30, 120)
    );
    for bad in [
        "symbol_error",
        "symbol_error=5",
        "symbol_error=50,5",
        "symbol_error=-,-",
        "symbol_error=0,5",
        "symbol_error=x,5",
        "symbol_error=1,inf",
        "../etc=1,2",
        "=1,2",
    ] {
        let err = spec(bad).unwrap_err().to_string();
        assert!(err.starts_with("invalid health threshold"), "{bad}: {err}");
    }
    let short = HealthPolicy::new(&[], Duration::ZERO, DEFAULT_QUIET).unwrap_err();
    assert_eq!(
        short.to_string(),
        "invalid health window: must be at least one second"
    );
    assert!(HealthPolicy::new(&[], DEFAULT_WINDOW, Duration::from_millis(10)).is_err());
}

#[test]
fn a_rate_reaches_a_level_at_its_threshold() {
    let t = &default_thresholds()[0]; // carrier_changes 2, 6
    assert_eq!(t.level(1.9), None);
    assert_eq!(t.level(2.0), Some((Degraded, 2.0)));
    assert_eq!(t.level(6.0), Some((Unhealthy, 6.0)));
    assert_eq!(rate(2.0), "2");
    assert_eq!(rate(0.25), "0.2");
}
