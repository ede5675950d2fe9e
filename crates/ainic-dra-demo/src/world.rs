//! The demo's little cluster: three nodes laid out as sysfs trees from a
//! bundled topology, the in-process API server stand-in (Nodes,
//! DeviceClasses, a GPU driver's slices), and one real `ainic-dra node`
//! child process per node with its own sockets, CDI and state dirs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rustix::process::Pid;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};
use serde_json::json;
use testkit::apiserver::ApiServer;

/// The bundled topology every demo node has.
pub const TOPOLOGY: &str = "mi300x-8gpu-8nic";
/// The driver name.
pub const DRIVER: &str = dra_model::names::DEFAULT_DRIVER;
/// The GPU driver whose slices the demo publishes next to ours.
pub const GPU_DRIVER: &str = "gpu.amd.com";
/// The attribute NICs use to name their nearest GPU (switch-precise pairing).
pub const PAIRING_ATTRIBUTE: &str = "gpu.amd.com/pciAddr";
/// Feature gates of the demo cluster.
pub const GATES: &str = "DRAConsumableCapacity=true";
/// The nodes and their fabric partitions (as the fabric config says).
pub const NODES: [(&str, &str); 3] = [
    ("node-a", "pod-a"),
    ("node-b", "pod-a"),
    ("node-c", "pod-b"),
];
/// The fabric config every agent reads (also used by docs/use-cases.md).
const FABRIC_CONFIG: &str = include_str!("../../../docs/walkthrough/config/fabric.yaml");
/// The PF every agent publishes for sharing.
pub const SHARED_PF: &str = "enp228s0";

/// Where one node's files live.
pub struct NodeDirs {
    /// The node name.
    pub name: String,
    /// Rendered sysfs tree.
    pub sysfs: PathBuf,
    /// Stand-in for `/dev` (empty: the demo has no real char devices).
    pub dev: PathBuf,
    /// The kubelet's plugin registry dir.
    pub registry: PathBuf,
    /// The plugin's socket dir.
    pub plugin: PathBuf,
    /// CDI spec dir.
    pub cdi: PathBuf,
    /// Device-metadata dir.
    pub metadata: PathBuf,
    /// Checkpoint dir.
    pub state: PathBuf,
    /// The agent's log.
    pub log: PathBuf,
}

impl NodeDirs {
    fn under(base: &Path, name: &str) -> NodeDirs {
        let root = base.join(name);
        NodeDirs {
            name: name.to_string(),
            sysfs: root.join("sys"),
            dev: root.join("dev"),
            registry: root.join("kubelet/plugins_registry"),
            plugin: root.join("kubelet/plugins").join(DRIVER),
            cdi: root.join("cdi"),
            metadata: root.join("metadata"),
            state: root.join("state"),
            log: root.join("agent.log"),
        }
    }
}

/// A running agent; killed when dropped if it was not stopped.
pub struct Agent {
    child: Child,
}

impl Drop for Agent {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            // A drop cannot await: reaps the child just killed (at once).
            #[allow(clippy::disallowed_methods)]
            let _ = self.child.wait();
        }
    }
}

/// Everything the demo runs against.
pub struct World {
    /// Base directory of all files.
    pub base: PathBuf,
    _temp: Option<tempfile::TempDir>,
    /// The API server stand-in.
    pub api: ApiServer,
    /// Per node, in [`NODES`] order.
    pub nodes: Vec<NodeDirs>,
    agents: Vec<Agent>,
}

