//! Issue 28: the agent's sockets answer the kubelet's own client stack.
//!
//! `kubelet-dial` (testbed/node-tools, built from kubelet 1.37.2's
//! `k8s.io/kubelet` API packages and grpc-go v1.82.1) dials every socket as
//! the kubelet's plugin manager does: `grpc.DialContext` with the bare
//! socket path and no `WithAuthority`, so grpc-go sends the percent-encoded
//! path as `:authority`. Before the fix each call below failed with
//! `RST_STREAM PROTOCOL_ERROR`; the same calls with authority `localhost`
//! (the DRA client, the device manager) must work too.

mod node_support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use testkit::fake_kubelet_dp::FakeKubelet;

use node_support::{DRIVER, NODE, World};

const PF0: &str = "pf-0000-04-00-0";

/// The two `:authority` forms a kubelet sends: none set (the path) and
/// `localhost`.
const AUTHORITIES: [Option<&str>; 2] = [None, Some("localhost")];

/// Runs `kubelet-dial` and parses its one JSON line; panics with its
/// stderr when it fails.
fn dial(authority: Option<&str>, args: &[&str]) -> Value {
    let bin = testkit::testbed::binaries("node-tools").join("kubelet-dial");
    let mut cmd = Command::new(&bin);
    if let Some(authority) = authority {
        cmd.args(["--authority", authority]);
    }
    let out = cmd.args(args).output().expect("run kubelet-dial");
    assert!(
        out.status.success(),
        "kubelet-dial {args:?} (authority {authority:?}) failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("kubelet-dial prints JSON")
}

async fn wait_for(path: &Path) {
    for _ in 0..1500 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{} never appeared", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_prepare_unprepare_and_health_answer_the_kubelets_grpc_go() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let _agent = world.start_agent(None);
    let dirs = world.dirs();
    let reg = dirs.registry.join(format!("{DRIVER}-reg.sock"));
    let dra = dirs.plugin.join("dra.sock");
    wait_for(&reg).await;
    let claim = world.claim("dialled", &[("nic", DRIVER, NODE, PF0)], json!([]));
    let claim_arg = format!("{}/{}/{}", claim.namespace, claim.name, claim.uid);
    let reg_arg = reg.to_str().unwrap();
    let dra_arg = dra.to_str().unwrap();
    for authority in AUTHORITIES {
        let info = dial(authority, &["register", "--socket", reg_arg]);
        assert_eq!(info["name"], DRIVER);
        assert_eq!(info["endpoint"], dra_arg);
        for api in ["v1", "v1beta1"] {
            let prepared = dial(
                authority,
                &[
                    "prepare", "--socket", dra_arg, "--api", api, "--claim", &claim_arg,
                ],
            );
            let result = &prepared["claims"][&claim.uid];
            assert_eq!(result["devices"][0]["device_name"], PF0, "{prepared}");
            assert_eq!(result["error"], Value::Null, "{prepared}");
            let undone = dial(
                authority,
                &[
                    "unprepare",
                    "--socket",
                    dra_arg,
                    "--api",
                    api,
                    "--claim",
                    &claim_arg,
                ],
            );
            assert_eq!(
                undone["claims"][&claim.uid]["error"],
                Value::Null,
                "{undone}"
            );
        }
        for api in ["v1", "v1alpha1"] {
            let health = dial(authority, &["health", "--socket", dra_arg, "--api", api]);
            let devices = health["devices"].as_array().expect("a device list");
            assert!(
                devices.iter().any(|d| d["device"]["device_name"] == PF0),
                "{health}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_device_plugin_socket_answers_the_kubelets_grpc_go() {
    let world = World::new("mi300x-8gpu-8nic").await;
    let plugins = world.tmp.path().join("device-plugins");
    let kubelet = FakeKubelet::start(&plugins).await.unwrap();
    let _agent = world.start_agent_with(
        None,
        &[
            "--device-plugin",
            "--device-plugin-dir",
            plugins.to_str().unwrap(),
        ],
    );
    let registered = kubelet
        .wait_for_registration("amd.com/nic", 1, Duration::from_secs(30))
        .await
        .unwrap();
    let socket = plugins.join(&registered.endpoint);
    for authority in AUTHORITIES {
        let answers = dial(
            authority,
            &["device-plugin", "--socket", socket.to_str().unwrap()],
        );
        assert_eq!(
            answers["devices"].as_array().map(Vec::len),
            Some(8),
            "{answers}"
        );
        let allocated = &answers["allocate"]["container_responses"][0];
        assert!(
            allocated["devices"]
                .as_array()
                .is_some_and(|d| !d.is_empty()),
            "Allocate gave the container devices: {answers}"
        );
    }
}
