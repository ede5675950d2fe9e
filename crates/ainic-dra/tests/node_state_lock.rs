//! Issue 29 item 7: two node agents on one state directory must not both
//! run. The real `ainic-dra node` binary, twice on the same directories:
//! the second exits at once naming the directory and the first one's PID,
//! without touching the first one's sockets; with `--state-lock-wait` it
//! waits instead and takes over once the first exits (the mode for a new
//! pod of a rolling update starting beside the old one).

mod node_support;

use serde_json::json;

use node_support::{DRIVER, NODE, World, wait_exit};

const PF0: &str = "pf-0000-04-00-0";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_agent_on_one_state_dir_exits_naming_it_and_the_holder() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let first = world.start_agent(None);
    let kubelet = world.register().await;
    let mut second = world.start_agent(None);
    let status = wait_exit(&mut second).await;
    assert!(!status.success());
    let log = std::fs::read_to_string(&second.log).unwrap();
    let dir = world.dirs().state.display().to_string();
    assert!(
        log.contains(&format!("state directory {dir} is in use")),
        "{log}"
    );
    assert!(log.contains(&format!("pid {}", first.child.id())), "{log}");
    // The first one still serves on its own sockets.
    let claim = world.claim("c", &[("nic", DRIVER, NODE, PF0)], json!([]));
    let done = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(done.claims[&claim.uid].error, "");
    assert_eq!(world.checkpoint_claims(), std::slice::from_ref(&claim.uid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_lock_wait_the_second_agent_takes_over_when_the_first_exits() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let first = world.start_agent(None);
    let kubelet = world.register().await;
    let claim = world.claim("c", &[("nic", DRIVER, NODE, PF0)], json!([]));
    let done = kubelet
        .prepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(done.claims[&claim.uid].error, "");
    let mut second = world.start_agent_with(None, &["--state-lock-wait", "60"]);
    // It waits (it would have exited at once without the flag)...
    let ten_seconds = std::time::Duration::from_secs(10);
    second.wait_log("waiting for it to exit", ten_seconds).await;
    assert!(second.child.try_wait().unwrap().is_none(), "waiting");
    // ...and serves once the first is gone, from the same checkpoint.
    drop(first);
    let kubelet = world.register().await;
    let undone = kubelet
        .unprepare_v1(std::slice::from_ref(&claim))
        .await
        .unwrap();
    assert_eq!(undone.claims[&claim.uid].error, "");
    assert!(world.checkpoint_claims().is_empty());
    assert!(second.child.try_wait().unwrap().is_none());
}
