//! The files and CDI specs of device metadata on the node: written,
//! checked, restored and removed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use dra_model::cdi::{ContainerEdits, Device, Mount, Spec};

use super::{
    ClaimMeta, MetadataError, RequestMeta, Written, container_path, document, documents_of,
    io_error, spec_file,
};
use crate::cdi::dir::CdiDir;
use crate::checkpoint::Checkpoint;

/// The directory under the plugin directory where agents before
/// `--metadata-dir` kept the files.
const LEGACY_DIR: &str = "dra-device-metadata";

/// Where the metadata files of this driver live and their specs go.
#[derive(Clone, Debug)]
pub struct MetadataFiles {
    driver: String,
    root: PathBuf,
    legacy: PathBuf,
    cdi: CdiDir,
}

impl MetadataFiles {
    /// New files under `dir`, specs in `cdi`; files of claims prepared by
    /// older agents stay under `plugin_dir` until unprepared.
    pub fn new(driver: &str, dir: &Path, plugin_dir: &Path, cdi: CdiDir) -> Self {
        Self {
            driver: driver.to_string(),
            root: dir.to_path_buf(),
            legacy: plugin_dir.join(LEGACY_DIR),
            cdi,
        }
    }

    /// Where the files of a claim prepared with the recorded metadata
    /// specs `specs` live: where its specs mount them from (a container
    /// restarted in its pod gets the recorded spec), which is the plugin
    /// directory for a claim an older agent prepared, and the former
    /// `--metadata-dir` for one prepared before it changed; this agent's
    /// own where no spec says.
    pub fn root_of(&self, specs: &BTreeMap<String, String>) -> PathBuf {
        let mounted = specs.values().find_map(|spec| mounted_root(spec));
        mounted.unwrap_or_else(|| self.root.clone())
    }

    /// Whether `root` is this agent's metadata directory or the older
    /// agents' one, rather than a former `--metadata-dir`.
    pub fn is_known_root(&self, root: &Path) -> bool {
        root == self.root || root == self.legacy
    }

    /// Writes the file and the CDI spec of each request of `claim`. A
    /// failure removes what this call wrote.
    pub fn write(
        &self,
        claim: &ClaimMeta,
        requests: &[RequestMeta],
    ) -> Result<Written, MetadataError> {
        let written = self.write_all(&self.root, claim, requests);
        if written.is_err() {
            let names = self.spec_names(&claim.uid, requests.iter().map(RequestMeta::base));
            let _ = self.remove(&claim.uid, &names);
        }
        written
    }

    fn write_all(
        &self,
        root: &Path,
        claim: &ClaimMeta,
        requests: &[RequestMeta],
    ) -> Result<Written, MetadataError> {
        let mut written = Written::default();
        for request in requests {
            let base = request.base();
            let file = file_of(root, &claim.uid, base);
            let dir = root.join(&claim.uid).join(base);
            fs::create_dir_all(&dir).map_err(io_error("create directory", &dir))?;
            let text = document(&self.driver, claim, request);
            write_replacing(&file, text.as_bytes())?;
            let (id, content) = self.spec(claim, base, &file)?;
            let spec_name = spec_file(&self.driver, &claim.uid, base);
            self.write_spec(&spec_name, &content)?;
            written.ids.insert(base.to_string(), id);
            written.specs.insert(spec_name, content);
            written.requests.insert(base.to_string());
        }
        Ok(written)
    }

