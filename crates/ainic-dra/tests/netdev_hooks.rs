//! Issue 29 item 7, the NRI hooks of exclusive netdev mode
//! (`node::sandbox`) under contention and a full disk: real veths moved
//! between real namespaces, the RDMA side a fake behind `RdmaNetns` that
//! can hold one device's move for as long as a test wants.
//! - a hook that the runtime sends after `Synchronize` runs after the
//!   convergence on `Synchronize`'s snapshot, which would otherwise take
//!   the netdev of a pod started meanwhile back out of it;
//! - a slow move of one pod's NIC does not hold up another pod's hook;
//! - a checkpoint that cannot be written (ENOSPC) does not keep a NIC in
//!   a pod that is stopping, and the record catches up once it can.
//!
//! Needs root (CAP_NET_ADMIN; CAP_SYS_ADMIN to mount a small tmpfs).

mod netns_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use ainic_dra_node::checkpoint::store::CheckpointStore;
use ainic_dra_node::checkpoint::{
    self, DeviceIdentity, NetdevDevice, PreparedClaim, PreparedDevice,
};
use ainic_dra_node::rdma_netns::{NetnsMode, RdmaError, RdmaNetns};
use ainic_dra_node::sandbox::Sandboxes;
use dra_model::netdev::NetdevSettings;
use netns_support::Net;
use nri::api::{LinuxNamespace, LinuxPodSandbox, PodSandbox};

/// Exclusive RDMA netns mode; the move of RDMA device `held` (if any)
/// waits until [`FakeRdma::release`].
#[derive(Default)]
struct FakeRdma {
    held: Option<String>,
    /// (a held move has started, it may go on)
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl FakeRdma {
    fn holding(name: &str) -> Arc<FakeRdma> {
        Arc::new(FakeRdma {
            held: Some(name.to_string()),
            ..FakeRdma::default()
        })
    }

    fn release(&self) {
        self.state.lock().unwrap().1 = true;
        self.changed.notify_all();
    }

    fn held_move_started(&self) -> bool {
        self.state.lock().unwrap().0
    }
}

impl RdmaNetns for FakeRdma {
    fn mode(&self) -> Result<NetnsMode, RdmaError> {
        Ok(NetnsMode::Exclusive)
    }

    fn move_device(&self, name: &str, _: Option<&Path>, _: Option<&Path>) -> Result<(), RdmaError> {
        if self.held.as_deref() == Some(name) {
            let mut state = self.state.lock().unwrap();
            state.0 = true;
            while !state.1 {
                state = self.changed.wait(state).unwrap();
            }
        }
        Ok(())
    }
}

/// Releases the held move when dropped.
struct Release(Arc<FakeRdma>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.release();
    }
}

fn sandbox_pod(net: &Net, uid: &str) -> PodSandbox {
    PodSandbox {
        id: format!("sb-{uid}"),
        uid: uid.into(),
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

/// A prepared claim `claim_uid` whose PF at `pci` (netdev `net.nic`, RDMA
/// device `rdma`) moves into pod `pod_uid` as `net1`.
fn netdev_claim(net: &Net, pci: &str, rdma: &str, pod_uid: &str) -> PreparedClaim {
    let plan = serde_yaml_ng::from_str::<NetdevSettings>("interfaceName: net1")
        .unwrap()
        .plan(&net.nic)
        .unwrap();
    let device = PreparedDevice {
        requests: vec!["nic".into()],
        pool: "node-a".into(),
        device: format!("pf-{}", pci.replace([':', '.'], "-")),
        share_id: None,
        admin_access: false,
        cdi_ids: vec![],
        identity: Some(DeviceIdentity {
            pci_address: pci.into(),
            rdma_device: Some(rdma.into()),
            umad: false,
            issm: false,
            consumed: BTreeMap::new(),
        }),
        netdev: Some(NetdevDevice {
            host_name: net.nic.clone(),
            pod_uid: pod_uid.into(),
            plan,
        }),
    };
    PreparedClaim {
        namespace: "default".into(),
        name: pod_uid.into(),
        devices: vec![device],
        cdi_file: format!("{pod_uid}.json"),
        cdi_spec: String::new(),
        metadata_specs: BTreeMap::new(),
        metadata_files: BTreeMap::new(),
        metadata: Default::default(),
    }
}

fn in_pod(net: &Net) -> bool {
    Net::links(Some(&net.pod)).contains(&"net1".to_string())
}

fn at_home(net: &Net) -> bool {
    Net::links(None).contains(&net.nic)
}

/// `work`, or a panic naming `what` after a minute: a hook stuck behind
/// another must fail the test, not hang it.
async fn within<T>(what: &str, work: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), work)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish in a minute"))
}

