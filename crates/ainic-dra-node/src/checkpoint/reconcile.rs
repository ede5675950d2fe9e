//! Start-up reconciliation of the CDI directory with the checkpoint, after
//! a crash or a reboot: a spec file of this driver that no checkpoint entry
//! owns is an orphan of a prepare that did not finish, and a leftover temp
//! file is half of a write: both removed (the kubelet retries).
//!
//! Entries whose spec is missing or names yesterday's device numbers are
//! the other half: [`Driver::refresh_all`](crate::plugin::Driver::refresh_all)
//! rebuilds them from today's devices before any socket is served.

use crate::cdi::claim_of_file;
use crate::cdi::dir::{CdiDir, CdiDirError};

use super::Checkpoint;

/// What reconciliation changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Files removed (orphans and temp files).
    pub removed: Vec<String>,
}

/// Removes every file of this driver in the CDI directory that no entry
/// of `checkpoint` owns.
pub fn reconcile(checkpoint: &Checkpoint, cdi: &CdiDir) -> Result<Reconciled, CdiDirError> {
    let mut done = Reconciled::default();
    for file in cdi.owned_files()? {
        let owned = claim_of_file(&file).is_some_and(|uid| {
            checkpoint
                .claims
                .get(uid)
                .is_some_and(|c| c.cdi_file == file)
        });
        if !owned {
            cdi.remove(&file)?;
            done.removed.push(file);
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::PreparedClaim;

    fn entry(uid: &str) -> PreparedClaim {
        PreparedClaim {
            namespace: "ns".into(),
            name: uid.into(),
            devices: vec![],
            cdi_file: crate::cdi::file_name(uid),
            cdi_spec: format!("spec of {uid}"),
            metadata_specs: Default::default(),
            metadata_files: Default::default(),
            metadata: Default::default(),
        }
    }

    #[test]
    fn orphans_and_temp_files_go_owned_and_foreign_files_stay() {
        let dir = tempfile::tempdir().unwrap();
        let cdi = CdiDir::open(dir.path()).unwrap();
        let mut checkpoint = Checkpoint::default();
        checkpoint.claims.insert("kept".into(), entry("kept"));
        checkpoint.claims.insert("lost".into(), entry("lost"));
        cdi.write_file("ainic.amd.com-kept.json", b"spec of kept")
            .unwrap();
        cdi.write_file("ainic.amd.com-orphan.json", b"x").unwrap();
        std::fs::write(dir.path().join(".ainic.amd.com-half.json.tmp"), b"{").unwrap();
        std::fs::write(dir.path().join("vendor.com-gpu.json"), b"{}").unwrap();

        let done = reconcile(&checkpoint, &cdi).unwrap();
        assert_eq!(
            done.removed,
            [".ainic.amd.com-half.json.tmp", "ainic.amd.com-orphan.json"]
        );
        assert!(dir.path().join("ainic.amd.com-kept.json").exists());
        assert!(dir.path().join("vendor.com-gpu.json").exists());
        assert_eq!(reconcile(&checkpoint, &cdi).unwrap(), Reconciled::default());
    }
}
