//! Fabric facts of each NIC: rail, fabric partition, leaf switch, and the
//! tenant the NIC is fenced to.
//!
//! Sources, strongest first: the fabric config file (per NIC, then per
//! node, then its `defaults`), node labels, LLDP neighbours; else rail =
//! the PF's ordinal on the node (by PCI address) and fabric = `default`.
//! When two sources disagree the stronger wins and the disagreement is
//! logged and recorded. VFs share their PF's port and take its facts.
//!
//! Node labels read (under the driver domain, e.g. `ainic.amd.com/`):
//! `fabric`, `leaf-switch`, `tenant` (every NIC), `rail.<ifname>` (one
//! NIC) and `bound-tenant.<device>` (a sticky shared PF's tenant, set by
//! the controller; the weakest tenant source).

mod file;
mod lldp;

use std::collections::BTreeMap;

use topology::{FunctionKind, Inventory, NicFunction, PciAddress};

pub use file::{FabricEntry, FabricFile, NodeEntry};
pub use lldp::LldpNeighbors;

/// Fabric of a NIC no source names.
pub const DEFAULT_FABRIC: &str = "default";

/// Why fabric input was rejected. The caller logs it and goes on without
/// that source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FabricError {
    /// Unparsable YAML/JSON, or an unknown or mistyped field (the message
    /// names it).
    #[error("invalid fabric data in {origin}: {message}")]
    Syntax {
        /// File name or command.
        origin: String,
        /// The parser's message, with the field path.
        message: String,
    },
    /// A field with a value that cannot be published.
    #[error("invalid fabric data in {origin}: field {field}: {message}")]
    Field {
        /// File name or command.
        origin: String,
        /// Field path.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// Every fabric source the node agent read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FabricSources {
    /// The parsed fabric config file, if any.
    pub file: Option<FabricFile>,
    /// This node's labels.
    pub node_labels: BTreeMap<String, String>,
    /// LLDP neighbours, if read.
    pub lldp: Option<LldpNeighbors>,
}

/// The fabric facts of one NIC function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FabricFacts {
    /// Rail number.
    pub rail: u32,
    /// Fabric partition / domain.
    pub fabric: String,
    /// Leaf switch, when a source names it.
    pub leaf_switch: Option<String>,
    /// Tenant, when a source names one.
    pub tenant: Option<String>,
    /// The tenant is a sticky binding the controller made (node label
    /// `bound-tenant.<device>`), not a configured one.
    pub tenant_bound: bool,
}

/// Facts for every NIC function, and the disagreements met.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FabricResolution {
    /// Per NIC function address.
    pub facts: BTreeMap<PciAddress, FabricFacts>,
    /// One line per disagreement between sources.
    pub conflicts: Vec<String>,
}

/// Where a sticky tenant binding comes from (weakest tenant source).
const BOUND_SOURCE: &str = "tenant binding (node label)";

