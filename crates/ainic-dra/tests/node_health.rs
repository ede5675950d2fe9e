//! End to end: the health stream follows link state in sysfs, and the HTTP
//! endpoint reports liveness, readiness (registration) and metrics.

mod node_support;

use serde_json::json;

use node_support::{DRIVER, NODE, World, http_get, within};

const HEALTHY: i32 = 1;
const UNHEALTHY: i32 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_stream_reports_every_device_and_follows_a_link_going_down() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let _agent =
        world.start_agent_with(None, &["--refresh-interval", "1", "--rescan-interval", "1"]);
    let kubelet = world.register().await;
    let mut stream = kubelet.watch_health().await.unwrap();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.devices.len(), 8);
    assert!(
        first.devices.iter().all(|d| d.health == HEALTHY),
        "{first:?}"
    );
    let id = first.devices[0].device.clone().unwrap();
    assert_eq!(
        (id.pool_name.as_str(), id.device_name.as_str()),
        (NODE, "pf-0000-04-00-0")
    );

    std::fs::write(world.sysfs.join("class/net/enp4s0/operstate"), "down\n").unwrap();
    let unhealthy = async {
        loop {
            let next = stream.message().await.unwrap().expect("stream stays open");
            let pf0 = &next.devices[0];
            if pf0.health == UNHEALTHY {
                assert!(pf0.message.contains("enp4s0"), "{pf0:?}");
                assert!(next.devices[1..].iter().all(|d| d.health == HEALTHY));
                break;
            }
        }
    };
    within("pf0 reported unhealthy", unhealthy).await;
}

