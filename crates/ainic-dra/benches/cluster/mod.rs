//! What the testbed benchmarks share: fake nodes on the real control
//! plane, each with the slice `ainic-dra slices` publishes for the
//! 8-GPU/8-NIC MI300X node, created many requests at a time, and the
//! shipped DeviceClasses.
//!
//! Each bench uses a part of it.
#![allow(dead_code)]

use futures::future::join_all;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use testkit::testbed::{cluster, repo_root};

/// The bundled topology every fake node has.
pub const TOPOLOGY: &str = "mi300x-8gpu-8nic";
/// Requests in flight at once while filling the cluster.
pub const WIDTH: usize = 32;

/// The environment variable `name` as a number, `default` when unset.
pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `work`, [`WIDTH`] at a time.
pub async fn in_chunks<F: std::future::Future<Output = ()>>(work: Vec<F>) {
    let mut work = work.into_iter();
    loop {
        let chunk: Vec<F> = work.by_ref().take(WIDTH).collect();
        if chunk.is_empty() {
            return;
        }
        join_all(chunk).await;
    }
}

/// Our slices for `node` as the agent publishes them for [`TOPOLOGY`],
/// with `extra` arguments to `ainic-dra slices`.
pub fn agent_slices(node: &str, extra: &[&str]) -> Vec<ResourceSlice> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .args(["slices", "--topology", TOPOLOGY, "--node-name", node])
        .args(["--kubernetes-version", "1.37", "-o", "json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ainic-dra slices for {node}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Ready, untainted fake nodes named `names`.
pub async fn fake_nodes(client: &kube::Client, names: &[String]) {
    let labels = Default::default();
    in_chunks(
        names
            .iter()
            .map(|n| cluster::fake_node(client, n, &labels))
            .collect(),
    )
    .await;
}

/// Objects of a YAML file (multi-document).
pub fn documents(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.split("\n---")
        .filter_map(|doc| serde_yaml_ng::from_str::<Value>(doc).ok())
        .filter(|v| v.is_object())
        .collect()
}

/// The shipped DeviceClasses (deploy/deviceclasses) and one for the GPU
/// driver's devices (`gpu.amd.com`).
pub async fn classes(client: &kube::Client) {
    let api: Api<DeviceClass> = Api::all(client.clone());
    let mut all: Vec<Value> = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("deploy/deviceclasses")).unwrap() {
        all.extend(documents(&entry.unwrap().path()));
    }
    all.push(json!({"metadata": {"name": "gpu.amd.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.amd.com'"}}]}}));
    for class in all {
        let class: DeviceClass = serde_json::from_value(class).unwrap();
        api.create(&PostParams::default(), &class).await.unwrap();
    }
}

/// Appends `line` and a newline to the file `path` (made if missing).
pub fn append_line(path: &str, line: &Value) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("cannot open {path}: {e}"));
    std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()).unwrap();
}
