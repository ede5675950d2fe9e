use super::*;
use crate::fixtures;
use Health::{Healthy, Unhealthy, Unknown};

#[test]
fn up_nics_are_healthy_down_links_and_ports_are_not() {
    let mut inv = fixtures::inventory();
    assert!(
        assess(&inv, &CounterConditions::new(), 1)
            .devices
            .iter()
            .all(|d| d.health == Healthy)
    );
    inv.nics[0].netdevs[0].operstate = Some("down".into());
    inv.nics[1].rdma[0].ports[0].state = Some("DOWN".into());
    let report = assess(&inv, &CounterConditions::new(), 7);
    assert_eq!(report.devices[0].health, Unhealthy);
    assert!(
        report.devices[0].message.contains("eth0"),
        "{:?}",
        report.devices[0]
    );
    assert_eq!(report.devices[1].health, Unhealthy);
    assert!(report.devices[1].message.contains("ionic_1/1 is DOWN"));
    assert_eq!(report.counts()[2], ("unhealthy", 2));
}

#[test]
fn no_state_at_all_is_unknown() {
    let mut inv = fixtures::inventory();
    inv.nics[0].netdevs[0].operstate = None;
    inv.nics[0].rdma[0].ports[0].state = None;
    assert_eq!(
        assess(&inv, &CounterConditions::new(), 1).devices[0].health,
        Unknown
    );
}

#[tokio::test]
async fn the_stream_sends_the_full_list_then_every_change() {
    use v1alpha1::dra_resource_health_server::DraResourceHealth;
    let inv = fixtures::inventory();
    let (tx, rx) = watch::channel(Arc::new(assess(&inv, &CounterConditions::new(), 1)));
    let service = HealthService::new("node-a", rx, 30);
    let mut stream = service
        .node_watch_resources(tonic::Request::new(v1alpha1::NodeWatchResourcesRequest {}))
        .await
        .unwrap()
        .into_inner();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.devices.len(), 2);
    let id = first.devices[0].device.clone().unwrap();
    assert_eq!(
        (id.pool_name.as_str(), id.device_name.as_str()),
        ("node-a", "pf-0000-0c-00-0")
    );
    assert_eq!(
        first.devices[0].health,
        v1alpha1::HealthStatus::Healthy as i32
    );

    let mut down = inv.clone();
    down.nics[0].netdevs[0].operstate = Some("down".into());
    tx.send_replace(Arc::new(assess(&down, &CounterConditions::new(), 2)));
    let second = stream.next().await.unwrap().unwrap();
    assert_eq!(
        second.devices[0].health,
        v1alpha1::HealthStatus::Unhealthy as i32
    );
    assert_eq!(second.devices[0].last_updated_time, 2);
}

#[tokio::test]
async fn v1_streams_the_same_reports_with_message_and_timeout() {
    use v1::dra_resource_health_server::DraResourceHealth;
    let mut inv = fixtures::inventory();
    inv.nics[1].rdma[0].ports[0].state = Some("DOWN".into());
    let (tx, rx) = watch::channel(Arc::new(assess(&inv, &CounterConditions::new(), 5)));
    let service = HealthService::new("node-a", rx, 30);
    let mut stream = service
        .node_watch_resources(tonic::Request::new(v1::NodeWatchResourcesRequest {}))
        .await
        .unwrap()
        .into_inner();
    let first = stream.next().await.unwrap().unwrap();
    let down = &first.devices[1];
    assert_eq!(down.health, v1::HealthStatus::Unhealthy as i32);
    assert_eq!(down.message, "RDMA port ionic_1/1 is DOWN");
    assert_eq!(down.health_check_timeout_seconds, 30);
    assert_eq!(down.last_updated_time, 5);

    // The port comes back: the device is HEALTHY again.
    inv.nics[1].rdma[0].ports[0].state = Some("ACTIVE".into());
    tx.send_replace(Arc::new(assess(&inv, &CounterConditions::new(), 6)));
    let second = stream.next().await.unwrap().unwrap();
    assert_eq!(second.devices[1].health, v1::HealthStatus::Healthy as i32);
}

fn condition(level: Level, counter: &str) -> Condition {
    Condition {
        level,
        cause: dra_model::health::Crossing {
            counter: counter.into(),
            source: "ionic_0/1".into(),
            per_minute: 1200.0,
            threshold: 600.0,
            level,
            window: std::time::Duration::from_secs(60),
        },
        since: std::time::Duration::from_secs(10),
    }
}

#[test]
fn counter_levels_set_the_health_of_a_pf_and_its_vfs_and_say_what_crossed() {
    use dra_model::sample;
    let mut inv = sample::inventory(2, 1);
    let (pf0, pf1) = (sample::pf_address(0), sample::pf_address(1));
    let counters = CounterConditions::from([
        (pf0, condition(Level::Unhealthy, "symbol_error")),
        (pf1, condition(Level::Degraded, "carrier_changes")),
    ]);
    let report = assess(&inv, &counters, 3);
    let by_name = |name: &str| {
        report
            .devices
            .iter()
            .find(|d| d.device == name)
            .unwrap()
            .clone()
    };
    let pf = by_name("pf-0000-10-00-0");
    assert_eq!(pf.health, Unhealthy);
    assert_eq!(
        pf.message,
        "symbol_error of ionic_0/1 at 1200/min over the last 60s (unhealthy at 600/min)"
    );
    let vf = by_name("vf-0000-11-00-0");
    assert_eq!(vf.health, Unhealthy);
    assert!(
        vf.message
            .starts_with("follows PF 0000:10:00.0: symbol_error"),
        "{vf:?}"
    );
    let degraded = by_name("pf-0000-20-00-0");
    assert_eq!(degraded.health, Health::Degraded);
    assert!(
        degraded.message.starts_with("degraded: carrier_changes"),
        "{degraded:?}"
    );
    assert_eq!(
        report.counts(),
        [
            ("healthy", 0),
            ("degraded", 2),
            ("unhealthy", 2),
            ("unknown", 0)
        ]
    );

    // A link down says so, whatever the counters.
    inv.nics[0].netdevs[0].operstate = Some("down".into());
    let down = assess(&inv, &counters, 4);
    assert!(
        down.devices[0].message.starts_with("link of"),
        "{:?}",
        down.devices[0]
    );
}

#[tokio::test]
async fn the_kubelet_sees_a_degraded_device_as_healthy_with_the_reason() {
    use v1::dra_resource_health_server::DraResourceHealth;
    let inv = fixtures::inventory();
    let pf = inv.nics[0].address;
    let counters = CounterConditions::from([(pf, condition(Level::Degraded, "symbol_error"))]);
    let (_tx, rx) = watch::channel(Arc::new(assess(&inv, &counters, 5)));
    let service = HealthService::new("node-a", rx, 30);
    let mut stream = service
        .node_watch_resources(tonic::Request::new(v1::NodeWatchResourcesRequest {}))
        .await
        .unwrap()
        .into_inner();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first.devices[0].health, v1::HealthStatus::Healthy as i32);
    assert!(
        first.devices[0]
            .message
            .starts_with("degraded: symbol_error")
    );
}
