//! LLDP neighbours, from `lldpcli -f json0 show neighbors`.
//!
//! The `json0` format keeps one shape whatever the number of interfaces or
//! neighbours: every object is wrapped in a list.
//!
//! ```json
//! {"lldp": [{"interface": [
//!   {"name": "enp12s0", "via": "LLDP",
//!    "chassis": [{"id": [{"type": "mac", "value": "0c:42:a1:00:00:01"}],
//!                 "name": [{"value": "leaf-07"}]}],
//!    "port": [{"id": [{"type": "ifname", "value": "Ethernet12"}]}]}
//! ]}]}
//! ```
//!
//! With no neighbour, `lldp` holds an empty object. The leaf switch of an
//! interface is the neighbour's system name, else its chassis ID.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::FabricError;

/// Leaf switch per local interface name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LldpNeighbors {
    /// Interface name → leaf switch.
    pub leaf_by_interface: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct Document {
    lldp: Vec<LldpSection>,
}

#[derive(Deserialize)]
struct LldpSection {
    #[serde(default)]
    interface: Vec<Interface>,
}

#[derive(Deserialize)]
struct Interface {
    name: String,
    #[serde(default)]
    chassis: Vec<Chassis>,
}

#[derive(Deserialize)]
struct Chassis {
    #[serde(default)]
    id: Vec<Value>,
    #[serde(default)]
    name: Vec<Value>,
}

#[derive(Deserialize)]
struct Value {
    value: String,
}

impl LldpNeighbors {
    /// Parses `lldpcli -f json0 show neighbors` output read from `origin`
    /// (a file name or the command line).
    pub fn parse(json: &str, origin: &str) -> Result<Self, FabricError> {
        let doc: Document = serde_json::from_str(json).map_err(|e| FabricError::Syntax {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        let mut leaf_by_interface = BTreeMap::new();
        for iface in doc.lldp.into_iter().flat_map(|s| s.interface) {
            let Some(chassis) = iface.chassis.into_iter().next() else {
                continue;
            };
            let leaf = first_value(chassis.name).or_else(|| first_value(chassis.id));
            let Some(leaf) = leaf else { continue };
            if leaf.len() > 64 {
                return Err(FabricError::Field {
                    origin: origin.to_string(),
                    field: format!("lldp.interface[{}].chassis.name", iface.name),
                    message: format!("{leaf:?} is longer than 64 characters"),
                });
            }
            // The first neighbour of an interface wins (lldpd lists the
            // most recent first).
            leaf_by_interface.entry(iface.name).or_insert(leaf);
        }
        Ok(LldpNeighbors { leaf_by_interface })
    }
}

fn first_value(values: Vec<Value>) -> Option<String> {
    values
        .into_iter()
        .map(|v| v.value.trim().to_string())
        .find(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = r#"{"lldp":[{"interface":[
      {"name":"enp12s0","via":"LLDP","rid":"1","age":"0 day, 00:10:00",
       "chassis":[{"id":[{"type":"mac","value":"0c:42:a1:00:00:01"}],"name":[{"value":"leaf-07"}],
                   "descr":[{"value":"SONiC"}],"capability":[{"type":"Bridge","enabled":true}]}],
       "port":[{"id":[{"type":"ifname","value":"Ethernet12"}],"ttl":[{"value":"120"}]}]},
      {"name":"enp13s0","chassis":[{"id":[{"type":"mac","value":"0c:42:a1:00:00:02"}]}],
       "port":[{"id":[{"type":"ifname","value":"Ethernet13"}]}]}
    ]}]}"#;

    #[test]
    fn maps_interfaces_to_leaf_switches() {
        let n = LldpNeighbors::parse(TWO, "lldp.json").unwrap();
        assert_eq!(n.leaf_by_interface["enp12s0"], "leaf-07");
        assert_eq!(
            n.leaf_by_interface["enp13s0"], "0c:42:a1:00:00:02",
            "chassis id fallback"
        );
    }

    #[test]
    fn no_neighbours_is_empty() {
        let n = LldpNeighbors::parse(r#"{"lldp":[{}]}"#, "lldp.json").unwrap();
        assert!(n.leaf_by_interface.is_empty());
    }

    #[test]
    fn malformed_json_names_the_origin() {
        let err = LldpNeighbors::parse(
            r#"{"lldp":{"interface":[]}}"#,
            "lldpcli -f json0 show neighbors",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("lldpcli -f json0 show neighbors"), "{err}");
        let err = LldpNeighbors::parse("not json", "/tmp/lldp.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("/tmp/lldp.json"), "{err}");
    }
}
