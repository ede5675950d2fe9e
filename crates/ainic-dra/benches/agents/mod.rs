//! Real node agents (`ainic-dra node`) on fake nodes of the testbed, each
//! reading the MI300X topology as its sysfs, for measuring what agents ask
//! of the API server when nothing changes. They use the testbed's admin
//! kubeconfig: what an agent asks for does not depend on who it is.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use testkit::testbed::{Testbed, wait};

use super::cluster::TOPOLOGY;

/// What each agent logs when its slices are written.
const PUBLISHED: &str = "published resource slices";

/// One agent process, killed on drop.
pub struct Agent {
    node: String,
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Agent {
    /// Starts the agent of fake node `node`, following DaemonSet
    /// `daemonset` (`NAMESPACE/NAME`) as the chart's agents do, with
    /// `flags` besides.
    pub fn start(bed: &Testbed, node: &str, daemonset: &str, flags: &[&str]) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        let yaml = testkit::fixture::bundled_by_name(TOPOLOGY).expect("bundled topology");
        (testkit::fixture::Topology::from_yaml(yaml).unwrap())
            .render(&base.join("sys"))
            .unwrap();
        std::fs::create_dir_all(base.join("dev")).unwrap();
        // Kept after the bench when `SCALE_AGENT_LOGS` names a directory.
        let log = match std::env::var("SCALE_AGENT_LOGS") {
            Ok(dir) => Path::new(&dir).join(format!("{node}.log")),
            Err(_) => base.join("agent.log"),
        };
        let level = std::env::var("SCALE_AGENT_LOG").unwrap_or_else(|_| "info".into());
        // Another build of the agent, to compare: `SCALE_AGENT_BIN`.
        let bin = std::env::var("SCALE_AGENT_BIN");
        let child = Command::new(bin.as_deref().unwrap_or(env!("CARGO_BIN_EXE_ainic-dra")))
            .args(["--log", &level, "node", "--node-name", node])
            .args(["--http-addr", "", "--daemonset", daemonset])
            .arg("--kubeconfig")
            .arg(bed.kubeconfig())
            .args(dirs(base))
            .args(flags)
            .env_remove("AINIC_DRA_FAULT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start ainic-dra node");
        Agent {
            node: node.to_string(),
            child,
            log,
            _dir: dir,
        }
    }

    /// Its log so far.
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panics with its log if it exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "the agent of {} exited ({status}):\n{}",
                self.node,
                self.log()
            );
        }
    }

    /// Waits until it has written its slices.
    pub async fn published(&mut self, limit: Duration) {
        let what = format!("the agent of {} to publish", self.node);
        wait::until(&what, limit, || {
            self.assert_running();
            let log = self.log();
            let done = if log.contains(PUBLISHED) {
                Ok(())
            } else {
                Err(log)
            };
            async move { done }
        })
        .await;
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The agent's sysfs, device, plugin, CDI, metadata and state directories under `base`.
fn dirs(base: &Path) -> Vec<String> {
    let at = |dir: &str| base.join(dir).display().to_string();
    [
        ("--sysfs-root", "sys"),
        ("--dev-root", "dev"),
        ("--plugin-dir", "plugins/ainic.amd.com"),
        ("--registry-dir", "plugins_registry"),
        ("--cdi-dir", "cdi"),
        ("--metadata-dir", "metadata"),
        ("--state-dir", "state"),
    ]
    .into_iter()
    .flat_map(|(flag, dir)| [flag.to_string(), at(dir)])
    .collect()
}
