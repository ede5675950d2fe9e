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
//! Unknown fields are errors (a misspelt `leafswitch` must not be ignored).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::FabricError;

/// Fabric facts one entry of the file sets; every field optional.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FabricEntry {
    /// Rail number (per NIC only).
    pub rail: Option<u32>,
    /// Fabric partition / domain.
    pub fabric: Option<String>,
    /// Leaf switch.
    pub leaf_switch: Option<String>,
    /// Tenant the NIC (and its VFs and shares) is fenced to.
    pub tenant: Option<String>,
}

/// Facts for every NIC of one node, and per-NIC overrides.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeEntry {
    /// Fabric of every NIC of the node.
    pub fabric: Option<String>,
    /// Leaf switch of every NIC of the node.
    pub leaf_switch: Option<String>,
    /// Tenant of every NIC of the node.
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
    /// Parses and checks the YAML text of the file named `origin`.
    pub fn parse(text: &str, origin: &str) -> Result<Self, FabricError> {
        let file: FabricFile = if text.trim().is_empty() {
            FabricFile::default()
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| FabricError::Syntax {
                origin: origin.to_string(),
                message: e.to_string(),
            })?
        };
        file.check(origin)?;
        Ok(file)
    }

    fn check(&self, origin: &str) -> Result<(), FabricError> {
        check_node(&self.defaults, origin, "defaults")?;
        for (name, node) in &self.nodes {
            check_node(node, origin, &format!("nodes.{name}"))?;
        }
        Ok(())
    }
}

fn check_node(node: &NodeEntry, origin: &str, path: &str) -> Result<(), FabricError> {
    check_text(node.fabric.as_deref(), origin, &format!("{path}.fabric"))?;
    check_text(
        node.leaf_switch.as_deref(),
        origin,
        &format!("{path}.leafSwitch"),
    )?;
    check_tenant(node.tenant.as_deref(), origin, &format!("{path}.tenant"))?;
    for (nic, entry) in &node.nics {
        let at = format!("{path}.nics.{nic}");
        check_text(entry.fabric.as_deref(), origin, &format!("{at}.fabric"))?;
        check_text(
            entry.leaf_switch.as_deref(),
            origin,
            &format!("{at}.leafSwitch"),
        )?;
        check_tenant(entry.tenant.as_deref(), origin, &format!("{at}.tenant"))?;
    }
    Ok(())
}

/// Fabric and leaf names become string attributes: 1–64 printable characters.
fn check_text(value: Option<&str>, origin: &str, field: &str) -> Result<(), FabricError> {
    match value {
        Some(v) if v.is_empty() || v.len() > 64 || v.chars().any(char::is_control) => {
            Err(FabricError::Field {
                origin: origin.to_string(),
                field: field.to_string(),
                message: format!("{v:?} must be 1 to 64 printable characters"),
            })
        }
        _ => Ok(()),
    }
}

fn check_tenant(value: Option<&str>, origin: &str, field: &str) -> Result<(), FabricError> {
    let Some(tenant) = value else { return Ok(()) };
    crate::deviceclass::check_tenant(tenant).map_err(|message| FabricError::Field {
        origin: origin.to_string(),
        field: field.to_string(),
        message,
    })
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
