//! Harness for the node agent's end-to-end tests: a bundled topology laid
//! out as a sysfs tree, the API server stand-in holding ResourceClaims, the
//! real `ainic-dra node` binary as a child process, and the kubelet
//! simulator talking to it over its unix sockets.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::{Value, json};
use testkit::apiserver::ApiServer;
use testkit::kubelet::{ClaimRef, DraPluginClient, KubeletSim};

/// The driver name.
pub const DRIVER: &str = "ainic.amd.com";
/// The node the agent runs as.
pub const NODE: &str = "node-a";

/// One test's world.
pub struct World {
    pub api: ApiServer,
    pub tmp: tempfile::TempDir,
    pub sysfs: PathBuf,
    pub kubeconfig: PathBuf,
}

/// Directories of one agent.
pub struct Dirs {
    pub registry: PathBuf,
    pub plugin: PathBuf,
    pub cdi: PathBuf,
    pub metadata: PathBuf,
    pub state: PathBuf,
    pub dev: PathBuf,
}

/// A running agent; killed (SIGKILL) when dropped.
pub struct Agent {
    pub child: Child,
    pub http: String,
    pub log: PathBuf,
}

impl Agent {
    /// Waits until the agent's log holds `line`; its log. Panics after
    /// `timeout` (a hang guard, not a speed limit), showing the log.
    pub async fn wait_log(&self, line: &str, timeout: std::time::Duration) -> String {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains(line) {
                return log;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no {line:?} in the agent's log within {timeout:?}; its log:\n{log}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Waits (up to 20 s) until the agent owns its state: the checkpoint
    /// is reconciled with the CDI directory and today's devices. The
    /// kubelet's sockets open before that (calls wait for it), so a test
    /// that looks at the files after a restart waits for this, not for
    /// the registration.
    pub async fn wait_reconciled(&self) {
        const LINE: &str = "checkpoint reconciled with the CDI directory";
        self.wait_log(LINE, std::time::Duration::from_secs(20))
            .await;
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl World {
    /// Renders `topology` (bundled name) and starts the API stand-in with a Node.
    pub async fn new(topology: &str) -> World {
        let yaml = testkit::fixture::bundled_by_name(topology).expect("bundled topology");
        World::from_yaml(yaml).await
    }

    /// Like [`World::new`], with the topology given as YAML.
    pub async fn from_yaml(yaml: &str) -> World {
        let tmp = tempfile::tempdir().unwrap();
        let sysfs = tmp.path().join("sys");
        testkit::fixture::Topology::from_yaml(yaml)
            .unwrap()
            .render(&sysfs)
            .unwrap();
        let api = ApiServer::start().await.unwrap();
        let node: Node = serde_json::from_value(json!({"metadata": {"name": NODE}})).unwrap();
        api.seed(&node);
        let kubeconfig = tmp.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kubeconfig_yaml(&api.url())).unwrap();
        World {
            api,
            tmp,
            sysfs,
            kubeconfig,
        }
    }

    /// The agent's directories (created by the agent itself, except dev).
    pub fn dirs(&self) -> Dirs {
        let base = self.tmp.path();
        let dev = base.join("dev");
        std::fs::create_dir_all(&dev).unwrap();
        Dirs {
            registry: base.join("plugins_registry"),
            plugin: base.join("plugins/ainic.amd.com"),
            cdi: base.join("cdi"),
            metadata: base.join("metadata"),
            state: base.join("state"),
            dev,
        }
    }

    /// Starts `ainic-dra node` with `fault` armed (`AINIC_DRA_FAULT`).
    pub fn start_agent(&self, fault: Option<&str>) -> Agent {
        self.start_agent_with(fault, &[])
    }

    /// Like [`World::start_agent`], with extra flags.
    pub fn start_agent_with(&self, fault: Option<&str>, extra: &[&str]) -> Agent {
        self.start_agent_limited(fault, extra, None)
    }

    /// Like [`World::start_agent_with`], under the open-file limits
    /// `nofile` (soft, hard) when given (set by `prlimit`, which then
    /// execs the agent: the child's PID is the agent's).
    pub fn start_agent_limited(
        &self,
        fault: Option<&str>,
        extra: &[&str],
        nofile: Option<(u64, u64)>,
    ) -> Agent {
        let d = self.dirs();
        let http = format!("127.0.0.1:{}", free_port());
        let log = self.tmp.path().join(format!("agent-{}.log", free_port()));
        let agent = env!("CARGO_BIN_EXE_ainic-dra");
        let mut cmd = match nofile {
            Some((soft, hard)) => {
                let mut prlimit = Command::new("prlimit");
                prlimit
                    .arg(format!("--nofile={soft}:{hard}"))
                    .arg("--")
                    .arg(agent);
                prlimit
            }
            None => Command::new(agent),
        };
        cmd.args(["--log", "info", "node", "--node-name", NODE])
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
            .args(["--http-addr", &http])
            .args(extra)
            .env_remove("AINIC_DRA_FAULT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        if let Some(point) = fault {
            cmd.env("AINIC_DRA_FAULT", point);
        }
        Agent {
            child: cmd.spawn().expect("start ainic-dra node"),
            http,
            log,
        }
    }

    /// Registers the agent with the kubelet simulator.
    pub async fn register(&self) -> DraPluginClient {
        KubeletSim::register_driver(&self.dirs().registry, DRIVER)
            .await
            .expect("plugin registers")
    }

    /// Stores an allocated claim with one result per `(request, driver,
    /// pool, device)` and the given allocation config; returns its ref.
    pub fn claim(
        &self,
        name: &str,
        results: &[(&str, &str, &str, &str)],
        config: Value,
    ) -> ClaimRef {
        let results: Vec<Value> = results
            .iter()
            .map(|(request, driver, pool, device)| {
                json!({"request": request, "driver": driver, "pool": pool, "device": device})
            })
            .collect();
        let claim: ResourceClaim = serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": name},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": results, "config": config}}},
        }))
        .unwrap();
        self.seed(claim)
    }

    /// Stores `claim` as given; returns its ref with the assigned UID.
    pub fn seed(&self, claim: ResourceClaim) -> ClaimRef {
        let stored = self.api.seed(&claim);
        ClaimRef::new(
            "default",
            stored.metadata.name.as_deref().unwrap(),
            stored.metadata.uid.as_deref().unwrap(),
        )
    }

    /// Names of the files in the CDI dir (claim specs and device-metadata
    /// specs).
    pub fn cdi_files(&self) -> Vec<String> {
        list(&self.dirs().cdi)
    }

    /// Names of the claim specs in the CDI dir (`ainic.amd.com-<uid>.json`).
    pub fn claim_specs(&self) -> Vec<String> {
        let mut specs = self.cdi_files();
        specs.retain(|f| f.starts_with("ainic.amd.com-"));
        specs
    }

    /// Reads of ResourceClaims (not of their status) the API server saw.
    pub fn claim_reads(&self) -> usize {
        self.api
            .requests()
            .iter()
            .filter(|r| r.resource == "resourceclaims" && r.subresource.is_none())
            .count()
    }

    /// Claim UIDs in the checkpoint (empty when there is none).
    pub fn checkpoint_claims(&self) -> Vec<String> {
        ainic_dra_node::checkpoint::read(&self.dirs().state)
            .unwrap()
            .claims
            .into_keys()
            .collect()
    }
}

