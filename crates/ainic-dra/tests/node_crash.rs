//! Crash safety of prepare/unprepare: the agent is killed at chosen points
//! (fault injection aborts the process, like `kill -9`) or by a real
//! SIGKILL in the middle of a burst, restarted, and the kubelet's retry
//! plus unprepare must leave the CDI dir and the checkpoint clean.

mod node_support;

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use serde_json::json;
use testkit::kubelet::ClaimRef;

use node_support::{DRIVER, NODE, World, wait_exit};

const PF0: &str = "pf-0000-04-00-0";

async fn crash_during_prepare(point: &str) {
    let world = World::new("mi300x-8gpu-8nic").await;
    let claim = world.claim("c", &[("nic", DRIVER, NODE, PF0)], json!([]));
    let mut agent = world.start_agent(Some(point));
    let kubelet = world.register().await;
    assert!(
        kubelet
            .prepare_v1(std::slice::from_ref(&claim))
            .await
            .is_err(),
        "{point}: the call dies with the agent"
    );
    let status = wait_exit(&mut agent).await;
    assert_eq!(status.signal(), Some(6), "{point}: aborted (SIGABRT)");
    drop(agent);

    let agent = world.start_agent(None);
    let kubelet = world.register().await;
    agent.wait_reconciled().await;
    // Once the restarted agent owns its state (before it answers a
    // prepare), at most the finished claim's spec and metadata are there
    // (an unfinished one's metadata, written first, is an orphan and goes).
    let expected_after_restart: Vec<String> = if point == "prepare-after-checkpoint" {
        vec![
            format!("ainic.amd.com-{}.json", claim.uid),
            format!("ainic.amd.com_metadata_{}_nic.json", claim.uid),
        ]
    } else {
        vec![]
    };
    assert_eq!(
        world.cdi_files(),
        expected_after_restart,
        "{point}: after restart"
    );
    let retry = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(retry.claims[&claim.uid].error, "", "{point}");
    assert_eq!(retry.claims[&claim.uid].devices[0].device_name, PF0);
    assert_eq!(world.claim_specs().len(), 1);
    kubelet
        .unprepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert!(
        world.cdi_files().is_empty(),
        "{point}: {:?}",
        world.cdi_files()
    );
    assert!(world.checkpoint_claims().is_empty(), "{point}");
}

