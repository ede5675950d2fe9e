//! The classic device plugin config: which extended resources exist, which
//! devices each one offers, and which devices are left to DRA.
//!
//! ```yaml
//! resources:
//!   - name: amd.com/nic            # extended resource name
//!     selectors:
//!       pciIds: ["1dd8:1002"]      # vendor:device, hex
//!   - name: amd.com/vnic
//!     selectors:
//!       pciIds: ["1dd8:1003"]
//!       netdevs: [ens1v0, ens1v1]  # optional, ANDed with pciIds
//! dra:                             # devices DRA publishes instead
//!   pciAddresses: ["0000:8c:00.0"]
//! charDevices:
//!   umad: false                    # add /dev/infiniband/umadN
//!   issm: false                    # add /dev/infiniband/issmN
//! ```
//!
//! Without a file (or with `resources` left out) the two default resources
//! apply: `amd.com/nic` = PFs `1dd8:1002`, `amd.com/vnic` = VFs `1dd8:1003`.
//! Unknown fields are errors. Every error names the file and the field.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use topology::PciAddress;

use super::selector::{DeviceSelector, parse_pci_id};

/// AMD Pensando vendor ID.
const VENDOR_AMD_PENSANDO: u16 = 0x1dd8;
/// AINIC physical function device ID.
const DEVICE_AINIC_PF: u16 = 0x1002;
/// AINIC virtual function device ID.
const DEVICE_AINIC_VF: u16 = 0x1003;

