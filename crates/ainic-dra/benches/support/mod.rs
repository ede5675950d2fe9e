//! What the agent benchmarks share: the real `ainic-dra node` started
//! against the API server stand-in, with its directories in one place.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// Makes `dir/cdi` and `dir/metadata` links to new directories on tmpfs
/// (`/dev/shm`), where a node keeps its CDI specs (`/var/run/cdi`) and the
/// agent its device-metadata files (`/var/run/ainic-dra`); removed when the
/// returned guards drop. Empty (and the directories left to the agent, on
/// the disk) without tmpfs.
pub fn tmpfs_dirs(dir: &Path) -> Vec<tempfile::TempDir> {
    let link = |name: &str| {
        let shm = tempfile::tempdir_in("/dev/shm").ok()?;
        std::os::unix::fs::symlink(shm.path(), dir.join(name)).ok()?;
        Some(shm)
    };
    ["cdi", "metadata"].into_iter().filter_map(link).collect()
}

/// Whether `binary`'s `node` command takes `flag`: an older build, run to
/// compare, may not.
fn takes_flag(binary: &str, flag: &str) -> bool {
    let help = Command::new(binary).args(["node", "--help"]).output();
    help.is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains(flag))
}

/// The agent on `sysfs` with its directories under `dir` (its registry at
/// `dir/registry`) and `extra` flags; `quiet` drops its log. Built before
/// a start is timed: it asks the binary which flags it takes.
///
/// `AGENT_BENCH_WRAPPER` (words split on spaces, e.g.
/// `heaptrack -o /tmp/agent`) runs the agent under a profiler; the
/// figures the bench reads from `/proc` are then the wrapper's.
pub fn agent_command(
    dir: &Path,
    sysfs: &Path,
    kubeconfig: &Path,
    extra: &[&str],
    quiet: bool,
) -> Command {
    let wrapper = std::env::var("AGENT_BENCH_WRAPPER").unwrap_or_default();
    // Another build of the agent (e.g. an older commit's) to compare in
    // the same run and on the same disk.
    let binary = std::env::var("AGENT_BENCH_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_ainic-dra").to_string());
    let mut words = wrapper.split_whitespace();
    let mut command = match words.next() {
        Some(program) => {
            let mut command = Command::new(program);
            command.args(words).arg(&binary);
            command
        }
        None => Command::new(&binary),
    };
    let metadata = dir.join("metadata");
    let mut metadata_dir = vec![];
    if takes_flag(&binary, "--metadata-dir") {
        metadata_dir = vec![std::ffi::OsStr::new("--metadata-dir"), metadata.as_os_str()];
    }
    command
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
        .args(metadata_dir)
        .args(extra)
        .stdin(Stdio::null())
        .stderr(if quiet {
            Stdio::null()
        } else {
            Stdio::inherit()
        });
    command
}

/// `VmRSS` of `pid`, and its heap and stacks (`RssAnon`) apart from the
/// mapped binary and libraries (`RssFile`).
pub fn rss(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        (status.lines().find(|l| l.starts_with(name)))
            .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    format!(
        "{} (anon {}, file {})",
        field("VmRSS:"),
        field("RssAnon:"),
        field("RssFile:")
    )
}
