//! The node agent's checkpoint: which claims are prepared, with the devices
//! handed to the kubelet (by identity: PCI address, RDMA device) and the
//! CDI spec file written for each, so that unprepare works from the
//! checkpoint alone and a restart can rebuild or clean the CDI directory
//! from today's devices.
//!
//! On disk, format v2: an append-only journal ([`journal`]). Format v1
//! (`checkpoint.json`: one header line `ainic-dra-checkpoint v1
//! fnv1a64=<hex>` and the JSON body, rewritten whole at each change) is
//! still read, and migrated to v2 at the first start of this agent; a
//! newer format is refused with an error that says so.

pub mod journal;
pub mod reconcile;
pub mod store;

/// The checkpoint in `state_dir`, read without changing anything (tools,
/// tests): the journal, or a v1 checkpoint not yet migrated.
pub fn read(state_dir: &Path) -> Result<Checkpoint, CheckpointError> {
    journal::read_only(state_dir)
}

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::faults::{self, Point};

/// Format version of the v1 file (the journal's: [`journal::VERSION`]).
pub const VERSION: u32 = 1;
/// File name of the v1 checkpoint inside `--state-dir`.
pub const FILE_NAME: &str = "checkpoint.json";
const MAGIC: &str = "ainic-dra-checkpoint";

/// Every prepared claim, by claim UID, and every netdev moved (or being
/// moved) into a pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Prepared claims, by UID.
    pub claims: BTreeMap<String, PreparedClaim>,
    /// Exclusive netdev mode's moves, by [`move_key`]: recorded before the
    /// netdev leaves the host and forgotten once it is back, so a restart
    /// knows what to bring home.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub moves: BTreeMap<String, NetdevMove>,
}

/// The key of a device's move in [`Checkpoint::moves`].
pub fn move_key(claim_uid: &str, device: &str) -> String {
    format!("{claim_uid}/{device}")
}

/// A netdev on its way into a pod, or in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetdevMove {
    /// UID of the pod.
    pub pod_uid: String,
    /// The sandbox the netdev went into (a pod's sandbox may be replaced
    /// while the pod lives).
    #[serde(default)]
    pub sandbox_id: String,
    /// The pod's network namespace.
    pub netns: String,
    /// How far the move got.
    pub phase: MovePhase,
    /// What the host had, to restore it.
    pub host: crate::netdev::Attached,
    /// The RDMA device that moves with the netdev (the kernel's exclusive
    /// RDMA netns mode), by its name at the move.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_device: Option<String>,
}

/// How far a move got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MovePhase {
    /// In transit, either way: it may have stopped anywhere (on the host,
    /// in the pod unconfigured or configured). Entered before the first
    /// netlink request of a move in or home; left when the netdev is
    /// configured in the pod ([`MovePhase::InPod`]) or home (forgotten).
    Moving,
    /// In the pod, configured. Left for [`MovePhase::Moving`] before it
    /// leaves the pod.
    InPod,
}

/// A device prepared in exclusive netdev mode: which host netdev moves
/// into which pod, as planned at prepare.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetdevDevice {
    /// The netdev's name on the host at prepare.
    pub host_name: String,
    /// UID of the one pod the claim is reserved for.
    pub pod_uid: String,
    /// What it looks like in the pod.
    pub plan: dra_model::netdev::NetdevPlan,
}

/// A claim whose CDI spec is written and whose result the kubelet got.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreparedClaim {
    /// Namespace of the claim.
    pub namespace: String,
    /// Name of the claim.
    pub name: String,
    /// The prepared devices, in allocation-result order.
    pub devices: Vec<PreparedDevice>,
    /// File name of the claim's CDI spec in the CDI directory.
    pub cdi_file: String,
    /// The spec's content, for entries of older agents only, whose devices
    /// have no identity to rebuild it from; empty otherwise (the spec is
    /// rebuilt from the devices' identities and today's inventory, so the
    /// record stays small).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cdi_spec: String,
    /// The claim's device-metadata CDI specs (file name, content): the CDI
    /// directory is tmpfs, so they are rewritten from here after a reboot.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata_specs: BTreeMap<String, String>,
    /// Entries of older agents only: the claim's device-metadata files
    /// (request name, content), written again from here after a power cut.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata_files: BTreeMap<String, String>,
    /// What rebuilds the claim's device-metadata files, in place of their
    /// content (about 6 KB a claim, which every append and compaction of
    /// the journal carried).
    #[serde(default, skip_serializing_if = "MetadataRecord::is_empty")]
    pub metadata: MetadataRecord,
}