/// Why a config file was rejected.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The YAML did not parse into the config shape (syntax, unknown field, type).
    #[error("invalid device plugin config {file}: {source}")]
    Parse {
        /// The config file.
        file: PathBuf,
        /// What the YAML parser said, with line and column.
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// A field parsed but holds a value the plugin cannot use.
    #[error("invalid device plugin config {file}: field {field}: {reason}")]
    Invalid {
        /// The config file.
        file: PathBuf,
        /// Path of the field, e.g. `resources[1].selectors.pciIds[0]`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// An extended resource name, `<domain>/<name>` (e.g. `amd.com/nic`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourceName(String);

impl ResourceName {
    /// Validates `text` as an extended resource name.
    pub fn new(text: &str) -> Result<Self, String> {
        let (domain, name) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not <domain>/<name>"))?;
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if domain.len() > 253 || !domain.contains('.') || !domain.split('.').all(label_ok) {
            return Err(format!("{domain:?} is not a DNS domain"));
        }
        if domain == "kubernetes.io" || domain.ends_with(".kubernetes.io") {
            return Err(format!("{domain:?} is reserved for Kubernetes"));
        }
        let name_ok = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !name_ok {
            return Err(format!("{name:?} is not a valid resource name"));
        }
        Ok(ResourceName(text.to_string()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The env variable that lists the allocated PCI addresses, the way the
    /// SR-IOV device plugin names it: `amd.com/nic` -> `PCIDEVICE_AMD_COM_NIC`.
    pub fn pci_env_name(&self) -> String {
        let upper: String = self
            .0
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect();
        format!("PCIDEVICE_{upper}")
    }
}

impl std::fmt::Display for ResourceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One extended resource and the devices it offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceSpec {
    /// The extended resource name registered with the kubelet.
    pub name: ResourceName,
    /// Which functions it offers.
    pub selector: DeviceSelector,
}

/// Which optional RDMA char devices a container gets besides `uverbsN`
/// and `rdma_cm`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CharDeviceOptions {
    /// Add the MAD devices (`umadN`).
    #[serde(default)]
    pub umad: bool,
    /// Add the subnet-management devices (`issmN`).
    #[serde(default)]
    pub issm: bool,
}

/// The validated classic device plugin config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassicConfig {
    /// Extended resources, in config order; names are unique.
    pub resources: Vec<ResourceSpec>,
    /// Devices left to the DRA path; `None` leaves none to DRA.
    pub dra: Option<DeviceSelector>,
    /// Optional char devices.
    pub char_devices: CharDeviceOptions,
}

impl Default for ClassicConfig {
    fn default() -> Self {
        ClassicConfig {
            resources: default_resources(),
            dra: None,
            char_devices: CharDeviceOptions::default(),
        }
    }
}

fn default_resources() -> Vec<ResourceSpec> {
    let spec = |name: &str, device| ResourceSpec {
        name: ResourceName(name.to_string()),
        selector: DeviceSelector::pci_id(VENDOR_AMD_PENSANDO, device),
    };
    vec![
        spec("amd.com/nic", DEVICE_AINIC_PF),
        spec("amd.com/vnic", DEVICE_AINIC_VF),
    ]
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    resources: Option<Vec<RawResource>>,
    dra: Option<RawSelectors>,
    #[serde(default)]
    char_devices: CharDeviceOptions,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResource {
    name: String,
    selectors: RawSelectors,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSelectors {
    #[serde(default)]
    pci_ids: Vec<String>,
    #[serde(default)]
    pci_addresses: Vec<String>,
    #[serde(default)]
    netdevs: Vec<String>,
}

impl ClassicConfig {
    /// Parses and validates the YAML `text` read from `file` (the path only
    /// names the file in errors). Empty text means the defaults.
    pub fn from_yaml(text: &str, file: &Path) -> Result<Self, ConfigError> {
        let raw: RawConfig = if text.trim().is_empty() {
            RawConfig::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|source| ConfigError::Parse {
                file: file.to_path_buf(),
                source,
            })?
        };
        let invalid = |field: String, reason: String| ConfigError::Invalid {
            file: file.to_path_buf(),
            field,
            reason,
        };
        let resources = match raw.resources {
            None => default_resources(),
            Some(list) if list.is_empty() => {
                return Err(invalid(
                    "resources".into(),
                    "must list at least one resource".into(),
                ));
            }
            Some(list) => validate_resources(list).map_err(|(f, r)| invalid(f, r))?,
        };
        let dra = raw
            .dra
            .map(|s| validate_selectors(s, "dra"))
            .transpose()
            .map_err(|(f, r)| invalid(f, r))?;
        Ok(ClassicConfig {
            resources,
            dra,
            char_devices: raw.char_devices,
        })
    }

    /// Whether the config leaves `nic` to the DRA path.
    pub fn left_to_dra(&self, nic: &topology::NicFunction) -> bool {
        self.dra.as_ref().is_some_and(|s| s.matches(nic))
    }
}

type FieldError = (String, String);

fn validate_resources(list: Vec<RawResource>) -> Result<Vec<ResourceSpec>, FieldError> {
    let mut out: Vec<ResourceSpec> = Vec::with_capacity(list.len());
    for (i, raw) in list.into_iter().enumerate() {
        let name = ResourceName::new(&raw.name).map_err(|r| (format!("resources[{i}].name"), r))?;
        if out.iter().any(|r| r.name == name) {
            return Err((
                format!("resources[{i}].name"),
                format!("{name} is listed twice"),
            ));
        }
        let selector = validate_selectors(raw.selectors, &format!("resources[{i}].selectors"))?;
        out.push(ResourceSpec { name, selector });
    }
    Ok(out)
}

fn validate_selectors(raw: RawSelectors, field: &str) -> Result<DeviceSelector, FieldError> {
    let mut sel = DeviceSelector::default();
    for (i, t) in raw.pci_ids.iter().enumerate() {
        let id = parse_pci_id(t).ok_or_else(|| {
            let f = format!("{field}.pciIds[{i}]");
            (
                f,
                format!("{t:?} is not vendor:device in hex (e.g. 1dd8:1002)"),
            )
        })?;
        sel.pci_ids.push(id);
    }
    for (i, t) in raw.pci_addresses.iter().enumerate() {
        let a: PciAddress = t
            .parse()
            .map_err(|e| (format!("{field}.pciAddresses[{i}]"), format!("{e}")))?;
        sel.pci_addresses.push(a);
    }
    for (i, t) in raw.netdevs.iter().enumerate() {
        if t.is_empty() || t.len() > 15 || t.contains(['/', ' ']) {
            let f = format!("{field}.netdevs[{i}]");
            return Err((f, format!("{t:?} is not a network interface name")));
        }
        sel.netdevs.push(t.clone());
    }
    if sel.is_empty() {
        let reason = "must set at least one of pciIds, pciAddresses, netdevs".to_string();
        return Err((field.to_string(), reason));
    }
    Ok(sel)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ClassicConfig, ConfigError> {
        ClassicConfig::from_yaml(text, Path::new("/etc/ainic/dp.yaml"))
    }

    fn error_text(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn empty_file_gives_the_default_split() {
        let c = parse("").unwrap();
        assert_eq!(c, ClassicConfig::default());
        assert_eq!(c.resources[0].name.as_str(), "amd.com/nic");
        assert_eq!(c.resources[0].selector.pci_ids, [(0x1dd8, 0x1002)]);
        assert_eq!(c.resources[1].name.as_str(), "amd.com/vnic");
        assert_eq!(c.resources[1].selector.pci_ids, [(0x1dd8, 0x1003)]);
        assert!(c.dra.is_none());
    }

    #[test]
    fn full_config_parses() {
        let c = parse(
            "resources:\n  - name: example.com/rail-nic\n    selectors:\n      pciIds: [\"0x1dd8:0x1002\"]\n      netdevs: [ens1]\ndra:\n  pciAddresses: [\"0000:8c:00.0\"]\ncharDevices:\n  umad: true\n",
        )
        .unwrap();
        assert_eq!(c.resources.len(), 1);
        assert_eq!(c.resources[0].selector.netdevs, ["ens1"]);
        assert_eq!(
            c.dra.unwrap().pci_addresses,
            ["0000:8c:00.0".parse::<PciAddress>().unwrap()]
        );
        assert!(c.char_devices.umad && !c.char_devices.issm);
    }

    #[test]
    fn unknown_field_is_rejected_with_file_and_field() {
        let e = error_text("resources:\n  - name: amd.com/nic\n    selector:\n      pciIds: []\n");
        assert!(e.contains("/etc/ainic/dp.yaml"), "{e}");
        assert!(e.contains("selector"), "{e}");
        let e = error_text("charDevices:\n  umads: true\n");
        assert!(e.contains("umads"), "{e}");
    }

    #[test]
    fn bad_values_name_the_field() {
        let cases = [
            (
                "resources:\n  - name: nic\n    selectors: {pciIds: [\"1dd8:1002\"]}\n",
                "resources[0].name",
            ),
            (
                "resources:\n  - name: kubernetes.io/nic\n    selectors: {pciIds: [\"1dd8:1002\"]}\n",
                "resources[0].name",
            ),
            (
                "resources:\n  - name: amd.com/nic\n    selectors: {pciIds: [\"1dd8\"]}\n",
                "resources[0].selectors.pciIds[0]",
            ),
            (
                "resources:\n  - name: amd.com/nic\n    selectors: {pciAddresses: [\"0c:00.0\"]}\n",
                "resources[0].selectors.pciAddresses[0]",
            ),
            (
                "resources:\n  - name: amd.com/nic\n    selectors: {}\n",
                "resources[0].selectors",
            ),
            ("resources: []\n", "resources"),
            ("dra: {netdevs: [\"a/b\"]}\n", "dra.netdevs[0]"),
        ];
        for (text, field) in cases {
            let e = error_text(text);
            assert!(e.contains(&format!("field {field}:")), "{text:?}: {e}");
            assert!(e.contains("/etc/ainic/dp.yaml"), "{e}");
        }
    }

    #[test]
    fn duplicate_resource_names_are_rejected() {
        let e = error_text(
            "resources:\n  - name: amd.com/nic\n    selectors: {pciIds: [\"1dd8:1002\"]}\n  - name: amd.com/nic\n    selectors: {pciIds: [\"1dd8:1003\"]}\n",
        );
        assert!(
            e.contains("resources[1].name") && e.contains("twice"),
            "{e}"
        );
    }

    #[test]
    fn env_name_follows_the_sriov_plugin() {
        let n = ResourceName::new("amd.com/nic").unwrap();
        assert_eq!(n.pci_env_name(), "PCIDEVICE_AMD_COM_NIC");
        let n = ResourceName::new("amd.com/vnic").unwrap();
        assert_eq!(n.pci_env_name(), "PCIDEVICE_AMD_COM_VNIC");
        let n = ResourceName::new("example.com/rail-nic").unwrap();
        assert_eq!(n.pci_env_name(), "PCIDEVICE_EXAMPLE_COM_RAIL_NIC");
    }
}
