//! Exclusive netdev mode end to end: the real `ainic-dra node` agent, its
//! NRI plugin registered with upstream's runtime side of NRI
//! (`testbed/nri-runtime`: containerd/nri's `pkg/adaptation`), a claim in
//! `mode: netdev` prepared through the kubelet simulator, and a pod
//! sandbox (a network namespace this test creates) announced through NRI.
//! The "NIC" is a veth on the host whose name the topology fixture gives
//! the AINIC's netdev, so the agent moves a real link with real netlink.
//! Needs root (CAP_NET_ADMIN).
//!
//! The crash sweep kills the agent (`AINIC_DRA_FAULT`, an abort like
//! `kill -9`) at each step of a move, starts it again, and checks that
//! the runtime's `Synchronize` brings everything where it belongs: the
//! netdev in the pod while the pod runs, home under its own name with its
//! address once it stopped.

mod netns_support;
mod node_support;

use std::time::Duration;

use ainic_dra_node::faults::Point;
use k8s_openapi::api::resource::v1::ResourceClaim;
use netns_support::Net;
use node_support::{Agent, DRIVER, NODE, World, nic_config};
use serde_json::{Value, json};
use testkit::kubelet::ClaimRef;
use testkit::nri_runtime::{NriRuntime, pod};

const PF: &str = "pf-0000-04-00-0";
const POD_UID: &str = "pod-uid-1";

/// One AINIC whose netdev is the test's veth.
fn topology(netdev: &str) -> String {
    format!(
        r#"name: netdev-test
description: one AINIC whose netdev is a real veth of the test
numaNodes:
  - {{id: 0, cpus: "0-3"}}
hostBridges:
  - root: pci0000:00
    numa: 0
    ports:
      - bdf: "0000:00:01.1"
        devices:
          - {{bdf: "0000:04:00.0", model: pollara400, netdev: {{name: {netdev}}}, rdma: {{name: ionic_0}}}}
"#
    )
}

/// A claim for the PF in netdev mode, reserved for pod [`POD_UID`].
fn netdev_claim(world: &World) -> ClaimRef {
    let settings = json!({"mode": "netdev", "netdev": {"interfaceName": "net1",
        "addresses": ["10.88.0.2/24"],
        "routes": [{"destination": "10.99.0.0/16", "gateway": "10.88.0.1"}]}});
    let claim: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": "moved"},
        "spec": {"devices": {"requests": []}},
        "status": {
            "allocation": {"devices": {
                "results": [{"request": "nic", "driver": DRIVER, "pool": NODE, "device": PF}],
                "config": [nic_config("FromClaim", settings)],
            }},
            "reservedFor": [{"resource": "pods", "name": "trainer", "uid": POD_UID}],
        },
    }))
    .unwrap();
    world.seed(claim)
}

struct Bed {
    net: Net,
    world: World,
    runtime: NriRuntime,
    claim: ClaimRef,
}

impl Bed {
    async fn new(tag: &str) -> Bed {
        let net = Net::new(tag);
        let world = World::from_yaml(&topology(&net.nic)).await;
        let runtime = NriRuntime::start(&[]).await;
        let claim = netdev_claim(&world);
        Bed {
            net,
            world,
            runtime,
            claim,
        }
    }

    fn agent(&self, fault: Option<&str>) -> Agent {
        let socket = self.runtime.socket.to_str().unwrap();
        self.world
            .start_agent_with(fault, &["--nri-socket", socket, "--nri-plugin-index", "42"])
    }

    /// Starts an agent and waits until its NRI plugin is synchronized.
    async fn connected_agent(&mut self, fault: Option<&str>) -> Agent {
        let agent = self.agent(fault);
        let ready = self.runtime.wait_plugins(1).await;
        assert_eq!(ready["ok"], true, "{ready} (agent log: {})", log(&agent));
        agent
    }

    async fn prepare(&self) {
        let kubelet = self.world.register().await;
        let answer = kubelet
            .prepare_v1(std::slice::from_ref(&self.claim))
            .await
            .unwrap();
        assert_eq!(answer.claims[&self.claim.uid].error, "");
    }

    fn sandbox(&self) -> Value {
        pod("sandbox-1", POD_UID, self.net.pod_path().to_str().unwrap())
    }