impl World {
    /// Lays out the nodes under `keep` (or a temporary directory) and
    /// starts the API stand-in with Nodes, DeviceClasses and GPU slices.
    pub async fn create(keep: Option<&Path>) -> Result<World> {
        let (base, temp) = match keep {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("failed to create {}", dir.display()))?;
                if std::fs::read_dir(dir)?.next().is_some() {
                    bail!("--keep directory {} is not empty", dir.display());
                }
                (dir.canonicalize()?, None)
            }
            None => {
                let temp = tempfile::Builder::new().prefix("ainic-demo-").tempdir()?;
                (temp.path().to_path_buf(), Some(temp))
            }
        };
        check_socket_paths(&base)?;
        let yaml = testkit::fixture::bundled_by_name(TOPOLOGY).context("bundled topology")?;
        let topology = testkit::fixture::Topology::from_yaml(yaml)?;
        let mut nodes = Vec::new();
        for (name, _) in NODES {
            let dirs = NodeDirs::under(&base, name);
            topology
                .render(&dirs.sysfs)
                .with_context(|| format!("failed to lay out {name}'s sysfs tree"))?;
            std::fs::create_dir_all(&dirs.dev)?;
            nodes.push(dirs);
        }
        std::fs::write(base.join("fabric.yaml"), FABRIC_CONFIG)?;
        let api = ApiServer::start()
            .await
            .context("failed to start the API server stand-in")?;
        std::fs::write(base.join("kubeconfig"), kubeconfig(&api.url()))?;
        let world = World {
            base,
            _temp: temp,
            api,
            nodes,
            agents: Vec::new(),
        };
        world.seed_cluster()?;
        Ok(world)
    }

    fn seed_cluster(&self) -> Result<()> {
        for dirs in &self.nodes {
            let node: Node = serde_json::from_value(json!({"metadata": {"name": dirs.name}}))?;
            self.api.seed(&node);
            let inventory = topology::discover(&dirs.sysfs, &Default::default())?;
            self.api.seed(&gpu_slice(&dirs.name, &inventory)?);
        }
        for class in dra_model::deviceclass::device_classes(DRIVER, &[]) {
            self.api.seed(&class);
        }
        let gpu_class: DeviceClass = serde_json::from_value(json!({
            "metadata": {"name": GPU_DRIVER},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{GPU_DRIVER}'")}}]},
        }))?;
        self.api.seed(&gpu_class);
        Ok(())
    }

    /// Starts one `ainic-dra node` per node, as the DaemonSet would.
    pub fn start_agents(&mut self) -> Result<()> {
        let exe = std::env::current_exe().context("cannot find the ainic-dra binary")?;
        for dirs in &self.nodes {
            let log = std::fs::File::create(&dirs.log)?;
            let child = Command::new(&exe)
                .args(["--log", "info", "node", "--node-name", &dirs.name])
                .arg("--sysfs-root")
                .arg(&dirs.sysfs)
                .arg("--dev-root")
                .arg(&dirs.dev)
                .arg("--kubeconfig")
                .arg(self.base.join("kubeconfig"))
                .arg("--plugin-dir")
                .arg(&dirs.plugin)
                .arg("--registry-dir")
                .arg(&dirs.registry)
                .arg("--cdi-dir")
                .arg(&dirs.cdi)
                .arg("--metadata-dir")
                .arg(&dirs.metadata)
                .arg("--state-dir")
                .arg(&dirs.state)
                .args(["--http-addr", "", "--feature-gates", GATES])
                .args(["--gpu-pairing-attribute", PAIRING_ATTRIBUTE])
                .args(["--shared-pfs", SHARED_PF, "--pf-queue-pairs", "16384"])
                .arg("--fabric-config")
                .arg(self.base.join("fabric.yaml"))
                .env_remove("AINIC_DRA_FAULT")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .with_context(|| format!("failed to start the agent of {}", dirs.name))?;
            self.agents.push(Agent { child });
        }
        Ok(())
    }

    /// Waits until every node's pool is complete in the API.
    pub async fn wait_for_slices(&mut self) -> Result<Vec<ResourceSlice>> {
        for _ in 0..500 {
            let slices = self.driver_slices();
            let complete = self.nodes.iter().all(|n| pool_complete(&slices, &n.name));
            if complete {
                return Ok(slices);
            }
            self.check_agents_alive()?;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        bail!(
            "the agents did not publish their slices within 10 s; logs in {}",
            self.base.display()
        )
    }

    /// This driver's slices in the API.
    pub fn driver_slices(&self) -> Vec<ResourceSlice> {
        let mut slices: Vec<ResourceSlice> = self.api.list();
        slices.retain(|s| s.spec.driver == DRIVER);
        slices
    }

    fn check_agents_alive(&mut self) -> Result<()> {
        for (agent, dirs) in self.agents.iter_mut().zip(&self.nodes) {
            if let Some(status) = agent.child.try_wait()? {
                let log = std::fs::read_to_string(&dirs.log).unwrap_or_default();
                let last = log.lines().last().unwrap_or("(empty log)");
                bail!("the agent of {} exited ({status}): {last}", dirs.name);
            }
        }
        Ok(())
    }

    /// Stops every agent with SIGTERM (as the kubelet would), then waits.
    pub async fn stop_agents(&mut self) -> Result<usize> {
        let mut stopped = 0;
        for agent in &mut self.agents {
            let pid = i32::try_from(agent.child.id()).ok().and_then(Pid::from_raw);
            if let Some(pid) = pid {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            for _ in 0..150 {
                if agent.child.try_wait()?.is_some() {
                    stopped += 1;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        self.agents.clear();
        Ok(stopped)
    }
}

/// Unix socket paths are limited to 107 bytes; the deepest one the demo
/// creates is the registration socket.
fn check_socket_paths(base: &Path) -> Result<()> {
    const MAX: usize = 107;
    let dirs = NodeDirs::under(base, NODES[0].0);
    let socket = dirs.registry.join(format!("{DRIVER}-reg.sock"));
    let len = socket.as_os_str().len();
    if len > MAX {
        bail!(
            "{} is too deep for unix sockets ({len} bytes, at most {MAX}): use a shorter --keep path",
            base.display()
        );
    }
    Ok(())
}

/// True when `node`'s pool has all its slices at one generation.
pub fn pool_complete(slices: &[ResourceSlice], node: &str) -> bool {
    let pool: Vec<&ResourceSlice> = slices.iter().filter(|s| s.spec.pool.name == node).collect();
    let Some(first) = pool.first() else {
        return false;
    };
    let generation = first.spec.pool.generation;
    let count = first.spec.pool.resource_slice_count;
    pool.iter().all(|s| s.spec.pool.generation == generation)
        && i64::try_from(pool.len()).is_ok_and(|n| n == count)
}

/// The GPU driver's slice for a node's GPUs (`gpu-N`, with pcieRoot and
/// the address under the pairing attribute), as the AMD GPU driver
/// publishes them.
pub fn gpu_slice(node: &str, inventory: &topology::Inventory) -> Result<ResourceSlice> {
    let devices: Vec<_> = inventory
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| {
            json!({"name": format!("gpu-{i}"), "attributes": {
                "resource.kubernetes.io/pcieRoot": {"string": g.location.root},
                PAIRING_ATTRIBUTE: {"string": g.address.to_string()},
            }})
        })
        .collect();
    Ok(serde_json::from_value(json!({
        "metadata": {"name": format!("{node}-{GPU_DRIVER}")},
        "spec": {"driver": GPU_DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    }))?)
}

fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: demo\n  cluster:\n    server: {server}\n\
         users:\n- name: demo\n  user: {{}}\ncontexts:\n- name: demo\n  context:\n    cluster: demo\n    \
         user: demo\ncurrent-context: demo\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(pool: &str, generation: i64, count: i64) -> ResourceSlice {
        serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": {"driver": DRIVER,
            "nodeName": pool, "pool": {"name": pool, "generation": generation,
            "resourceSliceCount": count}}}))
        .unwrap()
    }

    #[test]
    fn a_pool_is_complete_when_all_its_slices_are_there_at_one_generation() {
        assert!(!pool_complete(&[], "n"));
        assert!(pool_complete(&[slice("n", 1, 1)], "n"));
        assert!(
            !pool_complete(&[slice("n", 1, 2)], "n"),
            "one of two slices"
        );
        assert!(
            !pool_complete(&[slice("n", 1, 2), slice("n", 2, 2)], "n"),
            "mixed generations"
        );
        assert!(pool_complete(
            &[slice("n", 2, 2), slice("n", 2, 2), slice("m", 1, 5)],
            "n"
        ));
    }
}
