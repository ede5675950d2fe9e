//! Device metadata (KEP-5304): per prepared claim and request, a
//! `metadata.json` with the devices' attributes and network data, mounted
//! read-only into the containers that use the request.
//!
//! Written here to the layout and schema of upstream's Go helper for
//! drivers (`k8s.io/dynamic-resource-allocation/kubeletplugin`, v0.37),
//! which a Rust driver cannot use:
//! - on the host: `<plugin dir>/dra-device-metadata/<claimUID>/<request>/metadata.json`
//!   (upstream keys the directory by namespace and name; the host path is
//!   the driver's own, and by UID a claim recreated under the same name
//!   never touches the files of the one before), a JSON stream of one `DeviceMetadata` object per API version
//!   (`metadata.resource.k8s.io/v1beta1`, then `v1alpha1` for 1.36's
//!   readers), each pretty-printed and followed by a newline, with one
//!   request and its devices;
//! - a CDI spec `<cdi dir>/<driver>_metadata_<claimUID>_<request>.json` of
//!   kind `<driver>/metadata` whose one device, `<claimUID>_<request>`,
//!   bind-mounts the file read-only at
//!   `/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/<driver>-metadata.json`
//!   (`resourceclaimtemplates/<pod claim name>/…` for a claim made from a
//!   template, which carries the `resource.kubernetes.io/pod-claim-name`
//!   annotation); its CDI ID is added to the request's first device in the
//!   kubelet's answer, so exactly the containers using the request get it.
//!
//! `<request>` is the request's own name: a result for subrequest `a/b`
//! lands in `a`'s file, under the name `a/b`. Files are replaced
//! atomically (temp file, rename) with mode 0644; unprepare removes the
//! claim's directory and specs, and start-up removes those of claims the
//! checkpoint does not hold. The checkpoint records each spec (small, and
//! what an older agent needs after a rollback), which requests have a file
//! and the pod's name for the claim, not the files' content: at start-up
//! and every check of a prepared claim, a spec that is missing or differs
//! is written again from the record (the CDI directory is tmpfs), and a
//! file that is missing or not whole is written again from the claim's
//! devices and today's attributes and network data (the files are not
//! fsynced, so that a prepare pays one fsync, the checkpoint's, instead of
//! four). Entries of older agents carry the files' content too, and are
//! restored from it. Figures in docs/benchmarks.md.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use dra_model::cdi::{ContainerEdits, Device, Mount, Spec};
use k8s_openapi::api::resource::v1::{DeviceAttribute, NetworkDeviceData};
use serde_json::{Value, json};

use crate::cdi::dir::CdiDir;
use crate::checkpoint::Checkpoint;

/// Where the files appear inside a container.
pub(crate) const CONTAINER_ROOT: &str = "/var/run/kubernetes.io/dra-device-attributes";
/// The annotation of a claim made from a pod's claim template: the pod's
/// name for the claim.
pub(crate) const POD_CLAIM_NAME: &str = "resource.kubernetes.io/pod-claim-name";
/// API versions written, newest first.
pub(crate) const API_VERSIONS: [&str; 2] = [
    "metadata.resource.k8s.io/v1beta1",
    "metadata.resource.k8s.io/v1alpha1",
];
/// The directory under the plugin directory.
const HOST_DIR: &str = "dra-device-metadata";

/// The device attributes of the published pool, by device name.
///
/// Each device's attributes are kept as the compact JSON the metadata
/// files embed, and read back for the few devices a prepare names. As
/// typed maps (a `String` key and a five-field value per attribute) they
/// took about 9 KiB per device: 19 MB on an 8 PF × 256 VF node, the
/// largest thing the agent held at rest (heaptrack; docs/benchmarks.md).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceAttributes(BTreeMap<String, Box<str>>);

impl DeviceAttributes {
    /// The attributes of every device of `slices`.
    pub fn of(slices: &[k8s_openapi::api::resource::v1::ResourceSlice]) -> Self {
        let devices = slices.iter().flat_map(|s| s.spec.devices.iter().flatten());
        let compact = devices.map(|d| {
            let attributes = d
                .attributes
                .as_ref()
                .map(compact)
                .unwrap_or_else(|| "{}".into());
            (d.name.clone(), attributes)
        });
        Self(compact.collect())
    }

    /// The attributes of `device`; none for a device not published.
    pub fn get(&self, device: &str) -> BTreeMap<String, DeviceAttribute> {
        let Some(json) = self.0.get(device) else {
            return BTreeMap::new();
        };
        serde_json::from_str(json).expect("attributes kept as JSON read back")
    }

