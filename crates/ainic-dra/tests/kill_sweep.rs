//! The kill-point sweep: for every kill point of prepare and unprepare
//! (`ainic_dra_node::faults::Point`, down to the steps of the CDI and
//! checkpoint writes) and every time the scenario below reaches it, the
//! agent is aborted there (like `kill -9`), restarted, and the kubelet's
//! retries run the scenario again. After each restart the CDI directory
//! and the checkpoint name the same claims; at the end nothing is left.

mod node_support;

use std::collections::BTreeSet;
use std::os::unix::process::ExitStatusExt;

use ainic_dra_node::faults::Point;
use serde_json::json;
use testkit::kubelet::{ClaimRef, DraPluginClient};

use node_support::{DRIVER, NODE, World, nic_config, wait_exit};

/// Two claims prepared, then unprepared, one call at a time, so that
/// every run reaches the points in the same order. `Err` when the agent
/// went away mid-call; a claim error is a test failure.
async fn scenario(kubelet: &DraPluginClient, a: &ClaimRef, b: &ClaimRef) -> Result<(), String> {
    for claim in [a, b] {
        let answer = kubelet
            .prepare_v1(std::slice::from_ref(claim))
            .await
            .map_err(|e| e.to_string())?;
        let error = &answer.claims[&claim.uid].error;
        assert!(error.is_empty(), "prepare {}: {error}", claim.name);
    }
    for claim in [a, b] {
        let answer = kubelet
            .unprepare_v1(std::slice::from_ref(claim))
            .await
            .map_err(|e| e.to_string())?;
        let error = &answer.claims[&claim.uid].error;
        assert!(error.is_empty(), "unprepare {}: {error}", claim.name);
    }
    Ok(())
}

/// Claim UIDs that own a spec in the CDI directory.
fn claims_with_specs(world: &World) -> BTreeSet<String> {
    world
        .cdi_files()
        .iter()
        .filter_map(|f| f.strip_prefix("ainic.amd.com-")?.strip_suffix(".json"))
        .map(str::to_string)
        .collect()
}

/// The claims with specs and those in the checkpoint once the restarted
/// agent has reconciled them: it registers before it owns its state
/// (a rolling update's new agent waits for the old one's lock), so for a
/// moment after registration the directory may still be as the kill left
/// it. Gives up after 30 s, returning what it saw last.
async fn reconciled(world: &World) -> (BTreeSet<String>, BTreeSet<String>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let specs = claims_with_specs(world);
        let checkpoint: BTreeSet<String> = world.checkpoint_claims().into_iter().collect();
        if specs == checkpoint || std::time::Instant::now() > deadline {
            return (specs, checkpoint);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Runs the scenario with the agent killed at the `n`th hit of `point`;
/// `false` when the scenario finished without reaching it.
async fn killed_at(point: Point, n: u32) -> bool {
    let label = format!("{}@{n}", point.name());
    let world = World::new("mi300x-8gpu-8nic").await;
    let a = world.claim("a", &[("nic", DRIVER, NODE, "pf-0000-04-00-0")], json!([]));
    let b = world.claim(
        "b",
        &[
            ("nic", DRIVER, NODE, "pf-0000-24-00-0"),
            ("nic", DRIVER, NODE, "pf-0000-44-00-0"),
        ],
        json!([nic_config("FromClass", json!({"umad": true}))]),
    );
    let mut agent = world.start_agent(Some(&label));
    let kubelet = world.register().await;
    if scenario(&kubelet, &a, &b).await.is_ok() {
        assert!(world.cdi_files().is_empty(), "{label}");
        return false;
    }
    let status = wait_exit(&mut agent).await;
    assert_eq!(status.signal(), Some(6), "{label}: aborted (SIGABRT)");
    drop(agent);

    let _agent = world.start_agent(None);
    let kubelet = world.register().await;
    let (specs, checkpoint) = reconciled(&world).await;
    assert_eq!(
        specs, checkpoint,
        "{label}: after the restart, specs and checkpoint name the same claims"
    );
    scenario(&kubelet, &a, &b)
        .await
        .unwrap_or_else(|e| panic!("{label}: retry: {e}"));
    assert!(
        world.cdi_files().is_empty(),
        "{label}: {:?}",
        world.cdi_files()
    );
    assert!(world.checkpoint_claims().is_empty(), "{label}");
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_any_point_of_prepare_or_unprepare_leaves_nothing_behind() {
    let mut swept = Vec::new();
    for point in Point::ALL.into_iter().chain(Point::COMPACTION) {
        let mut n = 1;
        while killed_at(point, n).await {
            swept.push(format!("{}@{n}", point.name()));
            n += 1;
        }
        assert!(n > 1, "the scenario never reaches {}", point.name());
    }
    eprintln!("{} kill points swept: {}", swept.len(), swept.join(" "));
    assert!(
        swept.len() >= 20,
        "only {} kill points: {swept:?}",
        swept.len()
    );
}
