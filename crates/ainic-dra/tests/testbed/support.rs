//! What the testbed tests share: the chart installed once per control
//! plane by the real helm, fake nodes with real `ainic-dra node` agents
//! authenticated as the chart's service account, and small readers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::Api;
use kube::api::ListParams;
use testkit::testbed::{self, Testbed, cluster, wait};
use tokio::sync::OnceCell;

/// The driver name.
pub const DRIVER: &str = "ainic.amd.com";
/// Namespace and service account the chart installs the agent as.
pub const NAMESPACE: &str = "ainic-system";
/// The chart's release name, which is also its objects' base name.
pub const RELEASE: &str = "ainic-dra";
/// The agent's service account (the chart's default: the release name).
pub const ACCOUNT: &str = "ainic-dra";

/// The 1.37 defaults of the gates that change what the agent publishes.
pub const GATES_1_37: &str =
    "DRAConsumableCapacity=true,DRAPartitionableDevices=true,DRADeviceTaints=true";

/// The tenants the chart is installed with (classes `ainic-pf-<tenant>`
/// and the tenant admission policy).
pub const TENANTS: [&str; 2] = ["team-a", "team-b"];

/// The values every shared bed's chart is installed with.
pub fn chart_values() -> serde_json::Value {
    serde_json::json!({"tenants": {"names": TENANTS, "sticky": true}})
}

/// The chart directory.
pub fn chart_dir() -> PathBuf {
    testbed::repo_root().join("deploy/helm/ainic-dra")
}

/// Installs the chart (release `ainic-dra` in `ainic-system`) into `bed`
/// with the real helm, once per control plane.
pub async fn install_chart(bed: &'static Testbed) {
    static V137: OnceCell<()> = OnceCell::const_new();
    static V134: OnceCell<()> = OnceCell::const_new();
    let cell = match bed.version() {
        testbed::Version::V1_34 => &V134,
        testbed::Version::V1_37 => &V137,
    };
    cell.get_or_init(|| helm_install(bed)).await;
}

/// Installs the chart into `bed` (every time; [`install_chart`] once per
/// shared bed).
pub async fn helm_install(bed: &Testbed) {
    helm_install_with(bed, chart_values()).await;
}

/// `base` with every key of `over` set over it, objects merged.
pub fn json_merge(mut base: serde_json::Value, over: serde_json::Value) -> serde_json::Value {
    match (&mut base, over) {
        (serde_json::Value::Object(b), serde_json::Value::Object(o)) => {
            for (k, v) in o {
                let merged = json_merge(b.remove(&k).unwrap_or(serde_json::Value::Null), v);
                b.insert(k, merged);
            }
            base
        }
        (_, serde_json::Value::Null) => base,
        (_, over) => over,
    }
}

/// Installs the chart into `bed` with `values`.
pub async fn helm_install_with(bed: &Testbed, values: serde_json::Value) {
    let kubeconfig = bed.kubeconfig();
    let values = testbed::helm::values_file(&values);
    testbed::helm::run(&[
        "install",
        RELEASE,
        chart_dir().to_str().unwrap(),
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "-f",
        s(values.path()),
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    // The API server loads admission policies a moment after they are
    // created; a test of them must not run before.
    cluster::admission_policies_in_force(&bed.client().await, NAMESPACE).await;
    // The 1.34 bed is an API server alone (no controller manager makes
    // default service accounts, no pods run there).
    if bed.version() == testbed::Version::V1_37 {
        cluster::namespace(&bed.client().await, NAMESPACE).await;
    }
}

/// A control plane of the test's own, started with `options`, with the
/// chart installed; it lives as long as the test process.
pub async fn own_bed(options: testbed::UpOptions) -> &'static Testbed {
    own_bed_with(options, serde_json::Value::Null).await
}

/// [`own_bed`] with `values` over [`chart_values`].
pub async fn own_bed_with(
    options: testbed::UpOptions,
    values: serde_json::Value,
) -> &'static Testbed {
    let bed = tokio::task::spawn_blocking(move || Testbed::up(&options))
        .await
        .unwrap();
    let bed: &'static Testbed = Box::leak(Box::new(bed));
    helm_install_with(bed, json_merge(chart_values(), values)).await;
    bed
}