    /// How many devices have attributes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no device has any.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<(String, BTreeMap<String, DeviceAttribute>)> for DeviceAttributes {
    fn from_iter<I: IntoIterator<Item = (String, BTreeMap<String, DeviceAttribute>)>>(
        devices: I,
    ) -> Self {
        let devices = devices.into_iter();
        Self(devices.map(|(name, a)| (name, compact(&a))).collect())
    }
}

fn compact(attributes: &BTreeMap<String, DeviceAttribute>) -> Box<str> {
    let json = serde_json::to_string(attributes).expect("attributes serialise");
    json.into_boxed_str()
}

/// The claim the metadata describes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimMeta {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// The pod's name for the claim, when it was made from a template.
    pub pod_claim_name: Option<String>,
}

/// One device of a request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetaDevice {
    /// Pool (the node).
    pub pool: String,
    /// Device name.
    pub name: String,
    /// Its attributes as published.
    pub attributes: BTreeMap<String, DeviceAttribute>,
    /// Its netdev, MAC and addresses.
    pub network: Option<NetworkDeviceData>,
}

/// The devices allocated for one request (or one of its subrequests).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestMeta {
    /// As in the allocation result: `a` or `a/b`.
    pub request: String,
    /// Its devices of this driver on this node.
    pub devices: Vec<MetaDevice>,
}

impl RequestMeta {
    /// The request's own name: the part before a `/`.
    pub fn base(&self) -> &str {
        self.request.split('/').next().unwrap_or_default()
    }
}

/// Why metadata could not be written or removed.
#[derive(Debug, thiserror::Error)]
#[error("failed to {action} device metadata {path}: {source}")]
pub struct MetadataError {
    action: &'static str,
    path: PathBuf,
    source: io::Error,
}

/// What [`MetadataFiles::write`] wrote for the claim.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Written {
    /// The CDI ID of each request's mount, by request name (`a` for `a/b`).
    pub ids: BTreeMap<String, String>,
    /// The CDI specs written (file name, content), to record.
    pub specs: BTreeMap<String, String>,
    /// The requests whose file was written (`a` for `a/b`), to record.
    pub requests: BTreeSet<String>,
}

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> MetadataError {
    let path = path.to_path_buf();
    move |source| MetadataError {
        action,
        path,
        source,
    }
}

/// The file's JSON stream for one request.
pub(crate) fn document(driver: &str, claim: &ClaimMeta, request: &RequestMeta) -> String {
    let devices: Vec<Value> = request
        .devices
        .iter()
        .map(|d| {
            let mut device = json!({"driver": driver, "pool": d.pool, "name": d.name});
            if !d.attributes.is_empty() {
                device["attributes"] = json!(d.attributes);
            }
            if let Some(network) = &d.network {
                device["networkData"] = json!(network);
            }
            device
        })
        .collect();
    let mut out = String::new();
    for version in API_VERSIONS {
        let mut object = json!({
            "apiVersion": version,
            "kind": "DeviceMetadata",
            "metadata": {
                "name": claim.name,
                "namespace": claim.namespace,
                "uid": claim.uid,
                "generation": 1,
            },
            "requests": [{"name": request.request, "devices": devices}],
        });
        if let Some(pod_name) = claim.pod_claim_name.as_ref().filter(|n| !n.is_empty()) {
            object["podClaimName"] = json!(pod_name);
        }
        out.push_str(&serde_json::to_string_pretty(&object).expect("JSON values serialise"));
        out.push('\n');
    }
    out
}

/// True when `text` is what [`document`] writes for claim `uid` and
/// request `request` (`a`, or a subrequest `a/b`): one whole document per
/// API version, in order.
fn documents_of(text: &str, uid: &str, request: &str) -> bool {
    let documents = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let mut versions = API_VERSIONS.iter();
    for document in documents {
        let Ok(document) = document else {
            return false;
        };
        let name = document["requests"][0]["name"].as_str().unwrap_or_default();
        let ours = versions
            .next()
            .is_some_and(|v| document["apiVersion"] == *v)
            && document["metadata"]["uid"] == uid
            && name.split('/').next() == Some(request);
        if !ours {
            return false;
        }
    }
    versions.next().is_none()
}

/// Where the file of `request` appears in the container.
pub(crate) fn container_path(driver: &str, claim: &ClaimMeta, request: &str) -> String {
    match claim.pod_claim_name.as_ref().filter(|n| !n.is_empty()) {
        Some(pod_name) => format!(
            "{CONTAINER_ROOT}/resourceclaimtemplates/{pod_name}/{request}/{driver}-metadata.json"
        ),
        None => format!(
            "{CONTAINER_ROOT}/resourceclaims/{}/{request}/{driver}-metadata.json",
            claim.name
        ),
    }
}

