//! The testbed's real nodes from the tests' side (`scripts/testbed up
//! --nodes N`, see `scripts/testbed-node`): the chart installed by the real
//! helm with the values that fit the nodes, `kubectl` as the admin, and
//! commands run inside a node (its mount namespace: `crictl`, `ctr`, its
//! files).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Testbed, binaries, helm, repo_root};

/// The agent's image archive, which the real nodes import:
/// `AINIC_AGENT_IMAGE` if set, else built once per test process by
/// `scripts/image build` (the release build the Dockerfile makes; nothing to
/// do when `./scripts/test` built it just before), so a test never runs an
/// image older than the code.
pub fn agent_image() -> PathBuf {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("AINIC_AGENT_IMAGE") {
                return PathBuf::from(path);
            }
            // scripts/image drops what cargo gives this test (CARGO_PKG_*,
            // OUT_DIR) from its release build's environment, so that build
            // finds the one `./scripts/test` made just before up to date.
            let out = Command::new(repo_root().join("scripts/image"))
                .arg("build")
                .stderr(Stdio::inherit())
                .output()
                .expect("run scripts/image build");
            assert!(
                out.status.success(),
                "scripts/image build failed ({}); see its output above",
                out.status
            );
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        })
        .clone()
}

impl Testbed {
    /// The directory of node K (`node-K`): its configs, and `fs/`, the
    /// files that its fixed paths show inside it.
    pub fn node_dir(&self, k: usize) -> PathBuf {
        self.dir.join(format!("nodes/node-{k}"))
    }

    /// A host path as node K sees it (`/var/lib/kubelet/...`), on the host.
    pub fn node_path(&self, k: usize, path: &str) -> PathBuf {
        self.node_dir(k)
            .join("fs")
            .join(path.trim_start_matches('/'))
    }