    fn in_pod(&self) -> bool {
        let pod = Some(self.net.pod.as_str());
        let routed = || {
            let routes = self.net.json(pod, &["route", "show", "dev", "net1"]);
            (routes.iter()).any(|r| r["dst"] == "10.99.0.0/16" && r["gateway"] == "10.88.0.1")
        };
        self.net.has_link(pod, "net1")
            && self.net.addresses(pod, "net1") == ["10.88.0.2/24"]
            && routed()
            && !self.net.has_link(None, &self.net.nic)
    }

    fn home(&self) -> bool {
        let up = || {
            let link = &self.net.json(None, &["link", "show", &self.net.nic])[0];
            link["flags"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f == "UP"))
                && link["mtu"] == 1500
        };
        !self.net.has_link(Some(&self.net.pod), "net1")
            && self.net.has_link(None, &self.net.nic)
            && self.net.addresses(None, &self.net.nic) == ["10.77.0.5/24"]
            && up()
    }

    /// The moves the checkpoint records, as `phase` strings.
    fn moves(&self) -> Vec<String> {
        let checkpoint = ainic_dra_node::checkpoint::read(&self.world.dirs().state).unwrap();
        let phase = |m: &ainic_dra_node::checkpoint::NetdevMove| {
            serde_json::to_value(m.phase)
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        };
        checkpoint.moves.values().map(phase).collect()
    }
}