/// The CDI spec file name of `request` of claim `uid`.
pub(crate) fn spec_file(driver: &str, uid: &str, request: &str) -> String {
    format!("{driver}_metadata_{uid}_{request}.json")
}

/// Where the metadata files of this driver live and their specs go.
#[derive(Clone, Debug)]
pub struct MetadataFiles {
    driver: String,
    root: PathBuf,
    cdi: CdiDir,
}

impl MetadataFiles {
    /// Files under `plugin_dir`, specs in `cdi`.
    pub fn new(driver: &str, plugin_dir: &Path, cdi: CdiDir) -> Self {
        Self {
            driver: driver.to_string(),
            root: plugin_dir.join(HOST_DIR),
            cdi,
        }
    }

    fn claim_dir(&self, uid: &str) -> PathBuf {
        self.root.join(uid)
    }

    /// Writes the file and the CDI spec of each request of `claim`. A
    /// failure removes what this call wrote.
    pub fn write(
        &self,
        claim: &ClaimMeta,
        requests: &[RequestMeta],
    ) -> Result<Written, MetadataError> {
        let written = self.write_all(claim, requests);
        if written.is_err() {
            let names = self.spec_names(&claim.uid, requests.iter().map(RequestMeta::base));
            let _ = self.remove(&claim.uid, &names);
        }
        written
    }

