//! The CDI directory (`--cdi-dir`): writing a claim's spec atomically,
//! removing it, and listing the files this driver owns there.
//!
//! A spec is written to a hidden temp file (runtimes read only `*.json` and
//! `*.yaml`) and renamed into place, so a runtime never sees half a spec.
//! No fsync: the directory is transient (`/var/run/cdi`, tmpfs), and the
//! checkpoint keeps each spec's content, so start-up reconciliation
//! rewrites any file that is missing or differs.

use std::fs;
use std::io::{self, ErrorKind};
use std::path::{Path, PathBuf};

use super::{ClaimSpec, FILE_PREFIX, claim_of_file};

/// The CDI directory of the node.
#[derive(Clone, Debug)]
pub struct CdiDir {
    path: PathBuf,
}

/// A CDI file operation that failed.
#[derive(Debug, thiserror::Error)]
#[error("failed to {action} CDI spec {path}: {source}")]
pub struct CdiDirError {
    action: &'static str,
    path: PathBuf,
    source: io::Error,
}

impl CdiDir {
    /// Uses (and creates) `path`.
    pub fn open(path: &Path) -> Result<Self, CdiDirError> {
        fs::create_dir_all(path).map_err(|source| CdiDirError {
            action: "create directory for",
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn temp_name(file_name: &str) -> String {
        format!(".{file_name}.tmp")
    }

    /// Writes a spec atomically (temp file + rename), replacing any old one.
    pub fn write(&self, spec: &ClaimSpec) -> Result<(), CdiDirError> {
        self.write_file(&spec.file_name, spec.content.as_bytes())
    }

    /// Writes `content` as `file_name` atomically.
    pub fn write_file(&self, file_name: &str, content: &[u8]) -> Result<(), CdiDirError> {
        let target = self.path.join(file_name);
        let tmp = self.path.join(Self::temp_name(file_name));
        let err = |action, path: &Path| {
            let path = path.to_path_buf();
            move |source| CdiDirError {
                action,
                path,
                source,
            }
        };
        fs::write(&tmp, content).map_err(err("write", &tmp))?;
        crate::faults::hit(crate::faults::Point::CdiTempWritten);
        fs::rename(&tmp, &target).map_err(err("rename", &target))
    }

    /// The content of `file_name`, or `None` when it does not exist.
    pub fn read(&self, file_name: &str) -> Result<Option<Vec<u8>>, CdiDirError> {
        let path = self.path.join(file_name);
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(source) => Err(CdiDirError {
                action: "read",
                path,
                source,
            }),
        }
    }

    /// Removes `file_name` (and a temp file of it); absent is fine.
    pub fn remove(&self, file_name: &str) -> Result<(), CdiDirError> {
        for name in [Self::temp_name(file_name), file_name.to_string()] {
            let path = self.path.join(&name);
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(CdiDirError {
                        action: "remove",
                        path,
                        source,
                    });
                }
            }
        }
        Ok(())
    }

    /// Names of every file in the directory, sorted.
    pub fn file_names(&self) -> Result<Vec<String>, CdiDirError> {
        let entries = fs::read_dir(&self.path).map_err(|source| CdiDirError {
            action: "list directory of",
            path: self.path.clone(),
            source,
        })?;
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Names of this driver's claim files: specs (`ainic.amd.com-<uid>.json`)
    /// and leftover temp files of specs.
    pub fn owned_files(&self) -> Result<Vec<String>, CdiDirError> {
        let mut names: Vec<String> = self
            .file_names()?
            .into_iter()
            .filter(|n| {
                let spec = n
                    .strip_prefix('.')
                    .and_then(|n| n.strip_suffix(".tmp"))
                    .unwrap_or(n);
                spec.starts_with(FILE_PREFIX) && claim_of_file(spec).is_some()
            })
            .collect();
        names.sort();
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(uid: &str) -> ClaimSpec {
        ClaimSpec {
            file_name: super::super::file_name(uid),
            content: format!("{{\"uid\":\"{uid}\"}}"),
            device_ids: vec![],
        }
    }

    #[test]
    fn write_replace_and_remove_leave_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let cdi = CdiDir::open(&dir.path().join("cdi")).unwrap();
        cdi.write(&spec("a")).unwrap();
        cdi.write(&spec("a")).unwrap();
        assert_eq!(cdi.owned_files().unwrap(), ["ainic.amd.com-a.json"]);
        assert_eq!(
            cdi.read("ainic.amd.com-a.json").unwrap().unwrap(),
            b"{\"uid\":\"a\"}"
        );
        cdi.remove("ainic.amd.com-a.json").unwrap();
        cdi.remove("ainic.amd.com-a.json").unwrap();
        assert!(fs::read_dir(cdi.path()).unwrap().next().is_none());
    }

    #[test]
    fn foreign_files_are_not_ours_but_our_temp_files_are() {
        let dir = tempfile::tempdir().unwrap();
        let cdi = CdiDir::open(dir.path()).unwrap();
        fs::write(dir.path().join("nvidia.com-gpu.json"), b"{}").unwrap();
        fs::write(dir.path().join(".ainic.amd.com-b.json.tmp"), b"{").unwrap();
        assert_eq!(cdi.owned_files().unwrap(), [".ainic.amd.com-b.json.tmp"]);
    }
}
