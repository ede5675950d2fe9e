//! The counter side of health over a rendered sysfs tree: counters that
//! grow, stop, and turn to garbage, with the clock given by the test.

use std::sync::Arc;
use std::time::Duration;

use dra_model::health::{HealthPolicy, Level, Verdict};
use testkit::fixture::{Topology, bundled_by_name, port_counter};
use topology::Inventory;

use super::*;

struct Node {
    _dir: tempfile::TempDir,
    root: PathBuf,
    inventory: Arc<Inventory>,
    health: CounterHealth,
    followers: Followers,
    metrics: Arc<Metrics>,
    now: Duration,
}

impl Node {
    /// The demo node (8 PFs, `ionic_0` on `enp4s0` first), default policy.
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let yaml = bundled_by_name("mi300x-8gpu-8nic").unwrap();
        Topology::from_yaml(yaml).unwrap().render(&root).unwrap();
        let inventory = Arc::new(topology::discover(&root, &Default::default()).unwrap());
        let metrics = Arc::new(Metrics::default());
        let policy = HealthPolicy::default();
        let (health, followers) =
            CounterHealth::new(root.clone(), "ainic.amd.com", policy, metrics.clone());
        Node {
            _dir: dir,
            root,
            inventory,
            health,
            followers,
            metrics,
            now: Duration::ZERO,
        }
    }

    fn write(&self, file: &str, value: &str) {
        std::fs::write(port_counter(&self.root, "ionic_0", 1, file), value).unwrap();
    }

    /// Polls every 10 s until (not including) `t` seconds.
    async fn run_until(&mut self, t: u64) {
        while self.now < Duration::from_secs(t) {
            self.health.poll(&self.inventory, self.now).await;
            self.now += Duration::from_secs(10);
        }
    }

    fn events(&mut self) -> Vec<HealthEvent> {
        let mut out = Vec::new();
        while let Ok(e) = self.followers.events.try_recv() {
            out.push(e);
        }
        out
    }
}

#[tokio::test]
async fn a_nic_whose_errors_grow_then_stop_goes_unhealthy_and_recovers_once() {
    let mut node = Node::new();
    node.run_until(10).await; // t=0: the first values
    node.write("counters/symbol_error", "1000\n");
    node.run_until(20).await;
    let events = node.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].kind, events[0].reason),
        (EventType::Warning, NIC_UNHEALTHY)
    );
    for part in [
        "NIC pf-0000-04-00-0 (0000:04:00.0, enp4s0) is unhealthy",
        "symbol_error of ionic_0/1 at 1000/min over the last 60s (unhealthy at 600/min)",
        "tainted ainic.amd.com/unhealthy=symbol_error:NoSchedule",
        "healthy again after 300s",
    ] {
        assert!(
            events[0].note.contains(part),
            "{part:?} not in {}",
            events[0].note
        );
    }
    let verdicts = node.followers.verdicts.borrow_and_update().clone();
    let pf = node.inventory.nics[0].address;
    assert_eq!(
        *verdicts,
        Verdicts::from([(
            pf,
            Verdict {
                level: Level::Unhealthy,
                counter: "symbol_error".into()
            }
        )])
    );
    let text = node.metrics.encode();
    for line in [
        "ainic_dra_nic_health_level{device=\"pf-0000-04-00-0\"} 2",
        "ainic_dra_nic_health_level{device=\"pf-0000-24-00-0\"} 0",
        "ainic_dra_nic_health_transitions_total{device=\"pf-0000-04-00-0\",to=\"unhealthy\",counter=\"symbol_error\"} 1",
        "ainic_dra_nic_counter_per_minute{device=\"pf-0000-04-00-0\",source=\"ionic_0/1\",counter=\"symbol_error\"} 1000.0",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }

    // Crossed last at t=60 (the jump leaves the window at t=70): nothing
    // changes, nothing is said, until t=360.
    node.run_until(360).await;
    assert!(node.events().is_empty());
    assert!(
        !node.followers.verdicts.has_changed().unwrap(),
        "no publish while it holds"
    );
    node.run_until(370).await;
    let events = node.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        (events[0].kind, events[0].reason),
        (EventType::Normal, NIC_RECOVERED)
    );
    assert!(
        events[0].note.contains(
            "healthy again: no counter crossed a threshold for 300s (it was unhealthy: symbol_error"
        ),
        "{}",
        events[0].note
    );
    assert!(node.followers.verdicts.borrow_and_update().is_empty());
    assert!(
        node.metrics
            .encode()
            .contains("ainic_dra_nic_health_level{device=\"pf-0000-04-00-0\"} 0")
    );
}

#[tokio::test]
async fn garbage_in_a_counter_file_holds_the_nic_and_never_panics() {
    let mut node = Node::new();
    node.run_until(10).await;
    node.write("counters/link_downed", "5\n");
    node.run_until(20).await;
    assert_eq!(node.events()[0].reason, NIC_UNHEALTHY);
    node.write("counters/link_downed", "\u{0}\u{1}garbage\n");
    node.run_until(2000).await;
    assert!(node.events().is_empty(), "held unhealthy while unreadable");
    assert_eq!(
        node.health.conditions()[&node.inventory.nics[0].address].level,
        Level::Unhealthy
    );
}

#[tokio::test]
async fn a_degraded_nic_is_announced_with_its_informational_taint() {
    let mut node = Node::new();
    node.run_until(10).await;
    std::fs::write(
        testkit::fixture::netdev_counter(&node.root, "enp4s0", "carrier_changes"),
        "4\n",
    )
    .unwrap();
    node.run_until(20).await;
    let events = node.events();
    assert_eq!(
        (events[0].kind, events[0].reason),
        (EventType::Warning, NIC_DEGRADED)
    );
    assert!(
        events[0]
            .note
            .contains("carrier_changes of enp4s0 at 2/min over the last 60s (degraded at 2/min)"),
        "{}",
        events[0].note
    );
    assert!(
        events[0]
            .note
            .contains("ainic.amd.com/degraded=carrier_changes:None")
    );
}

#[tokio::test]
async fn a_link_that_flaps_keeps_its_nic_down_with_one_event_until_it_stops() {
    let mut node = Node::new();
    let carrier = testkit::fixture::netdev_counter(&node.root, "enp4s0", "carrier_changes");
    let mut changes = 2;
    // Three flaps in 10 s every 200 s: each burst is over before the quiet
    // period, none is announced again.
    while node.now < Duration::from_secs(1000) {
        if node.now.as_secs() % 200 == 10 {
            changes += 6;
            std::fs::write(&carrier, format!("{changes}\n")).unwrap();
        }
        node.run_until(node.now.as_secs() + 10).await;
    }
    let events = node.events();
    let reasons: Vec<&str> = events.iter().map(|e| e.reason).collect();
    assert_eq!(reasons, [NIC_UNHEALTHY], "{events:?}");
    // The last burst (t=810) leaves the window at t=870: recovered at 1160.
    node.run_until(1200).await;
    let reasons: Vec<&str> = node.events().iter().map(|e| e.reason).collect();
    assert_eq!(reasons, [NIC_RECOVERED]);
}
