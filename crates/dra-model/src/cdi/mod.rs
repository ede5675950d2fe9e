//! Container Device Interface (CDI) specs as this driver writes them: the
//! types of the fields it uses, the lowest `cdiVersion` a spec needs, and
//! the checks a runtime makes before it accepts a spec.
//!
//! Written here rather than taken from the `container-device-interface`
//! crate because that crate, made for runtimes, brings a JSON-schema
//! validator, an HTTP client and a TLS stack into the node agent (about a
//! third of its binary) for the few fields a driver writes. The crate stays
//! the judge in tests: every spec the driver builds passes its validation,
//! and its minimum-version computation agrees with [`Spec::minimum_version`]
//! (`tests/cdi.rs`).
//!
//! Version rules (from the CDI specification's changelog, as the reference
//! library applies them): 0.3.0 is the base; a mount `type` needs 0.4.0; a
//! device name that does not start with a letter, or a device node with a
//! `hostPath`, needs 0.5.0; annotations, or a `.` in the kind's class, need
//! 0.6.0; `netDevices` need 1.1.0. Runtimes such as podman 4.3 accept only
//! up to 0.5.0, so a spec is written with the lowest version it needs.

mod validate;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use topology::CharDevice;

pub use validate::CdiSpecError;

/// A CDI spec file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// `cdiVersion`: set by [`Spec::finish`] to the lowest one needed.
    pub cdi_version: String,
    /// `vendor/class`, e.g. `amd.com/ainic`.
    pub kind: String,
    /// Spec-wide annotations (0.6.0).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The devices.
    pub devices: Vec<Device>,
    /// Edits applied whenever any device of the spec is injected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_edits: Option<ContainerEdits>,
}

/// One device of a spec: `<kind>=<name>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// Name within the kind.
    pub name: String,
    /// Device annotations (0.6.0).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// What injecting it does.
    pub container_edits: ContainerEdits,
}

/// Changes to a container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    /// `NAME=value` entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Device nodes to create.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_nodes: Vec<DeviceNode>,
    /// Bind mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// Host network devices moved into the container's namespace (1.1.0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub net_devices: Vec<NetDevice>,
}

impl ContainerEdits {
    /// True when the edits change nothing.
    pub fn is_empty(&self) -> bool {
        self.env.is_empty()
            && self.device_nodes.is_empty()
            && self.mounts.is_empty()
            && self.net_devices.is_empty()
    }
}

/// A device node in the container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    /// Path in the container.
    pub path: String,
    /// Path on the host, when it differs or must be checked (0.5.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<String>,
    /// `c` or `b`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Major number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub major: Option<u32>,
    /// Minor number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor: Option<u32>,
    /// cgroup permissions, e.g. `rw`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
}

impl DeviceNode {
    /// A read-write char device with its numbers; `host_path` is the node's
    /// path on the host, when the caller found it there (a runtime fails on
    /// a host path that does not exist).
    pub fn char_device(c: &CharDevice, host_path: Option<String>) -> DeviceNode {
        DeviceNode {
            path: c.path.clone(),
            host_path,
            kind: Some("c".into()),
            major: Some(c.major),
            minor: Some(c.minor),
            permissions: Some("rw".into()),
        }
    }
}

/// A mount.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    /// Source on the host.
    pub host_path: String,
    /// Target in the container.
    pub container_path: String,
    /// Mount options (`ro`, `bind`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Filesystem type (0.4.0).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// A host network device for the container (CDI 1.1.0).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetDevice {
    /// Interface name on the host.
    pub host_interface_name: String,
    /// Interface name in the container.
    pub name: String,
}

impl Spec {
    /// The lowest `cdiVersion` whose rules allow every field of the spec
    /// (see the module docs).
    pub fn minimum_version(&self) -> &'static str {
        let all_edits = || {
            self.devices
                .iter()
                .map(|d| &d.container_edits)
                .chain(self.container_edits.as_ref())
        };
        if all_edits().any(|e| !e.net_devices.is_empty()) {
            return "1.1.0";
        }
        let class = self.kind.split_once('/').map_or("", |(_, c)| c);
        if !self.annotations.is_empty()
            || self.devices.iter().any(|d| !d.annotations.is_empty())
            || class.contains('.')
        {
            return "0.6.0";
        }
        let digit_name = self
            .devices
            .iter()
            .any(|d| !d.name.chars().next().is_some_and(char::is_alphabetic));
        let host_path = all_edits()
            .flat_map(|e| &e.device_nodes)
            .any(|n| n.host_path.as_deref().is_some_and(|p| !p.is_empty()));
        if digit_name || host_path {
            return "0.5.0";
        }
        if all_edits()
            .flat_map(|e| &e.mounts)
            .any(|m| m.kind.as_deref().is_some_and(|t| !t.is_empty()))
        {
            return "0.4.0";
        }
        "0.3.0"
    }

    /// Sets the lowest version the spec needs, checks it as a runtime would
    /// and returns its JSON text.
    pub fn finish(mut self) -> Result<String, CdiSpecError> {
        self.cdi_version = self.minimum_version().to_string();
        validate::check(&self)?;
        Ok(serde_json::to_string_pretty(&self).expect("a CDI spec serialises"))
    }

    /// The qualified name of device `name` of this spec's kind.
    pub fn qualified(&self, name: &str) -> String {
        format!("{}={name}", self.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(devices: Vec<Device>) -> Spec {
        Spec {
            kind: "amd.com/ainic".into(),
            devices,
            ..Spec::default()
        }
    }

    fn device(name: &str) -> Device {
        Device {
            name: name.into(),
            container_edits: ContainerEdits {
                env: vec!["A=1".into()],
                ..ContainerEdits::default()
            },
            ..Device::default()
        }
    }

    #[test]
    fn each_rule_raises_the_version_it_needs() {
        assert_eq!(spec(vec![device("classic-pf")]).minimum_version(), "0.3.0");
        let mut mount = spec(vec![device("a")]);
        mount.devices[0].container_edits.mounts.push(Mount {
            host_path: "/h".into(),
            container_path: "/c".into(),
            kind: Some("bind".into()),
            ..Mount::default()
        });
        assert_eq!(mount.minimum_version(), "0.4.0");
        assert_eq!(spec(vec![device("0b1c-pf")]).minimum_version(), "0.5.0");
        let mut host = spec(vec![device("a")]);
        host.container_edits = Some(ContainerEdits {
            device_nodes: vec![DeviceNode {
                path: "/dev/x".into(),
                host_path: Some("/dev/x".into()),
                ..DeviceNode::default()
            }],
            ..ContainerEdits::default()
        });
        assert_eq!(host.minimum_version(), "0.5.0");
        let mut annotated = spec(vec![device("0b")]);
        annotated.annotations.insert("a".into(), "b".into());
        assert_eq!(annotated.minimum_version(), "0.6.0");
        let mut net = spec(vec![device("a")]);
        net.devices[0].container_edits.net_devices.push(NetDevice {
            host_interface_name: "eth1".into(),
            name: "net1".into(),
        });
        assert_eq!(net.minimum_version(), "1.1.0");
    }

    #[test]
    fn a_finished_spec_carries_its_version() {
        let text = spec(vec![device("0b1c-pf")]).finish().unwrap();
        let back: Spec = serde_json::from_str(&text).unwrap();
        assert_eq!(back.cdi_version, "0.5.0");
        assert_eq!(back.devices[0].container_edits.env, ["A=1"]);
    }
}