/// A NicConfig allocation-config entry for every request.
pub fn nic_config(source: &str, fields: Value) -> Value {
    let mut params = json!({"apiVersion": "ainic.amd.com/v1alpha1", "kind": "NicConfig"});
    params
        .as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    json!({"source": source, "opaque": {"driver": DRIVER, "parameters": params}})
}

/// Sorted file names in `dir` (empty if it does not exist).
pub fn list(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![];
    };
    let mut names: Vec<String> = entries
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Waits for the child to end on its own (a fault abort).
pub async fn wait_exit(agent: &mut Agent) -> ExitStatus {
    for _ in 0..500 {
        if let Some(status) = agent.child.try_wait().unwrap() {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "agent did not exit; log: {}",
        std::fs::read_to_string(&agent.log).unwrap_or_default()
    );
}

/// `work`, or a panic naming `what` after a minute: an agent that never
/// answers (starved, stuck) fails the test rather than hangs it.
pub async fn within<T>(what: &str, work: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_secs(60), work).await {
        Ok(done) => done,
        Err(_) => panic!("{what}: no answer from the agent in a minute"),
    }
}

/// A plain HTTP GET against the agent; returns (status, body).
pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < deadline {
        if let Ok(mut s) = tokio::net::TcpStream::connect(addr).await {
            let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            s.write_all(req.as_bytes()).await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            let status = out[9..12].parse().unwrap();
            let body = out
                .split_once("\r\n\r\n")
                .map(|(_, b)| b.to_string())
                .unwrap_or_default();
            return (status, body);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no HTTP server at {addr}");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn kubeconfig_yaml(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: {server}\nusers:\n- name: test\n  user: {{}}\ncontexts:\n- name: test\n  context:\n    cluster: standin\n    user: test\ncurrent-context: test\n"
    )
}

/// A file copied where a container runtime looks (e.g. a CDI spec in
/// `/var/run/cdi`), removed when the test ends, pass or fail.
pub struct Installed(pub PathBuf);

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs `env; ls -l /dev/infiniband` in a podman container (runc, no
/// network, busybox root) given the CDI devices `ids` and `env`, as the
/// kubelet hands them to the runtime; its output. Fails without podman.
pub fn podman_run(world: &World, ids: &[String], env: &[(String, String)]) -> String {
    podman_sh(world, ids, env, "env; ls -l /dev/infiniband")
}

/// Runs `script` with `sh -c` in a podman container given the CDI devices
/// `ids` and `env` (see [`podman_run`]); its output.
pub fn podman_sh(world: &World, ids: &[String], env: &[(String, String)], script: &str) -> String {
    let root = rootfs(world.tmp.path());
    let mut podman = Command::new("podman");
    podman
        .args(["--runtime", "runc", "run", "--rm", "--network=none"])
        .args([
            "--ulimit",
            "nofile=20000:20000",
            "--ulimit",
            "nproc=32768:32768",
        ]);
    for id in ids {
        podman.args(["--device", id]);
    }
    for (key, value) in env {
        podman.args(["--env", &format!("{key}={value}")]);
    }
    let output = podman
        .arg("--rootfs")
        .arg(&root)
        .args(["/bin/sh", "-c", script])
        .output()
        .expect("podman is required (apt-get install podman runc busybox-static)");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "podman failed for {ids:?}: {stderr}\n{stdout}"
    );
    stdout
}

/// A root filesystem without an image: busybox and `sh`, under `dir`
/// (made once; later calls return it).
pub fn rootfs(dir: &Path) -> PathBuf {
    let root = dir.join("rootfs");
    if root.join("bin/sh").exists() {
        return root;
    }
    std::fs::create_dir_all(root.join("bin")).unwrap();
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("busybox is required (apt-get install busybox-static)");
    std::fs::copy(busybox, root.join("bin/busybox")).unwrap();
    std::os::unix::fs::symlink("busybox", root.join("bin/sh")).unwrap();
    root
}