/// An RDMA port going down comes with no kernel event: the cheap rescan
/// (`--rescan-interval`) finds it, long before the full one would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rescan_finds_an_rdma_port_going_down_without_an_event() {
    let world = World::new("mi300x-8gpu-8nic").await;
    // The full rescan stays at its default, an hour.
    let _agent =
        world.start_agent_with(None, &["--refresh-interval", "1", "--rescan-interval", "1"]);
    let mut stream = world.register().await.watch_health().await.unwrap();
    let first = stream.message().await.unwrap().unwrap();
    assert!(first.devices.iter().all(|d| d.health == HEALTHY));

    let ibdev = std::fs::read_dir(world.sysfs.join("bus/pci/devices/0000:04:00.0/infiniband"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name();
    let state = world.sysfs.join(format!(
        "bus/pci/devices/0000:04:00.0/infiniband/{}/ports/1/state",
        ibdev.to_string_lossy()
    ));
    std::fs::write(state, "1: DOWN\n").unwrap();
    // Not a speed limit: without the rescan only the full one, an hour
    // away, would see it, and the test would hang.
    let seen = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        loop {
            let next = stream.message().await.unwrap().expect("stream stays open");
            if next.devices[0].health == UNHEALTHY {
                return next.devices[0].message.clone();
            }
        }
    });
    let message = seen.await.expect("the rescan saw the port go down");
    assert!(message.contains("RDMA port"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_after_registration_and_metrics_count_claims_and_devices() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let agent = world.start_agent(None);
    assert_eq!(http_get(&agent.http, "/healthz").await.0, 200);
    let (status, body) = http_get(&agent.http, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    let kubelet = world.register().await;
    // Registered, and (at about the same moment) the Node read: ready.
    let mut ready = 0;
    for _ in 0..500 {
        ready = http_get(&agent.http, "/readyz").await.0;
        if ready == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(ready, 200);

    let claim = world.claim("c", &[("nic", DRIVER, NODE, "pf-0000-04-00-0")], json!([]));
    let bad = world.claim("d", &[("nic", DRIVER, NODE, "pf-0000-99-00-0")], json!([]));
    kubelet.prepare_v1(&[claim.clone(), bad]).await.unwrap();
    kubelet.unprepare_v1(&[claim]).await.unwrap();
    let (status, metrics) = http_get(&agent.http, "/metrics").await;
    assert_eq!(status, 200);
    for line in [
        "ainic_dra_claims_total{operation=\"prepare\"} 2",
        "ainic_dra_claim_errors_total{operation=\"prepare\"} 1",
        "ainic_dra_claims_total{operation=\"unprepare\"} 1",
        "ainic_dra_claim_duration_seconds_count{operation=\"prepare\"} 2",
        "ainic_dra_devices{state=\"healthy\"} 8",
        "ainic_dra_kubelet_registered 1",
    ] {
        assert!(metrics.contains(line), "missing {line:?} in\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_publishes_its_pool() {
    use k8s_openapi::api::resource::v1::ResourceSlice;
    let world = World::new("mi300x-8gpu-8nic").await;
    let _agent = world.start_agent(None);
    let devices = || {
        let slices: Vec<ResourceSlice> = world.api.list();
        (slices.iter())
            .filter(|s| s.spec.driver == DRIVER && s.spec.pool.name == NODE)
            .map(|s| s.spec.devices.as_ref().map_or(0, Vec::len))
            .sum::<usize>()
    };
    eventually("first publish", || devices() > 0).await;
    assert_eq!(devices(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_removes_the_sockets_and_keeps_prepared_claims() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let mut agent = world.start_agent(None);
    let kubelet = world.register().await;
    let claim = world.claim(
        "kept",
        &[("nic", DRIVER, NODE, "pf-0000-04-00-0")],
        json!([]),
    );
    let first = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();

    let pid = agent.child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = node_support::wait_exit(&mut agent).await;
    assert!(status.success(), "{status:?}");
    let dirs = world.dirs();
    assert!(!dirs.registry.join("ainic.amd.com-reg.sock").exists());
    assert!(!dirs.plugin.join("dra.sock").exists());
    assert_eq!(
        world.claim_specs().len(),
        1,
        "a restart of the agent is not an unprepare"
    );

    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    world.api.clear_requests();
    let again = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(again, first);
    let claim_reads = world.claim_reads();
    assert_eq!(
        claim_reads, 0,
        "the restarted agent answers from its checkpoint"
    );
}

/// The `fabric` attribute of every device of this node's pool, once the pool
/// has `devices` devices.
fn fabrics(world: &World) -> Vec<String> {
    use k8s_openapi::api::resource::v1::ResourceSlice;
    let slices: Vec<ResourceSlice> = world.api.list();
    slices
        .iter()
        .filter(|s| s.spec.driver == DRIVER && s.spec.pool.name == NODE)
        .flat_map(|s| s.spec.devices.clone().unwrap_or_default())
        .map(|d| {
            d.attributes
                .unwrap_or_default()
                .get("ainic.amd.com/fabric")
                .and_then(|a| a.string.clone())
                .unwrap_or_default()
        })
        .collect()
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..400 {
        if done() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("{what} did not happen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_slice_comes_back_and_label_changes_are_published_without_a_resync() {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::resource::v1::ResourceSlice;
    use kube::api::{DeleteParams, Patch, PatchParams};
    let world = World::new("mi300x-8gpu-8nic").await;
    // The periodic resync is an hour away: only the watches can act.
    let _agent = world.start_agent_with(None, &["--resync-interval", "3600"]);
    eventually("first publish", || fabrics(&world).len() == 8).await;

    let slices: kube::Api<ResourceSlice> = kube::Api::all(world.api.client());
    let mut deleted = Vec::new();
    for slice in world.api.list::<ResourceSlice>() {
        let name = slice.metadata.name.unwrap();
        deleted.push(slice.metadata.uid.unwrap());
        slices
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap();
    }
    // Restored: published anew (new UIDs), not the deleted ones seen
    // before the deletes took.
    eventually("deleted slices restored", || {
        let now = world.api.list::<ResourceSlice>();
        let anew = (now.iter()).all(|s| !deleted.contains(s.metadata.uid.as_ref().unwrap()));
        anew && fabrics(&world).len() == 8
    })
    .await;

    let nodes: kube::Api<Node> = kube::Api::all(world.api.client());
    let patch = json!({"metadata": {"labels": {"ainic.amd.com/fabric": "pod-b"}}});
    nodes
        .patch(NODE, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    eventually("label published", || {
        let f = fabrics(&world);
        f.len() == 8 && f.iter().all(|f| f == "pod-b")
    })
    .await;
}

/// Whether the published device `name` carries the driver's unhealthy taint.
fn tainted(world: &World, name: &str) -> Option<bool> {
    use k8s_openapi::api::resource::v1::ResourceSlice;
    let slices: Vec<ResourceSlice> = world.api.list();
    let device = slices
        .iter()
        .filter(|s| s.spec.driver == DRIVER && s.spec.pool.name == NODE)
        .flat_map(|s| s.spec.devices.clone().unwrap_or_default())
        .find(|d| d.name == name)?;
    Some(!device.taints.unwrap_or_default().is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_v1_reports_a_link_down_then_up_and_the_taint_follows() {
    let world = World::new("mi300x-8gpu-8nic").await;
    // Taints are published where the API server keeps them (gate on).
    let flags = [
        "--refresh-interval",
        "1",
        "--rescan-interval",
        "1",
        "--feature-gates",
        "DRADeviceTaints=true",
    ];
    let _agent = world.start_agent_with(None, &flags);
    let kubelet = world.register().await;
    let mut stream = kubelet.watch_health_v1().await.unwrap();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.devices.len(), 8);
    assert!(first.devices.iter().all(|d| d.health == HEALTHY));
    assert!(
        first
            .devices
            .iter()
            .all(|d| d.health_check_timeout_seconds > 0)
    );

    let operstate = world.sysfs.join("class/net/enp4s0/operstate");
    for (state, wanted) in [("down", UNHEALTHY), ("up", HEALTHY)] {
        std::fs::write(&operstate, format!("{state}\n")).unwrap();
        let reported = async {
            loop {
                let next = stream.message().await.unwrap().expect("stream stays open");
                if next.devices[0].health == wanted {
                    break;
                }
            }
        };
        within(&format!("pf0 reported health {wanted}"), reported).await;
        let want_taint = wanted == UNHEALTHY;
        eventually_tainted(&world, "pf-0000-04-00-0", want_taint).await;
    }
}

async fn eventually_tainted(world: &World, name: &str, wanted: bool) {
    for _ in 0..400 {
        if tainted(world, name) == Some(wanted) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!(
        "{name}: taint present should be {wanted}, is {:?}",
        tainted(world, name)
    );
}

/// The next report whose first device has `health`. A hang guard, not a
/// speed limit: the stream reports every second.
async fn first_device_becomes(
    stream: &mut tonic::Streaming<kubelet_api::dra_health::v1::NodeWatchResourcesResponse>,
    health: i32,
) -> kubelet_api::dra_health::v1::NodeWatchResourcesResponse {
    let wait = async {
        loop {
            let next = stream.message().await.unwrap().expect("stream stays open");
            if next.devices[0].health == health {
                return next;
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(60), wait)
        .await
        .unwrap_or_else(|_| panic!("the first device never became {health}"))
}

/// The Events on the Node with `reason`.
fn node_events(world: &World, reason: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
    let all: Vec<k8s_openapi::api::events::v1::Event> = world.api.list();
    all.into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(NODE))
        .collect()
}

/// The value of the driver's unhealthy taint on the published device `name`.
fn taint_value(world: &World, name: &str) -> Option<String> {
    use k8s_openapi::api::resource::v1::ResourceSlice;
    let slices: Vec<ResourceSlice> = world.api.list();
    let device = slices
        .iter()
        .filter(|s| s.spec.driver == DRIVER && s.spec.pool.name == NODE)
        .flat_map(|s| s.spec.devices.clone().unwrap_or_default())
        .find(|d| d.name == name)?;
    let taint = device.taints?.into_iter().next()?;
    assert_eq!(
        (taint.key.as_str(), taint.effect.as_str()),
        ("ainic.amd.com/unhealthy", "NoSchedule")
    );
    taint.value
}

/// Issue 33, item 3: a NIC whose error counters grow goes unhealthy on
/// the health stream, in its taint, its metric and an Event naming the
/// counter; once they stop it recovers after the window and the quiet
/// period, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nic_whose_error_counters_grow_goes_unhealthy_and_recovers_when_they_stop() {
    use std::time::Duration;
    let world = World::new("mi300x-8gpu-8nic").await;
    let flags = [
        "--refresh-interval",
        "1",
        "--feature-gates",
        "DRADeviceTaints=true",
        "--health-window",
        "2",
        "--health-quiet-period",
        "3",
    ];
    let agent = world.start_agent_with(None, &flags);
    let mut stream = world.register().await.watch_health_v1().await.unwrap();
    let first = stream.message().await.unwrap().unwrap();
    assert!(
        first.devices.iter().all(|d| d.health == HEALTHY),
        "{first:?}"
    );

    // symbol_error of ionic_0 (enp4s0's port) climbs by 1,000 every 200 ms
    // for 5 s, then stops.
    let file = testkit::fixture::port_counter(&world.sysfs, "ionic_0", 1, "counters/symbol_error");
    let errors = tokio::spawn(async move {
        for i in 1..=25u64 {
            std::fs::write(&file, format!("{}\n", i * 1000)).unwrap();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let down = first_device_becomes(&mut stream, UNHEALTHY).await;
    let message = &down.devices[0].message;
    assert!(
        message.starts_with("symbol_error of ionic_0/1 at "),
        "{message}"
    );
    assert!(
        message.ends_with("/min over the last 2s (unhealthy at 600/min)"),
        "{message}"
    );
    assert!(down.devices[1..].iter().all(|d| d.health == HEALTHY));
    eventually("tainted", || {
        taint_value(&world, "pf-0000-04-00-0").as_deref() == Some("symbol_error")
    })
    .await;
    eventually("a Warning Event", || {
        !node_events(&world, "NicUnhealthy").is_empty()
    })
    .await;
    let event = &node_events(&world, "NicUnhealthy")[0];
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(event.action.as_deref(), Some("AssessNicHealth"));
    let note = event.note.clone().unwrap_or_default();
    assert!(
        note.contains("pf-0000-04-00-0 (0000:04:00.0, enp4s0) is unhealthy: symbol_error"),
        "{note}"
    );
    let (_, metrics) = http_get(&agent.http, "/metrics").await;
    assert!(
        metrics.contains("ainic_dra_nic_health_level{device=\"pf-0000-04-00-0\"} 2"),
        "{metrics}"
    );

    errors.await.unwrap();
    let up = first_device_becomes(&mut stream, HEALTHY).await;
    assert_eq!(up.devices[0].message, "link and RDMA ports up");
    eventually("untainted", || {
        taint_value(&world, "pf-0000-04-00-0").is_none()
    })
    .await;
    eventually("a Normal Event", || {
        !node_events(&world, "NicRecovered").is_empty()
    })
    .await;
    assert_eq!(node_events(&world, "NicUnhealthy").len(), 1, "no flapping");
    let log = std::fs::read_to_string(&agent.log).unwrap();
    let told: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("NIC unhealthy") || l.contains("NIC healthy"))
        .collect();
    assert_eq!(told.len(), 2, "{log}");
    eprintln!("{}", told.join("\n"));
}