impl PreparedClaim {
    /// The claim recorded as `uid`, as the kubelet names it.
    pub fn claim_ref(&self, uid: &str) -> dra_model::claim::ClaimRef {
        dra_model::claim::ClaimRef {
            namespace: self.namespace.clone(),
            uid: uid.to_string(),
            name: self.name.clone(),
        }
    }
}

/// What rebuilds a prepared claim's device-metadata files when they are
/// missing or damaged (they are not fsynced): the requests that have one,
/// and the claim's name in its pod, which the files carry. Their content
/// comes again from the claim's devices, today's published attributes and
/// network data.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetadataRecord {
    /// Requests with a metadata file (`a` for `a/b`), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<String>,
    /// The claim's `resource.kubernetes.io/pod-claim-name` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_claim_name: Option<String>,
}

impl MetadataRecord {
    /// True when the claim has no device metadata.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }
}

/// One prepared device as reported to the kubelet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreparedDevice {
    /// Requests of the claim this device satisfies.
    pub requests: Vec<String>,
    /// Pool of the device (the node name).
    pub pool: String,
    /// DRA device name.
    pub device: String,
    /// Share of a multi-allocation device, when consumable capacity is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    /// Allocated with admin access (monitoring beside the device's user).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin_access: bool,
    /// Fully qualified CDI device IDs (`amd.com/ainic=<name>`).
    pub cdi_ids: Vec<String>,
    /// What was attached, to rebuild the spec from today's device numbers;
    /// absent in entries written before agents recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<DeviceIdentity>,
    /// Exclusive netdev mode: the netdev to move at pod sandbox start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netdev: Option<NetdevDevice>,
}

/// A prepared device by identity rather than by device numbers: the kernel
/// may renumber `uverbsN` or rename the RDMA device (reboot, driver
/// reload, VFs re-created) while the PCI address stays, so a spec is
/// rebuilt from these and today's inventory, never replayed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceIdentity {
    /// PCI address of the NIC function (`0000:0c:00.0`).
    pub pci_address: String,
    /// RDMA device name at prepare (for messages: today's name is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_device: Option<String>,
    /// The MAD devices were given.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub umad: bool,
    /// The subnet-management devices were given.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub issm: bool,
    /// Consumed capacity of the share, by name (empty without a share).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub consumed: BTreeMap<String, String>,
}

/// Another prepared claim that holds a device exclusively.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "device {device} is already prepared for claim {other} ({other_uid}) and does not allow a second allocation (neither allocation is shared or has admin access); refusing it, as the allocation is wrong: unprepare the other claim first"
)]
pub struct ExclusiveConflict {
    /// The device both claims name.
    pub device: String,
    /// `namespace/name` of the claim holding it.
    pub other: String,
    /// Its UID.
    pub other_uid: String,
}

impl Checkpoint {
    /// The first device of `devices` (about to be prepared for claim
    /// `uid`) that another prepared claim already holds where one of the
    /// two uses is exclusive: a device without a share that the result
    /// does not open with admin access. Defence in depth: the scheduler
    /// never allocates so, but a wrong allocation must not reach two
    /// containers.
    pub fn exclusive_conflict(
        &self,
        uid: &str,
        devices: &[PreparedDevice],
    ) -> Option<ExclusiveConflict> {
        let exclusive = |d: &PreparedDevice| d.share_id.is_none() && !d.admin_access;
        for (other_uid, other) in self.claims.iter().filter(|(u, _)| *u != uid) {
            for mine in devices.iter().filter(|d| !d.admin_access) {
                let clash = other.devices.iter().any(|theirs| {
                    theirs.device == mine.device
                        && theirs.pool == mine.pool
                        && !theirs.admin_access
                        && (exclusive(mine) || exclusive(theirs))
                });
                if clash {
                    return Some(ExclusiveConflict {
                        device: mine.device.clone(),
                        other: format!("{}/{}", other.namespace, other.name),
                        other_uid: other_uid.clone(),
                    });
                }
            }
        }
        None
    }
}

/// A checkpoint file that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Reading or writing the file failed.
    #[error("failed to {action} checkpoint {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The file is not a checkpoint of a version this binary knows.
    #[error("checkpoint {path} is corrupt: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// FNV-1a, 64 bit: a cheap checksum that catches truncation and bit rot.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Serialises `checkpoint` with its header.