#[tokio::test]
async fn a_pod_run_after_a_synchronize_keeps_its_netdev() {
    let net = Net::new("ha");
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(CheckpointStore::open(&dir.path().join("state")).unwrap());
    let claim = netdev_claim(&net, "0000:04:00.0", "ionic_4", "pod-a");
    store.insert("claim-a", claim).await.unwrap();
    let rdma = Arc::new(FakeRdma::default());
    let hooks = Arc::new(Sandboxes::new(
        store,
        &dir.path().join("sys"),
        None,
        true,
        rdma,
    ));
    // The runtime's snapshot has no pods; the pod's sandbox starts right
    // after it answered.
    let synchronized = hooks.begin_synchronize(Vec::new()).await;
    within("the run hook", hooks.run(&sandbox_pod(&net, "pod-a")))
        .await
        .unwrap();
    within("the synchronize", synchronized).await.unwrap();
    assert!(in_pod(&net), "the running pod keeps its netdev");
    assert!(!at_home(&net));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_move_of_one_pod_does_not_hold_up_another_pods_hook() {
    let (slow_net, fast_net) = (Net::new("hs"), Net::new("hf"));
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(CheckpointStore::open(&dir.path().join("state")).unwrap());
    let slow = netdev_claim(&slow_net, "0000:04:00.0", "ionic_slow", "pod-slow");
    let fast = netdev_claim(&fast_net, "0000:24:00.0", "ionic_fast", "pod-fast");
    store.insert("claim-slow", slow).await.unwrap();
    store.insert("claim-fast", fast).await.unwrap();
    let rdma = FakeRdma::holding("ionic_slow");
    // Let the held move go however the test ends: a blocked thread would
    // keep the runtime (and the test) from ending.
    let _release = Release(rdma.clone());
    let hooks = Arc::new(Sandboxes::new(
        store,
        &dir.path().join("sys"),
        None,
        true,
        rdma.clone(),
    ));
    let slow_pod = sandbox_pod(&slow_net, "pod-slow");
    let slow_hook = {
        let (hooks, pod) = (hooks.clone(), slow_pod.clone());
        tokio::spawn(async move { hooks.run(&pod).await })
    };
    within("the slow pod's RDMA move to start", async {
        while !rdma.held_move_started() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    // The slow pod's RDMA device is mid-move: the other pod's hook runs.
    within(
        "the other pod's hook",
        hooks.run(&sandbox_pod(&fast_net, "pod-fast")),
    )
    .await
    .unwrap();
    assert!(in_pod(&fast_net));
    rdma.release();
    within("the slow hook", slow_hook).await.unwrap().unwrap();
    assert!(in_pod(&slow_net));
}

/// A tmpfs of 256 KiB at `dir`, unmounted when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: PathBuf) -> SmallDisk {
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mount tmpfs (this test needs root: CAP_SYS_ADMIN): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallDisk(dir)
    }

    /// Fills it up: every later write fails with ENOSPC.
    fn fill(&self) {
        use std::io::Write;
        let mut filler = std::fs::File::create(self.0.join("filler")).unwrap();
        let block = vec![0u8; 4096];
        while filler.write_all(&block).is_ok() {}
        let _ = filler.sync_all();
    }

    fn free(&self) {
        std::fs::remove_file(self.0.join("filler")).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
    }
}

/// Appends a record that changes nothing (the removal of a claim never
/// prepared) sized so the journal ends at a block boundary: a full disk
/// then refuses its next append. Without it, a small append fits in the
/// last block's slack whether the disk is full or not.
fn pad_journal_to_a_block(state: &std::path::Path) {
    use ainic_dra_node::checkpoint::journal::{FILE_NAME, Record};
    use std::io::Write;
    let path = state.join(FILE_NAME);
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    let bare = Record::Del(String::new()).encode().len();
    let need = (len + bare).div_ceil(4096) * 4096 - len - bare;
    let pad = Record::Del("p".repeat(need)).encode();
    assert_eq!((len + pad.len()) % 4096, 0);
    let mut journal = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    journal.write_all(&pad).unwrap();
    journal.sync_all().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_does_not_keep_a_nic_in_a_stopping_pod() {
    let net = Net::new("hd");
    let dir = tempfile::tempdir().unwrap();
    let disk = SmallDisk::mount(dir.path().join("state"));
    let store = Arc::new(CheckpointStore::open(&disk.0).unwrap());
    let claim = netdev_claim(&net, "0000:04:00.0", "ionic_4", "pod-d");
    store.insert("claim-d", claim).await.unwrap();
    let rdma = Arc::new(FakeRdma::default());
    let hooks = Sandboxes::new(store, &dir.path().join("sys"), None, true, rdma);
    let pod = sandbox_pod(&net, "pod-d");
    hooks.run(&pod).await.unwrap();
    assert!(in_pod(&net));

    pad_journal_to_a_block(&disk.0);
    disk.fill();
    within("the stop hook", hooks.detach_sandbox(&pod.id, &pod.uid)).await;
    assert!(at_home(&net), "home although the checkpoint cannot say so");
    assert!(!in_pod(&net));
    let on_disk = || checkpoint::read(&disk.0).unwrap();
    assert_eq!(
        on_disk().moves.len(),
        1,
        "the disk still says away: a restart brings it home"
    );

    disk.free();
    within("the checkpoint catching up", async {
        while !on_disk().moves.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(!hooks.has_moves("claim-d"));
}

/// Issue 31 item 5: the netdev's gate file, which the claim's CDI spec
/// bind-mounts into the container, exists exactly while the netdev is in
/// the pod, so a container never runs without its network.
#[tokio::test]
async fn the_gate_file_exists_exactly_while_the_netdev_is_in_the_pod() {
    let net = Net::new("hg");
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(CheckpointStore::open(&dir.path().join("state")).unwrap());
    let claim = netdev_claim(&net, "0000:04:00.0", "ionic_4", "pod-g");
    let device = claim.devices[0].device.clone();
    store.insert("claim-g", claim).await.unwrap();
    let cdi = dir.path().join("cdi");
    std::fs::create_dir_all(&cdi).unwrap();
    let rdma = Arc::new(FakeRdma::default());
    let hooks =
        Sandboxes::new(store, &dir.path().join("sys"), None, true, rdma).with_netdev_gates(&cdi);
    let gate = ainic_dra_node::cdi::netdev_gate(&cdi, "claim-g", &device);
    let pod = sandbox_pod(&net, "pod-g");
    assert!(!gate.exists(), "no gate before the move");
    within("the run hook", hooks.run(&pod)).await.unwrap();
    assert!(in_pod(&net));
    assert!(
        gate.exists(),
        "the gate opens once the netdev is in the pod"
    );
    within("the stop hook", hooks.detach_sandbox(&pod.id, &pod.uid)).await;
    assert!(at_home(&net));
    assert!(!gate.exists(), "the gate closes when the netdev leaves");
}