fn log(agent: &Agent) -> String {
    std::fs::read_to_string(&agent.log).unwrap_or_default()
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting until {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_netdev_moves_in_at_sandbox_start_and_home_at_stop() {
    let mut bed = Bed::new("e").await;
    let agent = bed.connected_agent(None).await;
    bed.prepare().await;
    assert!(bed.home(), "prepare moves nothing");

    let started = bed.runtime.pod_event("run-pod", &bed.sandbox()).await;
    assert_eq!(started["ok"], true, "{started} {}", log(&agent));
    assert_eq!(started["plugins"], 1, "{started}");
    assert!(bed.in_pod(), "{}", log(&agent));
    assert_eq!(bed.moves(), ["inPod"]);
    let status = || {
        let claim: Option<ResourceClaim> = bed.world.api.get(Some("default"), "moved");
        let devices = claim.and_then(|c| c.status).and_then(|s| s.devices);
        let net = devices.and_then(|d| d.into_iter().next()?.network_data);
        net.map(|n| (n.interface_name, n.ips))
    };
    eventually("the claim's status names the pod's interface", || {
        status() == Some((Some("net1".into()), Some(vec!["10.88.0.2/24".into()])))
    })
    .await;

    let stopped = bed.runtime.pod_event("stop-pod", &bed.sandbox()).await;
    assert_eq!(stopped["ok"], true, "{stopped}");
    assert!(bed.home(), "{}", log(&agent));
    assert!(bed.moves().is_empty());
    println!(
        "hooks through upstream's runtime: run {} µs, stop {} µs",
        started["micros"], stopped["micros"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_netdev_mode_is_refused_without_the_nri_plugin() {
    let net = Net::new("f");
    let world = World::from_yaml(&topology(&net.nic)).await;
    let claim = netdev_claim(&world);
    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    let answer = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    let error = &answer.claims[&claim.uid].error;
    assert!(
        error.contains("exclusive netdev mode") && error.contains("--nri-socket"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unprepare_brings_home_a_netdev_whose_sandbox_stop_was_missed() {
    let mut bed = Bed::new("u").await;
    let _agent = bed.connected_agent(None).await;
    bed.prepare().await;
    let started = bed.runtime.pod_event("run-pod", &bed.sandbox()).await;
    assert_eq!(started["ok"], true, "{started}");
    assert!(bed.in_pod());
    let kubelet = bed.world.register().await;
    let undone = kubelet
        .unprepare_v1(std::slice::from_ref(&bed.claim))
        .await
        .unwrap();
    assert_eq!(undone.claims[&bed.claim.uid].error, "");
    assert!(bed.home());
    assert!(bed.moves().is_empty());
}

/// Kills the agent at each step of a move and restarts it: after the
/// runtime synchronizes it, the netdev is in the pod while the pod runs
/// and home once it stopped, and the checkpoint holds no half-done move.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_any_step_of_a_move_converges_after_restart() {
    for point in Point::NETDEV {
        let mut bed = Bed::new(&format!("k{}", point as u8 % 10)).await;
        let name = point.name();
        let mut agent = bed.connected_agent(Some(name)).await;
        bed.prepare().await;
        let stop_point = point == Point::DetachBeforeForget;
        let started = bed.runtime.pod_event("run-pod", &bed.sandbox()).await;
        if stop_point {
            assert_eq!(started["ok"], true, "{name}: {started}");
            let _ = bed.runtime.pod_event("stop-pod", &bed.sandbox()).await;
        }
        let exit = node_support::wait_exit(&mut agent).await;
        assert!(!exit.success(), "{name}: the agent was not killed");
        // Upstream's runtime drops a plugin that died mid-call and lets
        // the pod carry on.
        let _ = bed.runtime.wait_plugins(0).await;

        let _agent = bed.connected_agent(None).await;
        if stop_point {
            eventually(&format!("{name}: home after restart"), || bed.home()).await;
            eventually(&format!("{name}: no move recorded"), || {
                bed.moves().is_empty()
            })
            .await;
        } else {
            eventually(&format!("{name}: in the pod after restart"), || {
                bed.in_pod()
            })
            .await;
            // Marked done just after the netdev is configured in the pod.
            eventually(&format!("{name}: the move recorded done"), || {
                bed.moves() == ["inPod"]
            })
            .await;
            let stopped = bed.runtime.pod_event("stop-pod", &bed.sandbox()).await;
            assert_eq!(stopped["ok"], true, "{name}: {stopped}");
            assert!(bed.home(), "{name}");
        }
        println!("kill point {name}: converged");
    }
}

/// A second network namespace for a pod's replacement sandbox.
struct SecondNetns(String);

impl SecondNetns {
    fn new(tag: &str) -> SecondNetns {
        let name = format!("ainic-pod2-{tag}-{}", std::process::id() % 100_000);
        netns_support::ip(&["netns", "add", &name]);
        SecondNetns(name)
    }

    fn path(&self) -> String {
        format!("/run/netns/{}", self.0)
    }
}

impl Drop for SecondNetns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .output();
    }
}

/// The kubelet replaces a pod's sandbox (new ID, new namespace) and only
/// then stops and removes the old one: the netdev follows the pod into the
/// new sandbox and stays there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_sandbox_keeps_the_netdev_when_the_old_one_is_removed() {
    let mut bed = Bed::new("r").await;
    let agent = bed.connected_agent(None).await;
    bed.prepare().await;
    let old = bed.sandbox();
    assert_eq!(bed.runtime.pod_event("run-pod", &old).await["ok"], true);
    assert!(bed.in_pod());
    let second = SecondNetns::new("r");
    let new = pod("sandbox-2", POD_UID, &second.path());
    let started = bed.runtime.pod_event("run-pod", &new).await;
    assert_eq!(started["ok"], true, "{started} {}", log(&agent));
    let in_new = |bed: &Bed| bed.net.has_link(Some(&second.0), "net1");
    assert!(in_new(&bed) && !bed.net.has_link(Some(&bed.net.pod), "net1"));
    for op in ["stop-pod", "remove-pod"] {
        let result = bed.runtime.pod_event(op, &old).await;
        assert_eq!(result["ok"], true, "{op}: {result}");
        assert!(
            in_new(&bed),
            "{op} of the old sandbox took the netdev: {}",
            log(&agent)
        );
    }
    assert_eq!(bed.moves(), ["inPod"]);
    assert_eq!(bed.runtime.pod_event("stop-pod", &new).await["ok"], true);
    assert!(bed.home(), "{}", log(&agent));
}

/// A pod that has a link of the planned name already keeps it: nothing
/// moves, the sandbox fails with the reason, the NIC stays home.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_taken_in_the_pod_refuses_the_move_and_leaves_the_pods_link() {
    let mut bed = Bed::new("c").await;
    let _agent = bed.connected_agent(None).await;
    bed.prepare().await;
    let pod = bed.net.pod.clone();
    netns_support::ip(&[
        "-n", &pod, "link", "add", "net1", "type", "veth", "peer", "name", "other1",
    ]);
    let refused = bed.runtime.pod_event("run-pod", &bed.sandbox()).await;
    assert_eq!(refused["ok"], false, "{refused}");
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.contains("default/moved") && error.contains("there already"),
        "{error}"
    );
    assert!(
        bed.net.has_link(Some(&bed.net.pod), "net1"),
        "the pod's own link is gone"
    );
    assert!(bed.net.has_link(None, &bed.net.nic));
    assert!(bed.moves().is_empty());
}
