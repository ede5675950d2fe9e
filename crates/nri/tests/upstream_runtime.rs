//! The plugin against upstream's runtime side of NRI (`testbed/nri-runtime`,
//! containerd/nri's `pkg/adaptation`, the code containerd and CRI-O embed):
//! it registers, is configured and synchronized, and gets each pod sandbox
//! event with the pod's network namespace; a failing hook fails the
//! sandbox with its message; the runtime never drops the plugin.

use std::sync::{Arc, Mutex};

use nri::api::PodSandbox;
use nri::{Identity, PodHooks, network_namespace};
use testkit::nri_runtime::{NriRuntime, pod};

/// Records every hook call as `hook pod-uid netns`.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<String>>,
}

impl Recorder {
    fn note(&self, hook: &str, pod: &PodSandbox) {
        let netns = network_namespace(pod).unwrap_or("-");
        (self.seen.lock().unwrap()).push(format!("{hook} {} {netns}", pod.uid));
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

impl PodHooks for Recorder {
    async fn synchronize(&self, pods: Vec<PodSandbox>) {
        for pod in &pods {
            self.note("sync", pod);
        }
    }

    async fn run_pod_sandbox(&self, pod: PodSandbox) -> Result<(), String> {
        self.note("run", &pod);
        if pod.uid == "refused" {
            return Err(format!("pod {}: no netdev for you", pod.uid));
        }
        Ok(())
    }

    async fn stop_pod_sandbox(&self, pod: PodSandbox) {
        self.note("stop", &pod);
    }

    async fn remove_pod_sandbox(&self, pod: PodSandbox) {
        self.note("remove", &pod);
    }
}

fn ok_with_the_plugin(result: &serde_json::Value) {
    assert_eq!(result["ok"], true, "{result}");
    assert_eq!(
        result["plugins"], 1,
        "the runtime dropped the plugin: {result}"
    );
    assert!(result.get("deprecated").is_none(), "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_follows_pod_sandboxes_of_upstreams_runtime() {
    let running = pod("sb-old", "uid-old", "/run/netns/old");
    let mut runtime = NriRuntime::start(std::slice::from_ref(&running)).await;
    let hooks = Arc::new(Recorder::default());
    let identity = Identity::new("ainic-dra", "10").unwrap();
    let socket = runtime.socket.clone();
    let plugin = tokio::spawn({
        let hooks = hooks.clone();
        async move { nri::run(&socket, &identity, hooks).await }
    });
    ok_with_the_plugin(&runtime.wait_plugins(1).await);
    assert_eq!(hooks.take(), ["sync uid-old /run/netns/old"]);

    let new = pod("sb-new", "uid-new", "/run/netns/new");
    for op in ["run-pod", "stop-pod", "remove-pod"] {
        let result = runtime.pod_event(op, &new).await;
        ok_with_the_plugin(&result);
        println!(
            "{op}: {} µs round trip through the runtime",
            result["micros"]
        );
    }
    assert_eq!(
        hooks.take(),
        [
            "run uid-new /run/netns/new",
            "stop uid-new /run/netns/new",
            "remove uid-new /run/netns/new"
        ]
    );

    let refused = runtime
        .pod_event("run-pod", &pod("sb-x", "refused", ""))
        .await;
    assert_eq!(refused["ok"], false, "{refused}");
    let error = refused["error"].as_str().unwrap();
    assert!(error.contains("pod refused: no netdev for you"), "{error}");
    assert_eq!(refused["plugins"], 1, "{refused}");

    runtime.stop().await;
    // The plugin's connection ends with the runtime.
    let ended = tokio::time::timeout(std::time::Duration::from_secs(10), plugin).await;
    assert!(ended.is_ok(), "the plugin did not notice the runtime going");
}
