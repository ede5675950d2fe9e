//! Device metadata (KEP-5304): per prepared claim and request, a
//! `metadata.json` with the devices' attributes and network data, mounted
//! read-only into the containers that use the request.
//!
//! Written here to the layout and schema of upstream's Go helper for
//! drivers (`k8s.io/dynamic-resource-allocation/kubeletplugin`, v0.37),
//! which a Rust driver cannot use:
//! - on the host: `<metadata dir>/<claimUID>/<request>/metadata.json`
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
//!
//! The metadata directory (`--metadata-dir`) is meant for tmpfs
//! (`/var/run`), as the CDI directory is: on a disk, ext4 writes the
//! files' pages out when the checkpoint's `fdatasync` commits its journal,
//! and that made half of a prepare's time (docs/benchmarks.md,
//! 2026-12-05). After a reboot empties it, the files are rebuilt as above
//! at the kubelet's first prepare of each claim, which is refused (and
//! retried by the kubelet) until the node's devices are published: a file
//! without its attributes would pass for whole. Agents before it kept the files in
//! `<plugin dir>/dra-device-metadata`; a claim they prepared keeps its
//! files there until it is unprepared, because its recorded specs (which a
//! container restarted in its pod still mounts) name that place
//! ([`MetadataFiles::root_of`]).

mod files;

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

pub(crate) use files::{MetadataFiles, is_claim_dir};

use k8s_openapi::api::resource::v1::{DeviceAttribute, NetworkDeviceData};
use serde_json::{Value, json};

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

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn claim(pod_claim_name: Option<&str>) -> ClaimMeta {
        ClaimMeta {
            namespace: "ns".into(),
            name: "train-0-nic".into(),
            uid: "0b1c2d3e-0000-4000-8000-000000000001".into(),
            pod_claim_name: pod_claim_name.map(str::to_string),
        }
    }

    pub(super) fn request() -> RequestMeta {
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
}
