//! Exclusive netdev mode in the kernel's exclusive RDMA netns mode: the
//! NIC's RDMA device moves into the pod after its netdev and home before
//! it. This kernel has no RDMA subsystem (no `NETLINK_RDMA`), so the RDMA
//! side is a fake behind `RdmaNetns` that records each move and where the
//! netdev was at that moment; the netdev is a real veth moved between
//! real namespaces by the real hooks (`node::sandbox`). The requests the
//! kernel would get are checked byte by byte in `node::rdma_netns`.
//! Needs root (CAP_NET_ADMIN).

mod netns_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use ainic_dra_node::checkpoint::store::CheckpointStore;
use ainic_dra_node::checkpoint::{DeviceIdentity, NetdevDevice, PreparedClaim, PreparedDevice};
use ainic_dra_node::rdma_netns::{NetnsMode, RdmaError, RdmaNetns};
use ainic_dra_node::sandbox::Sandboxes;
use dra_model::netdev::NetdevSettings;
use netns_support::Net;
use nri::api::{LinuxNamespace, LinuxPodSandbox, PodSandbox};

/// Records each move as `name from -> to` with whether the pod had the
/// netdev then; fails moves while `refuse` is set.
struct FakeRdma {
    mode: NetnsMode,
    pod_ns: String,
    log: Mutex<Vec<String>>,
    refuse: bool,
}

impl RdmaNetns for FakeRdma {
    fn mode(&self) -> Result<NetnsMode, RdmaError> {
        Ok(self.mode)
    }

    fn move_device(
        &self,
        name: &str,
        from: Option<&Path>,
        to: Option<&Path>,
    ) -> Result<(), RdmaError> {
        let at = |p: Option<&Path>| p.map_or("host".to_string(), |p| p.display().to_string());
        let netdev_in_pod = Net::links(Some(&self.pod_ns)).contains(&"net1".to_string());
        let line = format!(
            "{name} {} -> {} (netdev in pod: {netdev_in_pod})",
            at(from),
            at(to)
        );
        self.log.lock().unwrap().push(line);
        if self.refuse {
            return Err(RdmaError::Refused {
                action: format!("move {name}"),
                errno: 1,
            });
        }
        Ok(())
    }
}

fn sandbox_pod(net: &Net) -> PodSandbox {
    PodSandbox {
        id: "sb".into(),
        uid: "pod-1".into(),
        linux: Some(LinuxPodSandbox {
            namespaces: vec![LinuxNamespace {
                r#type: "network".into(),
                path: net.pod_path().display().to_string(),
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Hooks over a checkpoint holding one claim whose PF (netdev `net.nic`,
/// RDMA device `ionic_7`) moves into pod `pod-1` as `net1`.
async fn hooks(net: &Net, dir: &Path, mode: NetnsMode, refuse: bool) -> (Sandboxes, Arc<FakeRdma>) {
    let store = Arc::new(CheckpointStore::open(&dir.join("state")).unwrap());
    let plan = serde_yaml_ng::from_str::<NetdevSettings>("interfaceName: net1")
        .unwrap()
        .plan(&net.nic)
        .unwrap();
    let device = PreparedDevice {
        requests: vec!["nic".into()],
        pool: "node-a".into(),
        device: "pf-0000-04-00-0".into(),
        share_id: None,
        admin_access: false,
        cdi_ids: vec![],
        identity: Some(DeviceIdentity {
            pci_address: "0000:04:00.0".into(),
            rdma_device: Some("ionic_7".into()),
            umad: false,
            issm: false,
            consumed: BTreeMap::new(),
        }),
        netdev: Some(NetdevDevice {
            host_name: net.nic.clone(),
            pod_uid: "pod-1".into(),
            plan,
        }),
    };
    let claim = PreparedClaim {
        namespace: "default".into(),
        name: "c".into(),
        devices: vec![device],
        cdi_file: "c.json".into(),
        cdi_spec: String::new(),
        metadata_specs: BTreeMap::new(),
        metadata_files: BTreeMap::new(),
        metadata: Default::default(),
    };
    store.insert("claim-uid", claim).await.unwrap();
    let fake = Arc::new(FakeRdma {
        mode,
        pod_ns: net.pod.clone(),
        log: Mutex::default(),
        refuse,
    });
    let sysfs = dir.join("sys");
    let hooks = Sandboxes::new(store, &sysfs, None, true, fake.clone());
    (hooks, fake)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_exclusive_mode_the_rdma_device_moves_after_the_netdev_and_home_before_it() {
    let net = Net::new("x");
    let dir = tempfile::tempdir().unwrap();
    let (hooks, fake) = hooks(&net, dir.path(), NetnsMode::Exclusive, false).await;
    let pod = sandbox_pod(&net);
    hooks.run(&pod).await.unwrap();
    assert!(Net::links(Some(&net.pod)).contains(&"net1".to_string()));
    hooks.detach_sandbox(&pod.id, &pod.uid).await;
    assert!(Net::links(None).contains(&net.nic));
    let pod_path = net.pod_path().display().to_string();
    assert_eq!(
        *fake.log.lock().unwrap(),
        [
            format!("ionic_7 host -> {pod_path} (netdev in pod: true)"),
            format!("ionic_7 {pod_path} -> host (netdev in pod: true)"),
        ]
    );
}

/// The RDMA device is moved by today's name, found by the NIC's PCI
/// address: udev may have renamed it since prepare.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rdma_device_is_found_by_pci_address_under_todays_name() {
    let net = Net::new("w");
    let dir = tempfile::tempdir().unwrap();
    let today = dir
        .path()
        .join("sys/bus/pci/devices/0000:04:00.0/infiniband/rocep4s0");
    std::fs::create_dir_all(today).unwrap();
    let (hooks, fake) = hooks(&net, dir.path(), NetnsMode::Exclusive, false).await;
    let pod = sandbox_pod(&net);
    hooks.run(&pod).await.unwrap();
    hooks.detach_sandbox(&pod.id, &pod.uid).await;
    let log = fake.log.lock().unwrap().clone();
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log.iter().all(|l| l.starts_with("rocep4s0 ")), "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_shared_mode_the_rdma_device_stays() {
    let net = Net::new("y");
    let dir = tempfile::tempdir().unwrap();
    let (hooks, fake) = hooks(&net, dir.path(), NetnsMode::Shared, false).await;
    let pod = sandbox_pod(&net);
    hooks.run(&pod).await.unwrap();
    hooks.detach_sandbox(&pod.id, &pod.uid).await;
    assert!(fake.log.lock().unwrap().is_empty());
    assert!(Net::links(None).contains(&net.nic));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_rdma_move_brings_the_netdev_home_and_fails_the_sandbox() {
    let net = Net::new("z");
    let dir = tempfile::tempdir().unwrap();
    let (hooks, _fake) = hooks(&net, dir.path(), NetnsMode::Exclusive, true).await;
    let err = hooks.run(&sandbox_pod(&net)).await.unwrap_err().to_string();
    assert!(
        err.contains("ionic_7") && err.contains("default/c"),
        "{err}"
    );
    assert!(Net::links(None).contains(&net.nic), "the netdev is home");
    assert!(!Net::links(Some(&net.pod)).contains(&"net1".to_string()));
}