pub fn encode(checkpoint: &Checkpoint) -> Vec<u8> {
    let body = serde_json::to_vec(checkpoint).expect("checkpoint serialises");
    let mut out = format!("{MAGIC} v{VERSION} fnv1a64={:016x}\n", fnv1a64(&body)).into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Parses a checkpoint file's bytes, checking header, version and checksum.
pub fn decode(bytes: &[u8], path: &Path) -> Result<Checkpoint, CheckpointError> {
    let corrupt = |reason: String| CheckpointError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let split = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or_else(|| corrupt("no header line".into()))?;
    let header =
        std::str::from_utf8(&bytes[..split]).map_err(|_| corrupt("header is not text".into()))?;
    let body = &bytes[split + 1..];
    let mut words = header.split(' ');
    if words.next() != Some(MAGIC) {
        return Err(corrupt(format!("unknown header {header:?}")));
    }
    let version = words.next().unwrap_or_default();
    if version != format!("v{VERSION}") {
        return Err(corrupt(format!("unsupported version {version:?}")));
    }
    let sum = words
        .next()
        .and_then(|w| w.strip_prefix("fnv1a64="))
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .ok_or_else(|| corrupt("no checksum in header".into()))?;
    if sum != fnv1a64(body) {
        return Err(corrupt("checksum mismatch".into()));
    }
    serde_json::from_slice(body).map_err(|e| corrupt(format!("invalid body: {e}")))
}

/// Reads the checkpoint at `path`; a missing file is an empty checkpoint.
pub fn load(path: &Path) -> Result<Checkpoint, CheckpointError> {
    match fs::read(path) {
        Ok(bytes) => decode(&bytes, path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Checkpoint::default()),
        Err(source) => Err(CheckpointError::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// A temp file name for a write of `path`, unique to this process and
/// write (`checkpoint.json.<pid>.<n>.tmp`): two writers, in one process
/// or two, never share one, so neither renames the other's half-written
/// file over the checkpoint or loses its own to the other's rename.
fn temp_path(path: &Path) -> PathBuf {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!("{name}.{}.{n}.tmp", std::process::id()))
}

/// Whether `name` is a temp file of a write of `file_name` (this binary's
/// or the fixed `<stem>.tmp` of older agents).
fn is_temp_of(name: &str, file_name: &str) -> bool {
    let stem = file_name
        .rsplit_once('.')
        .map_or(file_name, |(stem, _)| stem);
    name == format!("{stem}.tmp")
        || (name.starts_with(&format!("{file_name}.")) && name.ends_with(".tmp"))
}

/// Removes temp files that writes of `path` left behind (a process killed
/// between create and rename). Only for the one agent that holds the
/// state directory's lock: another writer's temp file would go too.
pub fn remove_stale_temps(path: &Path) -> Result<Vec<String>, CheckpointError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path.file_name().unwrap_or_default().to_string_lossy();
    let io = |action, p: &Path| {
        let p = p.to_path_buf();
        move |source| CheckpointError::Io {
            action,
            path: p,
            source,
        }
    };
    let mut removed = Vec::new();
    for entry in fs::read_dir(dir).map_err(io("list the directory of", path))? {
        let name = entry
            .map_err(io("list the directory of", path))?
            .file_name();
        let name = name.to_string_lossy();
        if is_temp_of(&name, &file_name) {
            let stale = dir.join(&*name);
            fs::remove_file(&stale).map_err(io("remove stale temp file", &stale))?;
            removed.push(name.into_owned());
        }
    }
    Ok(removed)
}

/// Writes `bytes` to `path` atomically and durably: a temp file of its own
/// (`temp_path`) in the same directory, fsync, rename over `path`.
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    let io = |action, p: &Path| {
        let p = p.to_path_buf();
        move |source| CheckpointError::Io {
            action,
            path: p,
            source,
        }
    };
    let tmp = temp_path(path);
    let mut file = fs::File::create(&tmp).map_err(io("create", &tmp))?;
    faults::hit(Point::CheckpointTempCreated);
    file.write_all(bytes).map_err(io("write", &tmp))?;
    faults::hit(Point::CheckpointTempWritten);
    file.sync_all().map_err(io("fsync", &tmp))?;
    faults::hit(Point::CheckpointTempSynced);
    drop(file);
    fs::rename(&tmp, path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io("rename", path)(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn used(device: &str, share: Option<&str>, admin: bool) -> PreparedDevice {
        PreparedDevice {
            requests: vec!["nic".into()],
            pool: "node-a".into(),
            device: device.into(),
            share_id: share.map(str::to_string),
            admin_access: admin,
            cdi_ids: vec![],
            identity: None,
            netdev: None,
        }
    }

    #[test]
    fn only_exclusive_uses_of_one_device_conflict() {
        let mut c = Checkpoint::default();
        let holder = |devices| PreparedClaim {
            namespace: "ns".into(),
            name: "held".into(),
            devices,
            cdi_file: String::new(),
            cdi_spec: String::new(),
            metadata_specs: Default::default(),
            metadata_files: Default::default(),
            metadata: Default::default(),
        };
        c.claims
            .insert("u1".into(), holder(vec![used("pf-0", None, false)]));
        c.claims
            .insert("u2".into(), holder(vec![used("pf-1", Some("s1"), false)]));
        let conflict = |d: PreparedDevice| c.exclusive_conflict("new", &[d]);
        assert_eq!(conflict(used("pf-0", None, false)).unwrap().other_uid, "u1");
        assert_eq!(
            conflict(used("pf-0", Some("s9"), false)).unwrap().other_uid,
            "u1"
        );
        assert!(conflict(used("pf-0", None, true)).is_none(), "admin access");
        assert!(
            conflict(used("pf-1", Some("s2"), false)).is_none(),
            "two shares"
        );
        assert!(
            conflict(used("pf-1", None, false)).is_some(),
            "exclusive over a share"
        );
        assert!(conflict(used("pf-2", None, false)).is_none());
        // A claim never conflicts with itself (a repeated prepare).
        assert!(
            c.exclusive_conflict("u1", &[used("pf-0", None, false)])
                .is_none()
        );
    }

    fn sample() -> Checkpoint {
        let mut c = Checkpoint::default();
        c.claims.insert(
            "uid-1".into(),
            PreparedClaim {
                namespace: "ns".into(),
                name: "claim".into(),
                devices: vec![PreparedDevice {
                    admin_access: false,
                    requests: vec!["nic".into()],
                    pool: "node-a".into(),
                    device: "pf-0000-0c-00-0".into(),
                    share_id: None,
                    cdi_ids: vec!["amd.com/ainic=uid-1-pf-0000-0c-00-0".into()],
                    identity: None,
                    netdev: None,
                }],
                cdi_file: "ainic.amd.com-uid-1.json".into(),
                cdi_spec: "{}".into(),
                metadata_specs: Default::default(),
                metadata_files: Default::default(),
                metadata: Default::default(),
            },
        );
        c
    }

    #[test]
    fn round_trips_through_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        assert_eq!(load(&path).unwrap(), Checkpoint::default());
        write_durably(&path, &encode(&sample())).unwrap();
        assert_eq!(load(&path).unwrap(), sample());
        let left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, [FILE_NAME], "no temp file left");
    }

    #[test]
    fn two_writers_of_one_file_never_collide() {
        // Two agents (or two stores) writing one checkpoint at once: with
        // one shared temp name, one renamed the other's half-written file
        // or failed to find its own.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let writer = |tag: &'static str| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut c = sample();
                c.claims.get_mut("uid-1").unwrap().name = tag.repeat(4096);
                let bytes = encode(&c);
                (0..300)
                    .map(|_| write_durably(&path, &bytes))
                    .collect::<Vec<_>>()
            })
        };
        let (a, b) = (writer("a"), writer("b"));
        let failed: Vec<String> = (a.join().unwrap().into_iter())
            .chain(b.join().unwrap())
            .filter_map(|r| r.err().map(|e| e.to_string()))
            .collect();
        assert!(
            failed.is_empty(),
            "{} failed writes, first: {:?}",
            failed.len(),
            failed.first()
        );
        load(&path).expect("the file is one writer's, whole");
    }

    #[test]
    fn temp_files_left_by_a_killed_writer_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        for stale in ["checkpoint.json.77.3.tmp", "checkpoint.tmp"] {
            fs::write(dir.path().join(stale), b"half").unwrap();
        }
        fs::write(dir.path().join("agent.lock"), b"pid 1").unwrap();
        let mut removed = remove_stale_temps(&path).unwrap();
        removed.sort();
        assert_eq!(removed, ["checkpoint.json.77.3.tmp", "checkpoint.tmp"]);
        assert!(dir.path().join("agent.lock").exists());
    }

    #[test]
    fn a_flipped_byte_is_detected() {
        let mut bytes = encode(&sample());
        let last = bytes.len() - 3;
        bytes[last] ^= 0x01;
        let err = decode(&bytes, Path::new("cp")).unwrap_err().to_string();
        assert!(err.contains("checksum mismatch"), "{err}");
    }

    #[test]
    fn truncation_and_foreign_versions_are_rejected() {
        let bytes = encode(&sample());
        assert!(decode(&bytes[..bytes.len() / 2], Path::new("cp")).is_err());
        let text = String::from_utf8(bytes)
            .unwrap()
            .replacen(" v1 ", " v9 ", 1);
        let err = decode(text.as_bytes(), Path::new("cp"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unsupported version \"v9\""), "{err}");
    }
}
