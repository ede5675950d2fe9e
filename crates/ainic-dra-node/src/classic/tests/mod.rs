//! The classic path against a fake kubelet over real unix sockets, on the
//! bundled topologies rendered as sysfs trees. This file is the harness;
//! `kubelet.rs` covers registration and `ListAndWatch`, `answers.rs` the
//! preferred allocations, `Allocate` and the config checks.

mod answers;
mod kubelet;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ainic_dra_daemon::Supervisor;
use ainic_dra_daemon::supervise::Done;
use dra_model::classic::ClassicConfig;
use kubelet_api::deviceplugin::v1beta1 as dp;
use testkit::fake_kubelet_dp::{DevicePluginClient, FakeKubelet};
use testkit::fixture::{Model, Topology, bundled_by_name};
use tokio::sync::watch;
use topology::Inventory;

use super::{ClassicSettings, rescan, start};
use crate::cdi::DevRoots;

pub(super) const WAIT: Duration = Duration::from_secs(20);
pub(super) const NIC: &str = "amd.com/nic";
pub(super) const VNIC: &str = "amd.com/vnic";

pub(super) fn fixture(name: &str, vfs_per_pf: u32) -> Topology {
    let mut t = Topology::from_yaml(bundled_by_name(name).unwrap()).unwrap();
    if vfs_per_pf > 0 {
        for hb in &mut t.host_bridges {
            for port in &mut hb.ports {
                let below = port.switch.iter_mut().flat_map(|s| s.ports.iter_mut());
                for p in below {
                    for d in p
                        .devices
                        .iter_mut()
                        .filter(|d| d.model == Some(Model::Pollara400))
                    {
                        d.total_vfs = Some(8);
                        d.vfs = vfs_per_pf;
                    }
                }
            }
        }
    }
    t
}

pub(super) struct Node {
    pub(super) dir: tempfile::TempDir,
    pub(super) kubelet: FakeKubelet,
    pub(super) inventory: watch::Receiver<Arc<Inventory>>,
    shutdown: watch::Sender<bool>,
    supervisor: Supervisor,
    tasks: Vec<Done>,
    rescanner: tokio::task::JoinHandle<()>,
}

impl Node {
    pub(super) fn plugins(&self) -> PathBuf {
        self.dir.path().join("device-plugins")
    }

    pub(super) fn sysfs(&self) -> PathBuf {
        self.dir.path().join("sys")
    }

    pub(super) async fn client(&self, resource: &str, registration: usize) -> DevicePluginClient {
        let r = self
            .kubelet
            .wait_for_registration(resource, registration, WAIT)
            .await
            .unwrap();
        self.kubelet.dial(&r.endpoint).await.unwrap()
    }

    /// Aborts every task without the stop they wait for (as the agent's
    /// supervisor does, and the runtime's end); returns the node's
    /// directory.
    pub(super) async fn abort(self) -> tempfile::TempDir {
        assert!(self.supervisor.stop(WAIT).await, "every task ended");
        self.rescanner.abort();
        self.dir
    }

    /// Stops every task; returns the node's directory, to look at what
    /// the agent left.
    pub(super) async fn stop(self) -> tempfile::TempDir {
        self.shutdown.send(true).unwrap();
        for task in &self.tasks {
            task.wait().await;
        }
        let _ = self.rescanner.await;
        self.dir
    }
}

fn settings(root: &Path, config: ClassicConfig, cdi: bool) -> ClassicSettings {
    ClassicSettings {
        dir: root.join("device-plugins"),
        config,
        cdi_dir: cdi.then(|| root.join("cdi")),
        dev: DevRoots::mounted_at(&root.join("dev")),
        poll: Duration::from_millis(20),
        fabric: None,
        instance: None,
    }
}

/// The bundled 8-NIC node without VFs, default config, no CDI.
pub(super) async fn plain_node() -> Node {
    let topology = fixture("mi300x-8gpu-8nic", 0);
    node(topology, ClassicConfig::default(), false)
        .await
        .unwrap()
}

pub(super) async fn node(
    topology: Topology,
    config: ClassicConfig,
    cdi: bool,
) -> anyhow::Result<Node> {
    let dir = tempfile::tempdir().unwrap();
    topology.render(&dir.path().join("sys")).unwrap();
    let kubelet = FakeKubelet::start(&dir.path().join("device-plugins"))
        .await
        .unwrap();
    let (shutdown, stopping) = watch::channel(false);
    let (inventory, rescanner) = rescan::spawn(
        dir.path().join("sys"),
        Duration::from_millis(20),
        stopping.clone(),
    )
    .unwrap();
    let (supervisor, supervised) = Supervisor::new();
    let tasks = start(
        settings(dir.path(), config, cdi),
        inventory.clone(),
        stopping,
        &supervised,
    )?;
    Ok(Node {
        dir,
        kubelet,
        inventory,
        shutdown,
        supervisor,
        tasks,
        rescanner,
    })
}

pub(super) async fn first_list(
    client: &mut DevicePluginClient,
) -> (tonic::Streaming<dp::ListAndWatchResponse>, Vec<dp::Device>) {
    let mut stream = client
        .list_and_watch(dp::Empty {})
        .await
        .unwrap()
        .into_inner();
    let first = stream.message().await.unwrap().unwrap();
    (stream, first.devices)
}

pub(super) fn numa(d: &dp::Device) -> Vec<i64> {
    d.topology
        .iter()
        .flat_map(|t| t.nodes.iter().map(|n| n.id))
        .collect()
}