    /// Writes a recorded metadata file of `request` of claim `uid` under
    /// `root` ([`Self::root_of`]) again when it is missing or differs (lost
    /// to a power cut: files are not fsynced); whether it did.
    pub fn restore_file(
        &self,
        root: &Path,
        uid: &str,
        request: &str,
        content: &str,
    ) -> Result<bool, MetadataError> {
        let dir = root.join(uid).join(request);
        let file = file_of(root, uid, request);
        match fs::read(&file) {
            Ok(on_disk) if on_disk == content.as_bytes() => return Ok(false),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("read", &file)(e)),
        }
        fs::create_dir_all(&dir).map_err(io_error("create directory", &dir))?;
        write_replacing(&file, content.as_bytes())?;
        Ok(true)
    }

    /// Writes a recorded spec again when it is missing or differs (after a
    /// reboot emptied the CDI directory); whether it did.
    pub fn restore(&self, file: &str, content: &str) -> Result<bool, MetadataError> {
        let read = self.cdi.read(file);
        let on_disk = read.map_err(|e| io_error("read", Path::new(file))(io::Error::other(e)))?;
        if on_disk.as_deref() == Some(content.as_bytes()) {
            return Ok(false);
        }
        self.write_spec(file, content)?;
        Ok(true)
    }

    fn write_spec(&self, file: &str, content: &str) -> Result<(), MetadataError> {
        (self.cdi.write_file(file, content.as_bytes()))
            .map_err(|e| io_error("write", Path::new(file))(io::Error::other(e)))
    }

    /// The spec mounting `file` for `request`: its CDI ID and JSON text.
    fn spec(
        &self,
        claim: &ClaimMeta,
        request: &str,
        file: &Path,
    ) -> Result<(String, String), MetadataError> {
        let spec = Spec {
            kind: format!("{}/metadata", self.driver),
            devices: vec![Device {
                name: format!("{}_{request}", claim.uid),
                container_edits: ContainerEdits {
                    mounts: vec![Mount {
                        host_path: file.display().to_string(),
                        container_path: container_path(&self.driver, claim, request),
                        options: vec!["ro".into(), "bind".into()],
                        kind: None,
                    }],
                    ..ContainerEdits::default()
                },
                ..Device::default()
            }],
            ..Spec::default()
        };
        let id = spec.qualified(&spec.devices[0].name);
        let text = spec.finish().map_err(|e| {
            io_error("build the CDI spec of", file)(io::Error::other(e.to_string()))
        })?;
        Ok((id, text))
    }

    /// Removes the files of claim `uid` written by this agent (in its own
    /// metadata directory) and its specs `spec_files` (with their temp
    /// files); absent ones are fine. The specs are named, not
    /// looked for: listing the CDI directory made every unprepare cost as
    /// much as the number of claims prepared (20,000 names at 10,000
    /// claims). Specs no record names, left by a prepare that did not
    /// finish, are found once, at start-up ([`Self::remove_orphans`]).
    pub fn remove<'a>(
        &self,
        uid: &str,
        spec_files: impl IntoIterator<Item = &'a String>,
    ) -> Result<(), MetadataError> {
        self.remove_in(&self.root, uid, spec_files)
    }

    fn remove_in<'a>(
        &self,
        root: &Path,
        uid: &str,
        spec_files: impl IntoIterator<Item = &'a String>,
    ) -> Result<(), MetadataError> {
        remove_path(&root.join(uid))?;
        for file in spec_files {
            (self.cdi.remove(file))
                .map_err(|e| io_error("remove", Path::new(file))(io::Error::other(e)))?;
        }
        Ok(())
    }

    /// Removes the files and specs of claim `uid` recorded with the metadata
    /// specs `specs`, wherever they mount them from ([`Self::root_of`]).
    pub fn remove_recorded(
        &self,
        uid: &str,
        specs: &BTreeMap<String, String>,
    ) -> Result<(), MetadataError> {
        self.remove_in(&self.root_of(specs), uid, specs.keys())
    }

    /// The spec file names of requests `requests` (`a`, not `a/b`) of claim `uid`.
    fn spec_names<'a>(
        &self,
        uid: &str,
        requests: impl IntoIterator<Item = &'a str>,
    ) -> Vec<String> {
        let names = requests
            .into_iter()
            .map(|request| spec_file(&self.driver, uid, request));
        names.collect()
    }

    /// Writes the files and specs of `requests` of `claim` under `root`
    /// ([`Self::root_of`]) again, and on failure removes nothing
    /// ([`Self::write`] does): a restore must not take away what is intact.
    pub fn rewrite(
        &self,
        root: &Path,
        claim: &ClaimMeta,
        requests: &[RequestMeta],
    ) -> Result<(), MetadataError> {
        self.write_all(root, claim, requests).map(drop)
    }

    /// The requests among `requests` of `claim` whose file is not as
    /// [`Self::write`] left it: one whole document per API version, of this
    /// claim and request. A power cut can lose the file or cut it short (it
    /// is not fsynced).
    pub fn damaged(
        &self,
        root: &Path,
        claim: &ClaimMeta,
        requests: &[String],
    ) -> Result<Vec<String>, MetadataError> {
        let mut damaged = Vec::new();
        for request in requests {
            let file = file_of(root, &claim.uid, request);
            let whole = match fs::read(&file) {
                Ok(bytes) => std::str::from_utf8(&bytes)
                    .is_ok_and(|text| documents_of(text, &claim.uid, request)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => false,
                Err(e) => return Err(io_error("read", &file)(e)),
            };
            if !whole {
                damaged.push(request.clone());
            }
        }
        Ok(damaged)
    }

    /// This driver's metadata specs in the CDI dir, and leftover temp files
    /// of them: (claim UID, file name).
    fn specs(&self) -> Result<Vec<(String, String)>, MetadataError> {
        let prefix = format!("{}_metadata_", self.driver);
        let names = self
            .cdi
            .file_names()
            .map_err(|e| io_error("list", Path::new("the CDI directory"))(io::Error::other(e)))?;
        Ok(names
            .into_iter()
            .filter_map(|n| {
                let spec = (n.strip_prefix('.')).and_then(|t| t.strip_suffix(".tmp"));
                let rest = spec
                    .unwrap_or(&n)
                    .strip_prefix(&prefix)?
                    .strip_suffix(".json")?;
                // A UID has no '_'; a request name neither.
                let (uid, _request) = rest.split_once('_')?;
                Some((uid.to_string(), n.clone()))
            })
            .collect())
    }

    /// Removes the metadata of every claim `checkpoint` does not hold (left
    /// by a prepare that did not finish); what was removed.
    pub fn remove_orphans(&self, checkpoint: &Checkpoint) -> Result<Vec<String>, MetadataError> {
        let mut removed = Vec::new();
        for (uid, file) in self.specs()? {
            if !checkpoint.claims.contains_key(&uid) {
                (self.cdi.remove(&file))
                    .map_err(|e| io_error("remove", Path::new(&file))(io::Error::other(e)))?;
                removed.push(file);
            }
        }
        let held: BTreeSet<&String> = checkpoint.claims.keys().collect();
        for root in [&self.root, &self.legacy] {
            remove_unheld(root, &held, &mut removed)?;
        }
        Ok(removed)
    }
}

