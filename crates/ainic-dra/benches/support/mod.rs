//! What the agent benchmarks share: the real `ainic-dra node` started
//! against the API server stand-in, with its directories in one place.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use k8s_openapi::api::core::v1::Node;
use testkit::apiserver::ApiServer;

/// The node the agent runs as.
pub const NODE: &str = "node-a";

/// The API server stand-in holding [`NODE`], and a kubeconfig for it
/// written into `dir`.
pub async fn api_with_node(dir: &Path) -> (ApiServer, PathBuf) {
    let api = ApiServer::start().await.unwrap();
    let node: Node =
        serde_json::from_value(serde_json::json!({"metadata": {"name": NODE}})).unwrap();
    api.seed(&node);
    let kubeconfig = dir.join("kubeconfig");
    write_kubeconfig(&kubeconfig, &api.url());
    (api, kubeconfig)
}

/// A kubeconfig naming the stand-in at `server`, without credentials.
fn write_kubeconfig(path: &Path, server: &str) {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: s\n  cluster:\n    server: {server}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: s\n    user: u\ncurrent-context: c\n"
    );
    std::fs::write(path, text).unwrap();
}

/// Starts the agent on `sysfs` with its directories under `dir` (its
/// registry at `dir/registry`) and `extra` flags; `quiet` drops its log.
pub fn start_agent(
    dir: &Path,
    sysfs: &Path,
    kubeconfig: &Path,
    extra: &[&str],
    quiet: bool,
) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .args(["node", "--node-name", NODE, "--http-addr", ""])
        .arg("--sysfs-root")
        .arg(sysfs)
        .arg("--dev-root")
        .arg(dir.join("dev"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--plugin-dir")
        .arg(dir.join("plugin"))
        .arg("--registry-dir")
        .arg(dir.join("registry"))
        .arg("--cdi-dir")
        .arg(dir.join("cdi"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(extra)
        .stdin(Stdio::null())
        .stderr(if quiet {
            Stdio::null()
        } else {
            Stdio::inherit()
        })
        .spawn()
        .unwrap()
}
