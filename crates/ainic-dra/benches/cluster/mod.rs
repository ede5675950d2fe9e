//! What the testbed benchmarks share: fake nodes on the real control
//! plane, each with the slice `ainic-dra slices` publishes for the
//! 8-GPU/8-NIC MI300X node, created many requests at a time.

use futures::future::join_all;
use k8s_openapi::api::resource::v1::ResourceSlice;
use testkit::testbed::cluster;

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