/// The metadata directory a recorded spec mounts its file from:
/// `<root>/<claim UID>/<request>/metadata.json`.
fn mounted_root(spec: &str) -> Option<PathBuf> {
    let spec: serde_json::Value = serde_json::from_str(spec).ok()?;
    let host = spec["devices"][0]["containerEdits"]["mounts"][0]["hostPath"].as_str()?;
    let file = Path::new(host);
    let root = file.parent()?.parent()?.parent()?;
    (file.file_name()? == "metadata.json").then(|| root.to_path_buf())
}

/// Removes the claim directories under `root` of claims not in `held`,
/// adding them to `removed`; a missing `root` holds none.
fn remove_unheld(
    root: &Path,
    held: &BTreeSet<&String>,
    removed: &mut Vec<String>,
) -> Result<(), MetadataError> {
    let entries = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error("list", root)(e)),
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if held.contains(&name) {
            continue;
        }
        if !is_claim_dir(&path) {
            tracing::warn!(path = %path.display(), "not a claim's device-metadata directory: left alone (is --metadata-dir a directory of its own?)");
            continue;
        }
        remove_path(&path)?;
        removed.push(path.display().to_string());
    }
    Ok(())
}

/// Whether `path` is laid out as a claim's directory of ours: named as the
/// API server names claims (a UUID), a directory of directories, each
/// holding at most `metadata.json` and its temp file. What is not is never
/// removed: `--metadata-dir` naming a directory others use too (`/var/run`,
/// with `/run/lock` and `/run/sshd` in it) must not cost them their files.
pub(crate) fn is_claim_dir(path: &Path) -> bool {
    let named = (path.file_name().and_then(|n| n.to_str())).is_some_and(is_uuid);
    let ours = |file: &fs::DirEntry| {
        let name = file.file_name();
        (name == "metadata.json" || name == "metadata.json.tmp")
            && file.file_type().is_ok_and(|t| t.is_file())
    };
    let request_dir = |entry: fs::DirEntry| {
        entry.file_type().is_ok_and(|t| t.is_dir())
            && fs::read_dir(entry.path())
                .is_ok_and(|files| files.into_iter().all(|f| f.is_ok_and(|f| ours(&f))))
    };
    let is_dir = fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
    named
        && is_dir
        && fs::read_dir(path)
            .is_ok_and(|entries| entries.into_iter().all(|e| e.is_ok_and(request_dir)))
}

/// Whether `name` is a UUID in its text form (8-4-4-4-12 hex digits), as
/// the API server makes every object's UID.
fn is_uuid(name: &str) -> bool {
    let groups: Vec<&str> = name.split('-').collect();
    let lengths = groups.iter().map(|g| g.len()).collect::<Vec<_>>();
    lengths == [8, 4, 4, 4, 12]
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The file of `request` of claim `uid` under `root`.
fn file_of(root: &Path, uid: &str, request: &str) -> PathBuf {
    root.join(uid).join(request).join("metadata.json")
}

/// Removes a directory tree or a file; absent is fine.
fn remove_path(path: &Path) -> Result<(), MetadataError> {
    let removed = match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) => Err(e),
    };
    match removed {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_error("remove", path)(e)),
        _ => Ok(()),
    }
}

