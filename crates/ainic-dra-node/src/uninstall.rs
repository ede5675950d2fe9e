//! What an agent removes from its node when the chart is uninstalled.
//!
//! An agent that stops because of an upgrade, a drain or a crash keeps
//! everything: the next agent needs its checkpoint, and the kubelet may
//! still start containers from its CDI specs. Only when its DaemonSet is
//! gone (`helm uninstall`, seen by [`follow_daemonset`]) and no claim is
//! prepared on the node any more does it remove its node's files: its CDI
//! specs and the state directory's files. With claims still prepared
//! (uninstalled without a drain) it removes nothing and says so: running
//! pods may still need their specs, and a reinstall takes the state over.
//! The node's ResourceSlices are removed by the chart's post-delete Job
//! (`ainic-dra cleanup`), which runs even when no agent is left.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::core::PartialObjectMeta;

use super::checkpoint;
use ainic_dra_daemon::follow::{self, Seen};

/// What [`remove_node_state`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Removed {
    /// These files are gone.
    Files(Vec<PathBuf>),
    /// Nothing: this many claims are still prepared on the node.
    KeptForPreparedClaims(usize),
}

/// Where the agent keeps files on its node.
#[derive(Clone, Debug)]
pub(crate) struct NodePaths {
    /// `--state-dir`: every file in it is ours.
    pub state: PathBuf,
    /// `--cdi-dir`: the files named after the driver, and the classic spec.
    pub cdi: PathBuf,
    /// `--plugin-dir`: the driver's own directory, all of it ours.
    pub plugin: PathBuf,
    /// `--metadata-dir`: the device-metadata files, a directory per claim
    /// (what is not laid out as one stays).
    pub metadata: PathBuf,
    /// `--registry-dir`: the registration sockets named after the driver.
    pub registry: PathBuf,
    /// The classic device plugin's directory, when it runs: its sockets
    /// named `ainic-dra-*.sock`.
    pub device_plugins: Option<PathBuf>,
    /// The driver's name.
    pub driver: String,
}

/// Removes this driver's files from the node, unless a claim is still
/// prepared: everything in the state, plugin and metadata directories, the CDI files
/// named after the driver and the classic spec, and the sockets of every
/// agent instance (a killed one leaves its own). The directories stay:
/// they are the pod's mount points.
pub(crate) fn remove_node_state(paths: &NodePaths) -> std::io::Result<Removed> {
    let prepared = checkpoint::read(&paths.state)
        .map_err(|e| std::io::Error::other(e.to_string()))?
        .claims
        .len();
    if prepared > 0 {
        return Ok(Removed::KeptForPreparedClaims(prepared));
    }
    let mut removed = vec![];
    let driver = paths.driver.as_str();
    let classic_spec = crate::classic::cdi::FILE_NAME;
    remove_in(
        &paths.cdi,
        |n| n.starts_with(driver) || n == classic_spec,
        &mut removed,
    )?;
    remove_in(&paths.state, |_| true, &mut removed)?;
    remove_in(&paths.plugin, |_| true, &mut removed)?;
    let claim_dir = |name: &str| crate::metadata::is_claim_dir(&paths.metadata.join(name));
    remove_in(&paths.metadata, claim_dir, &mut removed)?;
    let registration = |n: &str| n.starts_with(&format!("{driver}-")) && n.ends_with("reg.sock");
    remove_in(&paths.registry, registration, &mut removed)?;
    if let Some(dir) = &paths.device_plugins {
        let ours = |n: &str| n.starts_with("ainic-dra-") && n.ends_with(".sock");
        remove_in(dir, ours, &mut removed)?;
    }
    Ok(Removed::Files(removed))
}