/// The controller as a process, killed when dropped.
pub struct Controller(Child);

impl Controller {
    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }

    /// Stops it as Kubernetes does (SIGTERM) and waits for it to exit.
    pub fn terminate(&mut self) {
        let pid = self.0.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status();
        assert!(
            sent.is_ok_and(|s| s.success()),
            "cannot signal the controller"
        );
        let _ = self.0.wait();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the controller with the chart's controller identity (its RBAC
/// judged by the real API server), its Lease in the chart's namespace.
pub async fn start_controller(bed: &Testbed, log: &std::path::Path) -> Controller {
    start_controller_as(bed, log, "test-1").await
}

/// Like [`start_controller`], as replica `identity` in the Lease.
pub async fn start_controller_as(
    bed: &Testbed,
    log: &std::path::Path,
    identity: &str,
) -> Controller {
    start_controller_with(bed, log, identity, &[]).await
}

/// Like [`start_controller_as`], with more flags.
pub async fn start_controller_with(
    bed: &Testbed,
    log: &std::path::Path,
    identity: &str,
    flags: &[&str],
) -> Controller {
    let account = format!("{}-controller", crate::support::RELEASE);
    let ns = crate::support::NAMESPACE;
    let token = cluster::account_token(&bed.client().await, ns, &account).await;
    let kubeconfig = bed.write_kubeconfig("controller", &account, &token);
    let child = Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .args(["--log", "info", "controller", "--kubeconfig"])
        .arg(kubeconfig)
        .args(["--namespace", ns, "--identity", identity])
        .args(["--resync-interval", "1"])
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap(),
        )
        .spawn()
        .expect("start ainic-dra controller");
    Controller(child)
}

/// One fake node with a real agent publishing for it.
pub struct NodeAgent {
    /// The node's name.
    pub node: String,
    /// The agent's kubeconfig (node-bound token of the chart's account).
    pub kubeconfig: PathBuf,
    /// The sysfs tree it reads.
    pub sysfs: PathBuf,
    /// Its plugin directories, CDI and state.
    pub dirs: AgentDirs,
    child: Mutex<Option<Child>>,
    log: PathBuf,
    _tmp: tempfile::TempDir,
}

/// The directories one agent works in.
pub struct AgentDirs {
    /// Registration sockets (`--registry-dir`).
    pub registry: PathBuf,
    /// The DRA socket (`--plugin-dir`).
    pub plugin: PathBuf,
    /// CDI specs.
    pub cdi: PathBuf,
    /// Device-metadata files.
    pub metadata: PathBuf,
    /// The checkpoint.
    pub state: PathBuf,
    /// Device nodes.
    pub dev: PathBuf,
}

impl NodeAgent {
    /// Creates Node `node` (with `labels`), lays out `topology` as its
    /// sysfs, gets the agent a node-bound token and starts `ainic-dra
    /// node` with `flags`.
    pub async fn start(
        bed: &'static Testbed,
        node: &str,
        topology: &str,
        labels: &BTreeMap<String, String>,
        flags: &[&str],
    ) -> NodeAgent {
        let client = bed.client().await;
        cluster::fake_node(&client, node, labels).await;
        let token = cluster::node_bound_token(&client, NAMESPACE, ACCOUNT, node).await;
        let kubeconfig =
            bed.write_kubeconfig(&format!("agent-{node}"), &format!("agent-{node}"), &token);
        let tmp = tempfile::tempdir().unwrap();
        let sysfs = tmp.path().join("sys");
        let yaml = testkit::fixture::bundled_by_name(topology).expect("bundled topology");
        testkit::fixture::Topology::from_yaml(yaml)
            .unwrap()
            .render(&sysfs)
            .unwrap();
        let base = tmp.path();
        let dirs = AgentDirs {
            registry: base.join("plugins_registry"),
            plugin: base.join("plugins/ainic.amd.com"),
            cdi: base.join("cdi"),
            metadata: base.join("metadata"),
            state: base.join("state"),
            dev: base.join("dev"),
        };
        std::fs::create_dir_all(&dirs.dev).unwrap();
        let mut agent = NodeAgent {
            node: node.to_string(),
            kubeconfig,
            sysfs,
            dirs,
            child: Mutex::new(None),
            log: base.join("agent.log"),
            _tmp: tmp,
        };
        agent.spawn(flags);
        agent
    }