/// Replaces `path` with `bytes` atomically (temp file in the same
/// directory, rename), readable by all (0644). Not fsynced: a file lost or
/// cut short is written again from the checkpoint's record (the claim's
/// devices, today's attributes and addresses; the content itself for
/// records of older agents).
fn write_replacing(path: &Path, bytes: &[u8]) -> Result<(), MetadataError> {
    use std::os::unix::fs::PermissionsExt as _;
    let tmp = path.with_extension("json.tmp");
    let mut file = fs::File::create(&tmp).map_err(io_error("create", &tmp))?;
    file.write_all(bytes).map_err(io_error("write", &tmp))?;
    (file.set_permissions(fs::Permissions::from_mode(0o644))).map_err(io_error("chmod", &tmp))?;
    drop(file);
    fs::rename(&tmp, path).map_err(io_error("rename", path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::tests::{claim, request};
    use serde_json::{Value, json};

    #[test]
    fn write_remove_and_orphans_leave_only_what_the_checkpoint_holds() {
        let tmp = tempfile::tempdir().unwrap();
        let cdi = CdiDir::open(&tmp.path().join("cdi")).unwrap();
        let plugin = tmp.path().join("plugin");
        let files = MetadataFiles::new(
            "ainic.amd.com",
            &tmp.path().join("md"),
            &plugin,
            cdi.clone(),
        );
        let c = claim(None);
        let written = files.write(&c, &[request()]).unwrap();
        assert_eq!(
            written.ids["nics"],
            format!("ainic.amd.com/metadata={}_nics", c.uid)
        );
        let host = tmp.path().join(format!("md/{}/nics/metadata.json", c.uid));
        let mode = fs::metadata(&host).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o644
        );
        let spec_name = spec_file("ainic.amd.com", &c.uid, "nics");
        let spec: Value = serde_json::from_slice(&cdi.read(&spec_name).unwrap().unwrap()).unwrap();
        let mount = &spec["devices"][0]["containerEdits"]["mounts"][0];
        assert_eq!(mount["hostPath"], host.display().to_string());
        assert_eq!(mount["options"], json!(["ro", "bind"]));

        // A claim the checkpoint does not hold is an orphan, in the
        // plugin directory of older agents too.
        let legacy = plugin.join(format!("dra-device-metadata/{}/nics", c.uid));
        fs::create_dir_all(&legacy).unwrap();
        // What is not laid out as a claim's directory is not ours: kept.
        let md = tmp.path().join("md");
        let theirs = [md.join("run.sock"), md.join("lib/other")];
        fs::create_dir_all(md.join("lib")).unwrap();
        let interrupted = md.join("0b1c2d3e-0000-4000-8000-00000000000f");
        fs::create_dir_all(interrupted.join("x")).unwrap();
        fs::create_dir_all(md.join("sshd/x")).unwrap();
        for path in &theirs {
            fs::write(path, "").unwrap();
        }
        let removed = files.remove_orphans(&Checkpoint::default()).unwrap();
        assert_eq!(removed.len(), 3 + 1, "{removed:?}");
        assert!(!host.exists() && cdi.read(&spec_name).unwrap().is_none());
        assert!(!legacy.exists());
        assert!(theirs.iter().all(|p| p.exists()));
        assert!(
            md.join("sshd/x").exists(),
            "laid out as ours, named otherwise"
        );
        assert!(
            !md.join("net").exists(),
            "empty: a prepare that did not finish"
        );

        // A recorded spec comes back after a reboot emptied the CDI dir.
        let written = files.write(&c, &[request()]).unwrap();
        cdi.remove(&spec_name).unwrap();
        assert!(
            files
                .restore(&spec_name, &written.specs[&spec_name])
                .unwrap()
        );
        assert!(
            !files
                .restore(&spec_name, &written.specs[&spec_name])
                .unwrap()
        );

        // The claim recreated under its name is another UID: its files
        // are its own, and removing the old one leaves them.
        let again = ClaimMeta {
            uid: "0b1c2d3e-0000-4000-8000-000000000002".into(),
            ..c.clone()
        };
        let again_specs = files.write(&again, &[request()]).unwrap().specs;
        files.remove(&c.uid, written.specs.keys()).unwrap();
        assert!(!host.exists() && cdi.read(&spec_name).unwrap().is_none());
        let other = spec_file("ainic.amd.com", &again.uid, "nics");
        assert!(cdi.read(&other).unwrap().is_some());
        // A leftover temp file of a spec is the claim's too.
        cdi.write_file(&format!(".{other}.tmp"), b"{").unwrap();
        files.remove(&again.uid, again_specs.keys()).unwrap();
        assert!(
            cdi.file_names().unwrap().is_empty(),
            "{:?}",
            cdi.file_names()
        );
        files.remove(&again.uid, again_specs.keys()).unwrap();
    }
}