/// Removes the entries of `dir` whose names `ours` accepts (directories
/// with all they hold); a missing `dir` holds nothing.
fn remove_in(
    dir: &Path,
    ours: impl Fn(&str) -> bool,
    removed: &mut Vec<PathBuf>,
) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(&ours))
        .collect();
    paths.sort();
    for path in paths {
        let gone = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match gone {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Watches the DaemonSet `namespace/name` the agent belongs to; the flag
/// turns true once it is deleted or being deleted. A watch, not a read at
/// shutdown: `helm uninstall` deletes the agent's RBAC right after the
/// DaemonSet, and a watch already open still delivers the deletion.
/// Each watch lasts `lifetime`.
pub(crate) fn follow_daemonset(
    client: kube::Client,
    (namespace, name): &(String, String),
    lifetime: follow::Lifetime,
    tasks: &ainic_dra_daemon::Tasks,
) -> Arc<AtomicBool> {
    let deleted = Arc::new(AtomicBool::new(false));
    // Its metadata alone: the deletion is all this looks for, and a full
    // DaemonSet would bring the pod template's decoder (about 0.3 MB of
    // the binary) and its text (the server sends metadata only).
    let api: kube::Api<PartialObjectMeta<DaemonSet>> = kube::Api::namespaced(client, namespace);
    let fields = format!("metadata.name={name}");
    let mut seen = follow::watch_for(api, fields, "agent DaemonSet", lifetime);
    let flag = deleted.clone();
    tasks.spawn_critical("daemonset watch", async move {
        while let Some(seen) = seen.recv().await {
            let gone = match seen {
                Seen::Deleted(_) => true,
                Seen::Applied(ds) => ds.metadata.deletion_timestamp.is_some(),
                Seen::Restarted => continue,
            };
            if gone {
                tracing::info!("the agent's DaemonSet is being deleted: uninstalling");
            }
            flag.store(gone, Ordering::SeqCst);
        }
    });
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> (tempfile::TempDir, NodePaths) {
        let root = tempfile::tempdir().unwrap();
        let dir = |name: &str| {
            let path = root.path().join(name);
            std::fs::create_dir_all(&path).unwrap();
            path
        };
        let paths = NodePaths {
            state: dir("state"),
            cdi: dir("cdi"),
            plugin: dir("plugin"),
            metadata: dir("metadata"),
            registry: dir("registry"),
            device_plugins: Some(dir("device-plugins")),
            driver: "ainic.amd.com".into(),
        };
        (root, paths)
    }

    fn touch(dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, "").unwrap();
        path
    }

    /// A claim's device-metadata directory, as the agent lays it out.
    fn claim_dir(dir: &Path, uid: &str) -> PathBuf {
        let path = dir.join(uid);
        std::fs::create_dir_all(path.join("nic")).unwrap();
        touch(&path.join("nic"), "metadata.json");
        path
    }

    #[test]
    fn removes_the_drivers_files_and_nobody_elses_when_no_claim_is_prepared() {
        let (_root, p) = node();
        let ours = [
            touch(&p.state, "agent.lock"),
            touch(&p.cdi, "ainic-dra-classic.json"),
            touch(&p.cdi, "ainic.amd.com_metadata_u1_nic.json"),
            touch(&p.plugin, "dra-old.sock"),
            claim_dir(&p.metadata, "0b1c2d3e-0000-4000-8000-000000000001"),
            touch(&p.registry, "ainic.amd.com-old-reg.sock"),
            touch(
                p.device_plugins.as_ref().unwrap(),
                "ainic-dra-old-amd.com_nic.sock",
            ),
        ];
        let theirs = [
            touch(&p.cdi, "gpu.amd.com-1234.json"),
            touch(&p.registry, "gpu.amd.com-reg.sock"),
            touch(p.device_plugins.as_ref().unwrap(), "kubelet.sock"),
            // A --metadata-dir shared with others: not ours unless laid out so.
            touch(&p.metadata, "containerd.sock"),
            touch(&claim_dir(&p.metadata, "lib"), "other"),
            claim_dir(&p.metadata, "sshd"),
        ];
        let Removed::Files(removed) = remove_node_state(&p).unwrap() else {
            panic!("nothing is prepared");
        };
        assert_eq!(removed.len(), ours.len(), "{removed:?}");
        assert!(ours.iter().all(|f| !f.exists()));
        assert!(
            theirs.iter().all(|f| f.exists()),
            "another component's files"
        );
    }

    #[test]
    fn keeps_everything_while_a_claim_is_prepared() {
        let (_root, p) = node();
        let claim: checkpoint::PreparedClaim = serde_json::from_str(
            r#"{"namespace":"ns","name":"c","devices":[],"cdiFile":"x.json"}"#,
        )
        .unwrap();
        let mut held = checkpoint::Checkpoint::default();
        held.claims.insert("uid-1".into(), claim);
        let bytes = checkpoint::encode(&held);
        std::fs::write(p.state.join(checkpoint::FILE_NAME), bytes).unwrap();
        let spec = touch(&p.cdi, "ainic-dra-classic.json");
        let removed = remove_node_state(&p).unwrap();
        assert_eq!(removed, Removed::KeptForPreparedClaims(1));
        assert!(spec.exists());
        assert!(p.state.join(checkpoint::FILE_NAME).exists());
    }
}
