//! The fabric config file: rail, fabric, leaf switch and tenant per node
//! and per NIC.
//!
//! ```yaml
//! defaults:            # every node
//!   fabric: pod-a
//! nodes:
//!   node-a:            # every NIC of node-a
//!     fabric: pod-a-1
//!     leafSwitch: leaf-07
//!     nics:            # one NIC, by PCI address or interface name
//!       "0000:0c:00.0": { rail: 0, leafSwitch: leaf-01 }
//!       enp140s0: { rail: 4, tenant: team-a }
//! ```
//!
//! The tenant is not a fabric fact, but it is set per node and per NIC like
//! them, so it shares their file rather than needing a second one to
//! distribute and keep in step.
//!
//! Unknown fields are errors (a misspelt `leafswitch` must not be ignored),
//! and so are values that cannot be published: they are checked while the
//! YAML is read, so every error names the entry (`nodes.node-a.nics.eth0.
//! tenant`) and its line and column.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use super::FabricError;

/// Fabric facts one entry of the file sets; every field optional.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FabricEntry {
    /// Rail number (per NIC only).
    pub rail: Option<u32>,
    /// Fabric partition / domain.
    #[serde(default, deserialize_with = "text")]
    pub fabric: Option<String>,
    /// Leaf switch.
    #[serde(default, deserialize_with = "text")]
    pub leaf_switch: Option<String>,
    /// Tenant the NIC (and its VFs and shares) is fenced to.
    #[serde(default, deserialize_with = "tenant")]
    pub tenant: Option<String>,
}

/// Facts for every NIC of one node, and per-NIC overrides.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeEntry {
    /// Fabric of every NIC of the node.
    #[serde(default, deserialize_with = "text")]
    pub fabric: Option<String>,
    /// Leaf switch of every NIC of the node.
    #[serde(default, deserialize_with = "text")]
    pub leaf_switch: Option<String>,
    /// Tenant of every NIC of the node.
    #[serde(default, deserialize_with = "tenant")]
    pub tenant: Option<String>,
    /// Per NIC, keyed by PCI address or interface name.
    #[serde(default)]
    pub nics: BTreeMap<String, FabricEntry>,
}

/// A parsed fabric config file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FabricFile {
    /// Facts for every node.
    #[serde(default)]
    pub defaults: NodeEntry,
    /// Per node, by node name.
    #[serde(default)]
    pub nodes: BTreeMap<String, NodeEntry>,
}

impl FabricFile {
    /// Parses and checks the YAML text of the file named `origin`. The
    /// error names the file, the entry and its line.
    pub fn parse(text: &str, origin: &str) -> Result<Self, FabricError> {
        if text.trim().is_empty() {
            return Ok(FabricFile::default());
        }
        serde_yaml_ng::from_str(text).map_err(|e| FabricError::Syntax {
            origin: origin.to_string(),
            message: e.to_string(),
        })
    }
}

/// Fabric and leaf names become string attributes: 1–64 printable characters.
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked(d, |v| {
        let printable = !v.is_empty() && v.len() <= 64 && !v.chars().any(char::is_control);
        match printable {
            true => Ok(()),
            false => Err(format!("{v:?} must be 1 to 64 printable characters")),
        }
    })
}

/// Tenants end class names and match namespace labels: a DNS label.
fn tenant<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    checked(d, |t| {
        crate::deviceclass::check_tenant(t).map_err(|e| e.to_string())
    })
}

/// An optional string that `check` accepts. Checked inside the parser's
/// own call for the value, so its error carries the value's path and line.
fn checked<'de, D: Deserializer<'de>>(
    d: D,
    check: fn(&str) -> Result<(), String>,
) -> Result<Option<String>, D::Error> {
    d.deserialize_option(Checked(check))
}

/// The visitor of [`checked`]: `None` for null, else the checked string.
struct Checked(fn(&str) -> Result<(), String>);

impl<'de> serde::de::Visitor<'de> for Checked {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string")
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        (self.0)(v).map_err(E::custom)?;
        Ok(Some(v.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nodes_and_nics() {
        let f = FabricFile::parse(
            "defaults: {fabric: pod-a}\nnodes:\n  node-a:\n    leafSwitch: leaf-7\n    nics:\n      \"0000:0c:00.0\": {rail: 3}\n",
            "fabric.yaml",
        )
        .unwrap();
        assert_eq!(f.defaults.fabric.as_deref(), Some("pod-a"));
        assert_eq!(f.nodes["node-a"].nics["0000:0c:00.0"].rail, Some(3));
    }

    #[test]
    fn unknown_field_error_names_file_and_field() {
        let err = FabricFile::parse(
            "nodes:\n  node-a:\n    leafswitch: x\n",
            "/etc/ainic/fabric.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("/etc/ainic/fabric.yaml"), "{err}");
        assert!(err.contains("leafswitch"), "{err}");
    }

    /// Issue 29 item 1: the agent's log line names the file, the entry and
    /// its line, for unknown fields and for values that cannot be published.
    #[test]
    fn errors_name_the_file_the_entry_and_the_line() {
        let text = "nodes:\n  node-a:\n    tenant: team-a\n    nics:\n      eth0: {rail: 1}\n      eth1: {tenant: Team_B}\n";
        let err = FabricFile::parse(text, "/etc/ainic-dra/fabric.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("/etc/ainic-dra/fabric.yaml"), "{err}");
        assert!(err.contains("nodes.node-a.nics.eth1.tenant"), "{err}");
        assert!(err.contains("line 6"), "{err}");
        let err = FabricFile::parse(
            "nodes:\n  n:\n    nics:\n      eth0: {leafswitch: x}\n",
            "f.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("nodes.n.nics.eth0")
                && err.contains("leafswitch")
                && err.contains("line 4"),
            "{err}"
        );
    }

    #[test]
    fn bad_values_name_the_field() {
        let long = "x".repeat(65);
        let err = FabricFile::parse(&format!("nodes:\n  n:\n    fabric: {long}\n"), "f.yaml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("nodes.n.fabric"), "{err}");
        let err = FabricFile::parse(
            "nodes:\n  n:\n    nics:\n      eth0: {rail: -1}\n",
            "f.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("f.yaml") && err.contains("rail"), "{err}");
        let err = FabricFile::parse(
            "nodes:\n  n:\n    nics:\n      eth0: {tenant: Team_A}\n",
            "f.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("nodes.n.nics.eth0.tenant"), "{err}");
        assert!(err.contains("DNS label"), "{err}");
    }
}