    /// Runs `args` inside node K (its mount namespace and cgroups).
    pub fn in_node(&self, k: usize, args: &[&str]) -> Output {
        Command::new(self.node_dir(k).join("in-node"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {args:?} in node-{k}: {e}"))
    }

    /// Runs the testbed's kubectl as the admin; `Err` carries its stderr.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        self.kubectl_stdin(args, None)
    }

    /// Like [`Testbed::kubectl`], feeding `stdin` (e.g. `apply -f -`).
    pub fn kubectl_stdin(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        use std::io::Write;
        let mut child = Command::new(binaries(KUBECTL_SET).join("kubectl"))
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        if let Some(text) = stdin {
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())
                .expect("write kubectl's stdin");
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().expect("kubectl output");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// `kubectl apply -f -` of `yaml`; panics with kubectl's message.
    pub fn apply(&self, yaml: &str) {
        self.kubectl_stdin(&["apply", "-f", "-"], Some(yaml))
            .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    }

    /// `kubectl get ... -o json`, parsed.
    pub fn get_json(&self, args: &[&str]) -> Result<Value, String> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let text = self.kubectl(&all)?;
        serde_json::from_str(&text).map_err(|e| format!("kubectl printed no JSON: {e}"))
    }

    /// Installs the chart as `release` into `namespace` with the values
    /// that fit the real nodes (`DIR/node-values.yaml`) plus `values`,
    /// waiting for its pods to be ready.
    pub fn install_chart(&self, release: &str, namespace: &str, values: &Value) {
        let extra = helm::values_file(values);
        let chart = repo_root().join("deploy/helm/ainic-dra");
        let node_values = self.dir.join("node-values.yaml");
        self.helm(&[
            "install",
            release,
            chart.to_str().expect("UTF-8 path"),
            "--namespace",
            namespace,
            "--create-namespace",
            "-f",
            node_values.to_str().expect("UTF-8 path"),
            "-f",
            extra.path().to_str().expect("UTF-8 path"),
            "--wait",
            "--timeout",
            "120s",
        ])
        .unwrap_or_else(|e| panic!("{e}\nagent logs:\n{}", self.agent_logs(namespace)));
        self.wait_agents(namespace);
    }

    /// Upgrades release `release` in `namespace` to the chart of the work
    /// tree with the real nodes' values plus `values` (all given again, as
    /// `--reuse-values` would miss values the new chart added); does not
    /// wait for the rollout ([`Testbed::wait_agents`]).
    pub fn upgrade_chart(&self, release: &str, namespace: &str, values: &Value) {
        let extra = helm::values_file(values);
        let chart = repo_root().join("deploy/helm/ainic-dra");
        let node_values = self.dir.join("node-values.yaml");
        self.helm(&[
            "upgrade",
            release,
            chart.to_str().expect("UTF-8 path"),
            "--namespace",
            namespace,
            "-f",
            node_values.to_str().expect("UTF-8 path"),
            "-f",
            extra.path().to_str().expect("UTF-8 path"),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Runs the real helm with `args` against this testbed (`--kubeconfig`
    /// added); `Err` carries its stderr.
    pub fn helm(&self, args: &[&str]) -> Result<String, String> {
        let kubeconfig = self.kubeconfig();
        let mut all = args.to_vec();
        all.extend(["--kubeconfig", kubeconfig.to_str().expect("UTF-8 path")]);
        helm::run(&all)
    }

    /// Waits until the node agents' DaemonSet in `namespace` has rolled out:
    /// one agent per node, none terminating (a surge leaves an old one
    /// beside each new one for a while), all Ready.
    pub fn wait_agents(&self, namespace: &str) {
        self.kubectl(&[
            "rollout",
            "status",
            "daemonset",
            "-n",
            namespace,
            "--timeout=180s",
        ])
        .unwrap_or_else(|e| panic!("{e}\nagent logs:\n{}", self.agent_logs(namespace)));
        let start = Instant::now();
        while !self.agents_settled(namespace) {
            assert!(
                start.elapsed() < Duration::from_secs(180),
                "the node agents did not settle (one per node, Ready, none terminating) within 180 s\nagent logs:\n{}",
                self.agent_logs(namespace)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn agents_settled(&self, namespace: &str) -> bool {
        let selector = "app.kubernetes.io/component=node-agent";
        let (Ok(sets), Ok(pods)) = (
            self.get_json(&["get", "daemonset", "-n", namespace]),
            self.get_json(&["get", "pod", "-n", namespace, "-l", selector]),
        ) else {
            return false;
        };
        let want: u64 = (sets["items"].as_array().into_iter().flatten())
            .filter_map(|d| d["status"]["desiredNumberScheduled"].as_u64())
            .sum();
        let pods = pods["items"].as_array().cloned().unwrap_or_default();
        let ready = |p: &Value| {
            (p["status"]["conditions"].as_array().into_iter().flatten())
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        };
        pods.len() as u64 == want
            && pods
                .iter()
                .all(|p| p["metadata"]["deletionTimestamp"].is_null() && ready(p))
    }

    /// Runs the testbed's `ctr` inside node K (containerd's `k8s.io`
    /// namespace, where the kubelet's images and containers are).
    pub fn ctr(&self, k: usize, args: &[&str]) -> Output {
        let ctr = binaries("containerd").join("ctr");
        let mut all = vec![ctr.to_str().expect("UTF-8 path"), "-n", "k8s.io"];
        all.extend(args);
        self.in_node(k, &all)
    }

    /// Runs the testbed's `crictl` inside node K against its containerd.
    pub fn crictl(&self, k: usize, args: &[&str]) -> Output {
        let crictl = binaries("crictl").join("crictl");
        let mut all = vec![
            crictl.to_str().expect("UTF-8 path"),
            "--runtime-endpoint",
            "unix:///run/containerd/containerd.sock",
        ];
        all.extend(args);
        self.in_node(k, &all)
    }

    /// Restarts `part` of node K as an operator would: `kubelet`,
    /// `containerd` (containers live on) or `reboot` (see `scripts/testbed
    /// restart`).
    pub fn restart(&self, k: usize, part: &str) {
        let node = format!("node-{k}");
        let out = Command::new(repo_root().join("scripts/testbed"))
            .args(["restart", "--dir", self.dir.to_str().expect("UTF-8 path")])
            .args([node.as_str(), part])
            .output()
            .expect("run scripts/testbed restart");
        assert!(
            out.status.success(),
            "scripts/testbed restart {node} {part} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The agents' logs in `namespace` (for assertion messages).
    pub fn agent_logs(&self, namespace: &str) -> String {
        self.kubectl(&[
            "logs",
            "-n",
            namespace,
            "-l",
            "app.kubernetes.io/name=ainic-dra",
            "--all-containers",
            "--tail",
            "40",
            "--prefix",
        ])
        .unwrap_or_else(|e| e)
    }

    /// Waits until pod `name` in `namespace` is in `phase` (e.g.
    /// `Running`, `Succeeded`); its JSON. Panics after `timeout` with the
    /// pod's status and events.
    pub fn wait_pod(&self, namespace: &str, name: &str, phase: &str, timeout: Duration) -> Value {
        let start = Instant::now();
        loop {
            if let Ok(pod) = self.get_json(&["get", "pod", "-n", namespace, name])
                && pod["status"]["phase"] == phase
            {
                return pod;
            }
            if start.elapsed() > timeout {
                let describe = self
                    .kubectl(&["describe", "pod", "-n", namespace, name])
                    .unwrap_or_else(|e| e);
                panic!("pod {namespace}/{name} not {phase} within {timeout:?}:\n{describe}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Polls `check` until it returns `Some`, or panics with `what` after
    /// `timeout`.
    pub fn eventually<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut() -> Option<T>,
    ) -> T {
        let start = Instant::now();
        loop {
            if let Some(value) = check() {
                return value;
            }
            assert!(start.elapsed() < timeout, "{what}: not within {timeout:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The kubelet's log of node K.
    pub fn kubelet_log(&self, k: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("logs/node-{k}-kubelet.log")))
            .unwrap_or_default()
    }

    /// Files in a directory of node K (e.g. its CDI dir), sorted.
    pub fn node_files(&self, k: usize, path: &str) -> Vec<String> {
        list(&self.node_path(k, path))
    }
}

/// The set holding kubectl (the newest release's; it speaks to both).
const KUBECTL_SET: &str = "kube-1.37";

fn list(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
