//! Start-up reconciliation of the checkpoint with the CDI directory, after
//! a crash or a reboot:
//! - a spec file of this driver that no checkpoint entry owns is an orphan
//!   of a prepare that did not finish: removed (the kubelet retries);
//! - a leftover temp file: removed;
//! - an entry whose spec file is missing or differs (a reboot emptied
//!   `/var/run/cdi`, or a crash between unprepare's two steps): rewritten
//!   from the content the checkpoint keeps, so running containers and the
//!   kubelet's next unprepare find what prepare made.

use crate::node::cdi::claim_of_file;
use crate::node::cdi::dir::{CdiDir, CdiDirError};

use super::Checkpoint;

/// What reconciliation changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Files removed (orphans and temp files).
    pub removed: Vec<String>,
    /// Specs rewritten from the checkpoint.
    pub rewritten: Vec<String>,
}

/// Makes the CDI directory match `checkpoint`.
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
    for claim in checkpoint.claims.values() {
        let current = cdi.read(&claim.cdi_file)?;
        if current.as_deref() != Some(claim.cdi_spec.as_bytes()) {
            cdi.write_file(&claim.cdi_file, claim.cdi_spec.as_bytes())?;
            done.rewritten.push(claim.cdi_file.clone());
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::checkpoint::PreparedClaim;

    fn entry(uid: &str) -> PreparedClaim {
        PreparedClaim {
            namespace: "ns".into(),
            name: uid.into(),
            devices: vec![],
            cdi_file: crate::node::cdi::file_name(uid),
            cdi_spec: format!("spec of {uid}"),
        }
    }

    #[test]
    fn orphans_and_temp_files_go_missing_specs_come_back_foreign_files_stay() {
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
        assert_eq!(done.rewritten, ["ainic.amd.com-lost.json"]);
        assert_eq!(
            cdi.read("ainic.amd.com-lost.json").unwrap().unwrap(),
            b"spec of lost"
        );
        assert!(dir.path().join("vendor.com-gpu.json").exists());
        assert_eq!(reconcile(&checkpoint, &cdi).unwrap(), Reconciled::default());
    }
}