/// A candidate value and where it came from.
type Candidate<T> = (&'static str, T);

/// Resolves the facts of every NIC function of `inventory` on `node`.
pub fn resolve(
    inventory: &Inventory,
    sources: &FabricSources,
    node: &str,
    driver: &str,
) -> FabricResolution {
    let mut out = FabricResolution::default();
    let pfs = inventory.nics.iter().filter(|n| n.is_pf());
    for (ordinal, pf) in pfs.enumerate() {
        let facts = resolve_pf(
            pf,
            ordinal as u32,
            sources,
            node,
            driver,
            &mut out.conflicts,
        );
        out.facts.insert(pf.address, facts);
    }
    for vf in &inventory.nics {
        if let FunctionKind::Vf { physfn, .. } = vf.kind {
            let facts = out
                .facts
                .get(&physfn)
                .cloned()
                .unwrap_or_else(|| FabricFacts {
                    rail: 0,
                    fabric: DEFAULT_FABRIC.to_string(),
                    leaf_switch: None,
                    tenant: None,
                    tenant_bound: false,
                });
            out.facts.insert(vf.address, facts);
        }
    }
    for c in &out.conflicts {
        tracing::warn!(node, conflict = %c, "fabric sources disagree");
    }
    out
}

fn resolve_pf(
    pf: &NicFunction,
    ordinal: u32,
    sources: &FabricSources,
    node: &str,
    driver: &str,
    conflicts: &mut Vec<String>,
) -> FabricFacts {
    let file = sources.file.as_ref();
    let node_entry = file.and_then(|f| f.nodes.get(node));
    let nic_entry = node_entry.and_then(|n| nic_entry(n, pf));
    let defaults = file.map(|f| &f.defaults);
    let label = |key: &str| sources.node_labels.get(&format!("{driver}/{key}")).cloned();
    let ifnames: Vec<&str> = pf.netdevs.iter().map(|n| n.name.as_str()).collect();

    let mut rail: Vec<Candidate<u32>> = Vec::new();
    rail.extend(
        nic_entry
            .and_then(|e| e.rail)
            .map(|r| ("fabric config file", r)),
    );
    for ifname in &ifnames {
        if let Some(v) = label(&format!("rail.{ifname}")) {
            match v.parse() {
                Ok(r) => rail.push(("node label", r)),
                Err(_) => conflicts.push(format!(
                    "{}: node label rail.{ifname}={v:?} is not a number, ignored",
                    pf.address
                )),
            }
        }
    }
    let from_file = |field: fn(&FabricEntry) -> Option<&String>,
                     node_field: fn(&NodeEntry) -> Option<&String>|
     -> Vec<Candidate<String>> {
        let mut out: Vec<Candidate<String>> = Vec::new();
        out.extend(
            nic_entry
                .and_then(field)
                .map(|v| ("fabric config file (nic)", v.clone())),
        );
        out.extend(
            node_entry
                .and_then(node_field)
                .map(|v| ("fabric config file (node)", v.clone())),
        );
        out.extend(
            defaults
                .and_then(node_field)
                .map(|v| ("fabric config file (defaults)", v.clone())),
        );
        out
    };
    let mut fabric = from_file(|e| e.fabric.as_ref(), |n| n.fabric.as_ref());
    fabric.extend(label("fabric").map(|v| ("node label", v)));
    let mut leaf = from_file(|e| e.leaf_switch.as_ref(), |n| n.leaf_switch.as_ref());
    leaf.extend(label("leaf-switch").map(|v| ("node label", v)));
    let mut tenant = from_file(|e| e.tenant.as_ref(), |n| n.tenant.as_ref());
    tenant.extend(label("tenant").map(|v| ("node label", v)));
    let bound_key = format!(
        "{}{}",
        crate::names::LABEL_BOUND_TENANT_PREFIX,
        crate::names::device_name(pf)
    );
    tenant.extend(label(&bound_key).map(|v| (BOUND_SOURCE, v)));
    if let Some(lldp) = &sources.lldp {
        leaf.extend(
            ifnames
                .iter()
                .filter_map(|i| lldp.leaf_by_interface.get(*i))
                .map(|v| ("lldp", v.clone())),
        );
    }
    FabricFacts {
        rail: pick(pf.address, "rail", rail, conflicts).unwrap_or(ordinal),
        fabric: pick(pf.address, "fabric", fabric, conflicts)
            .unwrap_or_else(|| DEFAULT_FABRIC.to_string()),
        leaf_switch: pick(pf.address, "leafSwitch", leaf, conflicts),
        tenant_bound: tenant
            .first()
            .is_some_and(|(source, _)| *source == BOUND_SOURCE),
        tenant: pick(pf.address, "tenant", tenant, conflicts),
    }
}

/// The file's entry for `pf`: by PCI address, else by interface name.
fn nic_entry<'a>(node: &'a NodeEntry, pf: &NicFunction) -> Option<&'a FabricEntry> {
    node.nics
        .iter()
        .find(|(k, _)| k.parse::<PciAddress>().is_ok_and(|a| a == pf.address))
        .or_else(|| {
            node.nics
                .iter()
                .find(|(k, _)| pf.netdevs.iter().any(|n| &n.name == *k))
        })
        .map(|(_, e)| e)
}

/// The strongest candidate; records every weaker one that disagrees.
fn pick<T: PartialEq + std::fmt::Debug>(
    nic: PciAddress,
    field: &str,
    candidates: Vec<Candidate<T>>,
    conflicts: &mut Vec<String>,
) -> Option<T> {
    let mut it = candidates.into_iter();
    let (winner_source, winner) = it.next()?;
    for (source, value) in it {
        if value != winner {
            conflicts.push(format!(
                "{nic}: {field} {winner:?} from {winner_source} overrides {value:?} from {source}"
            ));
        }
    }
    Some(winner)
}

#[cfg(test)]
mod tests;