    fn write_all(
        &self,
        claim: &ClaimMeta,
        requests: &[RequestMeta],
    ) -> Result<Written, MetadataError> {
        let mut written = Written::default();
        for request in requests {
            let base = request.base();
            let file = self.file_of(&claim.uid, base);
            let dir = self.claim_dir(&claim.uid).join(base);
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

    /// Writes a recorded metadata file of `request` of claim `uid` again
    /// when it is missing or differs (lost to a power cut: files are not
    /// fsynced); whether it did.
    pub fn restore_file(
        &self,
        uid: &str,
        request: &str,
        content: &str,
    ) -> Result<bool, MetadataError> {
        let dir = self.claim_dir(uid).join(request);
        let file = self.file_of(uid, request);
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

    /// Removes the files of claim `uid` and its specs `spec_files` (with
    /// their temp files); absent ones are fine. The specs are named, not
    /// looked for: listing the CDI directory made every unprepare cost as
    /// much as the number of claims prepared (20,000 names at 10,000
    /// claims). Specs no record names, left by a prepare that did not
    /// finish, are found once, at start-up ([`Self::remove_orphans`]).
    pub fn remove<'a>(
        &self,
        uid: &str,
        spec_files: impl IntoIterator<Item = &'a String>,
    ) -> Result<(), MetadataError> {
        remove_path(&self.claim_dir(uid))?;
        for file in spec_files {
            (self.cdi.remove(file))
                .map_err(|e| io_error("remove", Path::new(file))(io::Error::other(e)))?;
        }
        Ok(())
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

    /// Writes the files and specs of `requests` of `claim` again, and on
    /// failure removes nothing ([`Self::write`] does): a restore must not
    /// take away what is intact.
    pub fn rewrite(
        &self,
        claim: &ClaimMeta,
        requests: &[RequestMeta],
    ) -> Result<(), MetadataError> {
        self.write_all(claim, requests).map(drop)
    }

    /// The requests among `requests` of `claim` whose file is not as
    /// [`Self::write`] left it: one whole document per API version, of this
    /// claim and request. A power cut can lose the file or cut it short (it
    /// is not fsynced).
    pub fn damaged(
        &self,
        claim: &ClaimMeta,
        requests: &[String],
    ) -> Result<Vec<String>, MetadataError> {
        let mut damaged = Vec::new();
        for request in requests {
            let file = self.file_of(&claim.uid, request);
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

    fn file_of(&self, uid: &str, request: &str) -> PathBuf {
        self.claim_dir(uid).join(request).join("metadata.json")
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
        let entries = match fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(removed),
            Err(e) => return Err(io_error("list", &self.root)(e)),
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !held.contains(&name) {
                let path = entry.path();
                remove_path(&path)?;
                removed.push(path.display().to_string());
            }
        }
        Ok(removed)
    }
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
/// directory, rename), readable by all (0644). Not fsynced: the checkpoint
/// holds the content and the file is written again from there.
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

    fn claim(pod_claim_name: Option<&str>) -> ClaimMeta {
        ClaimMeta {
            namespace: "ns".into(),
            name: "train-0-nic".into(),
            uid: "0b1c2d3e-0000-4000-8000-000000000001".into(),
            pod_claim_name: pod_claim_name.map(str::to_string),
        }
    }

    fn request() -> RequestMeta {
        RequestMeta {
            request: "nics/rail".into(),
            devices: vec![MetaDevice {
                pool: "node-a".into(),
                name: "pf-0000-04-00-0".into(),
                attributes: BTreeMap::from([(
                    "ainic.amd.com/rail".to_string(),
                    DeviceAttribute {
                        int: Some(0),
                        ..DeviceAttribute::default()
                    },
                )]),
                network: Some(NetworkDeviceData {
                    interface_name: Some("enp4s0".into()),
                    hardware_address: Some("02:00:00:00:00:04".into()),
                    ips: Some(vec!["10.0.0.4/24".into()]),
                }),
            }],
        }
    }

    #[test]
    fn the_document_is_one_object_per_api_version_with_the_request_and_its_devices() {
        let text = document("ainic.amd.com", &claim(Some("nic")), &request());
        let objects: Vec<Value> = serde_json::Deserializer::from_str(&text)
            .into_iter()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(objects.len(), 2);
        assert!(text.ends_with("}\n"));
        for (object, version) in objects.iter().zip(API_VERSIONS) {
            assert_eq!(object["apiVersion"], version);
            assert_eq!(object["kind"], "DeviceMetadata");
            assert_eq!(object["metadata"]["uid"], claim(None).uid);
            assert_eq!(object["metadata"]["generation"], 1);
            assert_eq!(object["podClaimName"], "nic");
            let requests = object["requests"].as_array().unwrap();
            assert_eq!(requests.len(), 1);
            assert_eq!(requests[0]["name"], "nics/rail");
            let device = &requests[0]["devices"][0];
            assert_eq!(device["driver"], "ainic.amd.com");
            assert_eq!(device["attributes"]["ainic.amd.com/rail"]["int"], 0);
            assert_eq!(device["networkData"]["interfaceName"], "enp4s0");
            assert_eq!(device["networkData"]["ips"][0], "10.0.0.4/24");
        }
        let direct = document("ainic.amd.com", &claim(None), &request());
        assert!(!direct.contains("podClaimName"));
    }

    #[test]
    fn published_attributes_read_back_as_they_were_for_each_device() {
        let attribute = |json: Value| -> DeviceAttribute { serde_json::from_value(json).unwrap() };
        let rich = BTreeMap::from([
            ("a/int".to_string(), attribute(json!({"int": -3}))),
            ("a/string".to_string(), attribute(json!({"string": "x\"y"}))),
            ("a/bool".to_string(), attribute(json!({"bool": false}))),
            (
                "a/version".to_string(),
                attribute(json!({"version": "1.2.3"})),
            ),
        ]);
        let slice: k8s_openapi::api::resource::v1::ResourceSlice = serde_json::from_value(json!({
            "metadata": {"name": "s"},
            "spec": {"driver": "d", "nodeName": "n", "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "rich", "attributes": rich}, {"name": "bare"}]}
        }))
        .unwrap();
        let published = DeviceAttributes::of(&[slice]);
        assert_eq!(published.len(), 2);
        assert_eq!(published.get("rich"), rich);
        assert_eq!(published.get("bare"), BTreeMap::new());
        assert_eq!(published.get("gone"), BTreeMap::new());
    }

    #[test]
    fn paths_follow_upstream_for_claims_and_template_claims() {
        assert_eq!(request().base(), "nics");
        assert_eq!(
            container_path("ainic.amd.com", &claim(None), "nics"),
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/train-0-nic/nics/ainic.amd.com-metadata.json"
        );
        assert_eq!(
            container_path("ainic.amd.com", &claim(Some("nic")), "nics"),
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/nic/nics/ainic.amd.com-metadata.json"
        );
    }

    #[test]
    fn write_remove_and_orphans_leave_only_what_the_checkpoint_holds() {
        let tmp = tempfile::tempdir().unwrap();
        let cdi = CdiDir::open(&tmp.path().join("cdi")).unwrap();
        let files = MetadataFiles::new("ainic.amd.com", &tmp.path().join("plugin"), cdi.clone());
        let c = claim(None);
        let written = files.write(&c, &[request()]).unwrap();
        assert_eq!(
            written.ids["nics"],
            format!("ainic.amd.com/metadata={}_nics", c.uid)
        );
        let host = tmp.path().join(format!(
            "plugin/dra-device-metadata/{}/nics/metadata.json",
            c.uid
        ));
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

        // A claim the checkpoint does not hold is an orphan.
        let removed = files.remove_orphans(&Checkpoint::default()).unwrap();
        assert_eq!(removed.len(), 2, "{removed:?}");
        assert!(!host.exists() && cdi.read(&spec_name).unwrap().is_none());

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
