//! End to end: how the agent stops. A long-lived task that dies takes the
//! agent down on purpose, naming the task, instead of leaving it running
//! with a part missing; SIGTERM in the middle of a burst of prepares loses
//! no claim the kubelet was told is prepared.

mod node_support;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::resource::v1::ResourceSlice;
use serde_json::json;
use testkit::kubelet::ClaimRef;

use node_support::{DRIVER, NODE, World, wait_exit};

/// The devices of this node's pool, once published.
async fn published_devices(world: &World) -> Vec<String> {
    for _ in 0..500 {
        let slices: Vec<ResourceSlice> = world.api.list();
        let devices: Vec<String> = slices
            .iter()
            .filter(|s| s.spec.driver == DRIVER && s.spec.pool.name == NODE)
            .flat_map(|s| s.spec.devices.clone().unwrap_or_default())
            .map(|d| d.name)
            .collect();
        if !devices.is_empty() {
            return devices;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("no devices published");
}

fn kill_term(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_panics_stops_the_agent_naming_it() {
    let world = World::new("mi300x-8gpu-8nic").await;
    // The refresh loop panics at its first periodic tick, a second in.
    let mut agent = world.start_agent_with(Some("refresh-tick"), &["--refresh-interval", "1"]);
    // Its sockets were up (the log outlives them); a kubelet registering
    // here could lose the race against the planned exit.
    agent
        .wait_log("DRA plugin serving", std::time::Duration::from_secs(20))
        .await;
    let status = wait_exit(&mut agent).await;
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(!status.success(), "{status:?}; log: {log}");
    // Logged by name. (The exit error may name another task: the
    // refresher's end also ends the tasks that follow its inventory.)
    let logged = log.lines().any(|l| {
        l.contains("critical task ended")
            && l.contains("task=\"refresher\"")
            && l.contains("how=panicked: fault injection at refresh-tick")
    });
    assert!(logged, "{log}");
    let dirs = world.dirs();
    assert!(
        !dirs.plugin.join("dra.sock").exists(),
        "stopped the orderly way: the kubelet sees the plugin go"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_burst_of_prepares_loses_no_prepared_claim() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let mut agent = world.start_agent(None);
    let kubelet = world.register().await;
    let devices = published_devices(&world).await;
    // Several claims a device, each prepared by a request of its own, as
    // the kubelet does for the pods starting on a node at once.
    let claims: Vec<ClaimRef> = (0..64)
        .map(|i| {
            let device = devices[i % devices.len()].as_str();
            world.claim(
                &format!("burst-{i}"),
                &[("nic", DRIVER, NODE, device)],
                json!([]),
            )
        })
        .collect();
    let (answered_tx, mut answered) = tokio::sync::mpsc::unbounded_channel();
    for claim in &claims {
        let (kubelet, claim, answered) = (kubelet.clone(), claim.clone(), answered_tx.clone());
        tokio::spawn(async move {
            let reply = kubelet.prepare_v1(std::slice::from_ref(&claim)).await;
            let _ = answered.send((claim, reply));
        });
    }
    drop(answered_tx);
    // SIGTERM as soon as the first answer is in: the rest are under way,
    // queued behind it, or not sent yet.
    let mut replies = vec![answered.recv().await.unwrap()];
    kill_term(agent.child.id());
    while let Some(reply) = answered.recv().await {
        replies.push(reply);
    }
    let status = wait_exit(&mut agent).await;
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(status.success(), "{status:?}; log: {log}");

    // What the kubelet was told is prepared, with its devices.
    let mut prepared = BTreeMap::new();
    for (claim, reply) in replies {
        let Ok(reply) = reply else { continue };
        let result = &reply.claims[&claim.uid];
        if result.error.is_empty() {
            prepared.insert(claim.uid.clone(), (claim, result.devices.clone()));
        }
    }
    assert!(!prepared.is_empty(), "at least the first answer");
    let checkpoint: BTreeSet<String> = world.checkpoint_claims().into_iter().collect();
    for uid in prepared.keys() {
        assert!(
            checkpoint.contains(uid),
            "claim {uid} was answered prepared but is not in the checkpoint"
        );
    }
    let specs: BTreeSet<String> = world
        .claim_specs()
        .iter()
        .map(|f| {
            f.trim_start_matches("ainic.amd.com-")
                .trim_end_matches(".json")
                .to_string()
        })
        .collect();
    assert_eq!(
        specs, checkpoint,
        "no half-prepared claim: a CDI spec for each checkpointed claim, none else"
    );

    // The restarted agent answers each from its checkpoint, unchanged.
    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    world.api.clear_requests();
    for (uid, (claim, devices)) in &prepared {
        let again = kubelet
            .prepare_v1(std::slice::from_ref(claim))
            .await
            .unwrap();
        assert_eq!(&again.claims[uid].devices, devices, "claim {uid}");
    }
    let claim_reads = world.claim_reads();
    assert_eq!(
        claim_reads, 0,
        "every answered claim came from the checkpoint"
    );
}

/// Without counter health nothing ever sends a verdict: the task that
/// nudges the publisher on verdicts must wait, not end (an end would be a
/// critical task failing, and the agent would stop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_counter_health_off_the_agent_keeps_running_until_sigterm() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let mut agent = world.start_agent_with(None, &["--health-counters=false"]);
    let kubelet = world.register().await;
    let devices = published_devices(&world).await;
    let claim = world.claim("one", &[("nic", DRIVER, NODE, &devices[0])], json!([]));
    let reply = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(reply.claims[&claim.uid].error, "");
    assert!(
        agent.child.try_wait().unwrap().is_none(),
        "the agent stopped on its own"
    );
    kill_term(agent.child.id());
    let status = wait_exit(&mut agent).await;
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(status.success(), "{status:?}; log: {log}");
    assert!(!log.contains("critical task ended"), "{log}");
}