async fn crash_during_unprepare(point: &str) {
    let world = World::new("mi300x-8gpu-8nic").await;
    let claim = world.claim("c", &[("nic", DRIVER, NODE, PF0)], json!([]));
    {
        let _agent = world.start_agent(None);
        let kubelet = world.register().await;
        let done = kubelet
            .prepare_v1(std::slice::from_ref(&claim))
            .await
            .unwrap();
        assert_eq!(done.claims[&claim.uid].error, "");
    } // SIGKILL
    let mut agent = world.start_agent(Some(point));
    let kubelet = world.register().await;
    assert!(
        kubelet
            .unprepare_v1(std::slice::from_ref(&claim))
            .await
            .is_err(),
        "{point}"
    );
    wait_exit(&mut agent).await;
    drop(agent);

    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    let retry = kubelet
        .unprepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(retry.claims[&claim.uid].error, "", "{point}");
    assert!(
        world.cdi_files().is_empty(),
        "{point}: {:?}",
        world.cdi_files()
    );
    assert!(world.checkpoint_claims().is_empty(), "{point}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_before_writing_the_cdi_spec() {
    crash_during_prepare("prepare-before-cdi").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_cdi_spec_and_checkpoint() {
    crash_during_prepare("prepare-after-cdi").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_checkpoint_before_answering() {
    crash_during_prepare("prepare-after-checkpoint").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_the_start_of_unprepare() {
    crash_during_unprepare("unprepare-before-cdi").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_removing_the_spec_and_the_checkpoint_entry() {
    crash_during_unprepare("unprepare-after-cdi").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_in_the_middle_of_a_burst_then_retry_all() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let devices = [
        "pf-0000-04-00-0",
        "pf-0000-24-00-0",
        "pf-0000-44-00-0",
        "pf-0000-64-00-0",
    ];
    // More claims than devices, so with admin access: the agent refuses a
    // second exclusive claim on one device.
    let claims: Vec<ClaimRef> = (0..24)
        .map(|i| {
            world.seed(
                serde_json::from_value(json!({
                    "metadata": {"namespace": "default", "name": format!("c{i}")},
                    "spec": {"devices": {"requests": []}},
                    "status": {"allocation": {"devices": {"results": [{"request": "nic",
                        "driver": DRIVER, "pool": NODE, "device": devices[i % 4], "adminAccess": true}]}}},
                }))
                .unwrap(),
            )
        })
        .collect();
    let mut agent = world.start_agent(None);
    let kubelet = world.register().await;
    let burst: Vec<_> = claims
        .iter()
        .map(|c| {
            let kubelet = kubelet.clone();
            let c = c.clone();
            tokio::spawn(async move { kubelet.prepare_v1(&[c]).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(15)).await;
    agent.child.kill().unwrap(); // SIGKILL
    agent.child.wait().unwrap();
    for call in burst {
        let _ = call.await.unwrap();
    }
    drop(agent);

    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    let retry = kubelet.prepare_v1(&claims).await.unwrap();
    assert!(retry.claims.values().all(|r| r.error.is_empty()));
    assert_eq!(world.claim_specs().len(), claims.len());
    let undone = kubelet.unprepare_v1(&claims).await.unwrap();
    assert!(undone.claims.values().all(|r| r.error.is_empty()));
    assert!(world.cdi_files().is_empty());
    assert!(world.checkpoint_claims().is_empty());
}

/// A claim deleted while the agent was down (so never unprepared) is
/// found by the orphan sweep after the restart, and its device is free
/// for the next claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_deleted_while_the_agent_was_down_is_swept() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let pf = "pf-0000-04-00-0";
    let old = world.claim("old", &[("nic", DRIVER, NODE, pf)], json!([]));
    let agent = world.start_agent(None);
    let kubelet = world.register().await;
    let answer = kubelet
        .prepare_v1(std::slice::from_ref(&old))
        .await
        .unwrap();
    assert!(answer.claims.values().all(|r| r.error.is_empty()));
    drop(agent);

    let claims: kube::Api<k8s_openapi::api::resource::v1::ResourceClaim> =
        kube::Api::namespaced(world.api.client(), "default");
    claims.delete("old", &Default::default()).await.unwrap();
    let _agent = world.start_agent_with(None, &["--orphan-sweep-interval", "1"]);
    let kubelet = world.register().await;
    let new = world.claim("new", &[("nic", DRIVER, NODE, pf)], json!([]));
    for _ in 0..200 {
        if world.checkpoint_claims().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        world.checkpoint_claims().is_empty(),
        "the sweep left {:?}",
        world.checkpoint_claims()
    );
    assert!(world.cdi_files().is_empty());
    let answer = kubelet
        .prepare_v1(std::slice::from_ref(&new))
        .await
        .unwrap();
    assert!(
        answer.claims.values().all(|r| r.error.is_empty()),
        "{answer:?}"
    );
}

/// `(path, major:minor)` of the verbs device in claim `uid`'s CDI spec.
fn verbs_in_spec(world: &World, uid: &str) -> (String, String) {
    let file = world.dirs().cdi.join(format!("ainic.amd.com-{uid}.json"));
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let node = &spec["devices"][0]["containerEdits"]["deviceNodes"][0];
    (
        node["path"].as_str().unwrap().to_string(),
        format!("{}:{}", node["major"], node["minor"]),
    )
}

/// Gives the verbs device at `path` new numbers in the sysfs tree, as a
/// driver reload or reboot does.
fn renumber(world: &World, path: &str, numbers: &str) {
    let name = path.rsplit('/').next().unwrap();
    let dev = world
        .sysfs
        .join(format!("class/infiniband_verbs/{name}/dev"));
    assert!(dev.exists(), "{}", dev.display());
    std::fs::write(dev, format!("{numbers}\n")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renumbered_devices_never_reach_a_spec_after_a_restart_or_while_running() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let claim = world.claim("c", &[("nic", DRIVER, NODE, PF0)], json!([]));
    let agent = world.start_agent(None);
    let kubelet = world.register().await;
    let first = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(first.claims[&claim.uid].error, "");
    let (path, before) = verbs_in_spec(&world, &claim.uid);
    drop(agent);

    // Rebooted with other numbers: the start-up check rebuilds the spec
    // as the agent takes its state over, before it answers the kubelet.
    renumber(&world, &path, "231:250");
    let agent = world.start_agent_with(
        None,
        &["--refresh-interval", "1", "--full-rescan-interval", "1"],
    );
    let kubelet = world.register().await;
    agent.wait_reconciled().await;
    assert_eq!(
        verbs_in_spec(&world, &claim.uid),
        (path.clone(), "231:250".into()),
        "was {before}"
    );
    let again = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(again.claims[&claim.uid], first.claims[&claim.uid]);

    // Renumbered while the agent runs: the next inventory refresh rebuilds it.
    renumber(&world, &path, "231:251");
    // The agent writes the spec before it counts the rebuild, so wait for
    // both: one rebuild at start-up, one after the refresh.
    let rebuilt_twice = "ainic_dra_cdi_specs_rebuilt_total 2";
    let mut metrics = String::new();
    for _ in 0..200 {
        metrics = node_support::http_get(&agent.http, "/metrics").await.1;
        if verbs_in_spec(&world, &claim.uid).1 == "231:251" && metrics.contains(rebuilt_twice) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(verbs_in_spec(&world, &claim.uid).1, "231:251");
    assert!(metrics.contains(rebuilt_twice), "{metrics}");
    kubelet
        .unprepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert!(world.cdi_files().is_empty());
    assert!(world.checkpoint_claims().is_empty());
}

/// Issue 31 item 4: after a reboot (another boot ID) the agent rebuilds
/// every prepared claim's spec from today's devices into the emptied CDI
/// dir, and asks the API server about its claims at once, so a claim
/// deleted while the node was down is unprepared without waiting for the
/// sweep interval.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_rebuilds_specs_and_sweeps_claims_deleted_meanwhile_at_once() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let boot = world.tmp.path().join("boot_id");
    std::fs::write(&boot, "boot-before\n").unwrap();
    let boot_flag = ["--boot-id-file", boot.to_str().unwrap()];
    let kept = world.claim("kept", &[("nic", DRIVER, NODE, PF0)], json!([]));
    let gone = world.claim(
        "gone",
        &[("nic", DRIVER, NODE, "pf-0000-24-00-0")],
        json!([]),
    );
    let agent = world.start_agent_with(None, &boot_flag);
    let kubelet = world.register().await;
    let answer = kubelet
        .prepare_v1(&[kept.clone(), gone.clone()])
        .await
        .unwrap();
    assert!(
        answer.claims.values().all(|r| r.error.is_empty()),
        "{answer:?}"
    );
    let (path, before) = verbs_in_spec(&world, &kept.uid);
    drop(agent);

    // The reboot: a new boot ID, the CDI dir (tmpfs) empty, other device
    // numbers, and a claim deleted meanwhile.
    std::fs::write(&boot, "boot-after\n").unwrap();
    for file in world.cdi_files() {
        std::fs::remove_file(world.dirs().cdi.join(file)).unwrap();
    }
    renumber(&world, &path, "231:240");
    let claims: kube::Api<k8s_openapi::api::resource::v1::ResourceClaim> =
        kube::Api::namespaced(world.api.client(), "default");
    claims.delete("gone", &Default::default()).await.unwrap();

    let agent = world.start_agent_with(None, &boot_flag);
    world.register().await;
    // Registered is not yet reconciled: the agent serves its sockets first
    // (calls wait) and rebuilds the specs once it owns its state.
    let spec = world
        .dirs()
        .cdi
        .join(format!("ainic.amd.com-{}.json", kept.uid));
    for _ in 0..200 {
        if spec.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        verbs_in_spec(&world, &kept.uid),
        (path, "231:240".into()),
        "rebuilt from today's devices (was {before})"
    );
    for _ in 0..200 {
        if world.checkpoint_claims() == [kept.uid.clone()] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(world.checkpoint_claims(), std::slice::from_ref(&kept.uid));
    assert_eq!(
        world.claim_specs(),
        [format!("ainic.amd.com-{}.json", kept.uid)]
    );
    let log = std::fs::read_to_string(&agent.log).unwrap();
    assert!(log.contains("the node rebooted"), "{log}");
}