    /// (Re)starts the agent process with `flags`.
    pub fn spawn(&mut self, flags: &[&str]) {
        self.stop();
        let d = &self.dirs;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ainic-dra"));
        cmd.args(["--log", "info", "node", "--node-name", &self.node]);
        if !flags.contains(&"--http-addr") {
            cmd.args(["--http-addr", ""]);
        }
        let child = cmd
            .arg("--sysfs-root")
            .arg(&self.sysfs)
            .arg("--dev-root")
            .arg(&d.dev)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--plugin-dir")
            .arg(&d.plugin)
            .arg("--registry-dir")
            .arg(&d.registry)
            .arg("--cdi-dir")
            .arg(&d.cdi)
            .arg("--metadata-dir")
            .arg(&d.metadata)
            .arg("--state-dir")
            .arg(&d.state)
            .args(flags)
            .env_remove("AINIC_DRA_FAULT")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start ainic-dra node");
        *self.child.lock().unwrap() = Some(child);
    }

    /// Stops the agent (SIGKILL); its files stay.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Panics with the agent's log if its process has exited.
    pub fn assert_running(&self) {
        if let Some(child) = self.child.lock().unwrap().as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            panic!(
                "the agent of {} exited ({status}):\n{}",
                self.node,
                tail(&self.log(), 20)
            );
        }
    }

    /// The agent's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for NodeAgent {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The slices of `driver` in pool `pool`, sorted by name.
pub async fn pool_slices(client: &kube::Client, driver: &str, pool: &str) -> Vec<ResourceSlice> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    // By driver only: 1.34 has no field selector on the pool name.
    let selector = format!("spec.driver={driver}");
    let mut slices = api
        .list(&ListParams::default().fields(&selector))
        .await
        .unwrap_or_else(|e| panic!("cannot list slices of pool {pool}: {e}"))
        .items;
    slices.retain(|s| s.spec.pool.name == pool);
    slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    slices
}

/// Waits until `agent`'s pool is complete (every slice at one generation)
/// and holds `expected` slices; returns them.
pub async fn published(
    client: &kube::Client,
    agent: &NodeAgent,
    expected: usize,
) -> Vec<ResourceSlice> {
    let what = format!("{expected} slices of node {}", agent.node);
    wait::until(&what, wait::DEADLINE, || async {
        agent.assert_running();
        let slices = pool_slices(client, DRIVER, &agent.node).await;
        if slices.len() == expected && ainic_dra_demo::world::pool_complete(&slices, &agent.node) {
            Ok(slices)
        } else {
            Err(format!(
                "{} slices; agent log:\n{}",
                slices.len(),
                tail(&agent.log(), 15)
            ))
        }
    })
    .await
}

/// What `ainic-dra slices` builds for a topology and node with `flags`,
/// for Kubernetes 1.37 (what an agent learns from the 1.37 testbed) unless
/// `flags` name a `--kubernetes-version`.
pub fn expected_slices(topology: &str, node: &str, flags: &[&str]) -> Vec<ResourceSlice> {
    let mut flags = flags.to_vec();
    if !flags.contains(&"--kubernetes-version") {
        flags.extend(["--kubernetes-version", "1.37"]);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .args([
            "slices",
            "--topology",
            topology,
            "--node-name",
            node,
            "-o",
            "json",
        ])
        .args(&flags)
        .output()
        .expect("run ainic-dra slices");
    assert!(
        out.status.success(),
        "ainic-dra slices failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("slices JSON")
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `path` as a `&str`.
pub fn s(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}
