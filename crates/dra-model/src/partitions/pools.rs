//! Which of the driver's slices the controller reads as node pools, and
//! the fabric facts it takes from them.
//!
//! A node pool is trusted only in the shape a node agent may publish (the
//! chart's admission policy lets an agent write nothing else): a slice
//! with `spec.nodeName` N in pool N. A slice of another pool with a node
//! name (a forged pool, which could otherwise outbid a real node's pool
//! with a higher generation), or one offered to several nodes outside the
//! controller's own `fabric/*` pools, is [`Ignored`] and reported.
//!
//! A pool is used only when its newest generation is all there: as many
//! slices of that generation as their `resourceSliceCount` says. While an
//! agent writes a new generation slice by slice, the pool is
//! [`NodePools::incomplete`] and its node's facts are unknown.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::resource::v1::{Device, DeviceAttribute, ResourceSlice, ResourceSliceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::POOL_PREFIX;
use crate::names::{self, attr};

/// Why a slice of the driver is not read as a node's.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Ignored {
    /// `spec.nodeName` names a node, but the pool is not named after it.
    PoolNotNode {
        /// The slice.
        slice: String,
        /// Its pool.
        pool: String,
        /// Its node.
        node: String,
    },
    /// Offered to several nodes (no `spec.nodeName`) outside the
    /// controller's own pools.
    NotOneNode {
        /// The slice.
        slice: String,
        /// Its pool.
        pool: String,
    },
}

impl std::fmt::Display for Ignored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ignored::PoolNotNode { slice, pool, node } => write!(
                f,
                "slice {slice} is for node {node} but in pool {pool}: a node's pool is named after the node"
            ),
            Ignored::NotOneNode { slice, pool } => write!(
                f,
                "slice {slice} of pool {pool} has no spec.nodeName and is not in a {POOL_PREFIX}* pool of the controller"
            ),
        }
    }
}

/// The node pools of a driver among its slices.
#[derive(Debug, Default)]
pub struct NodePools<'a> {
    /// Per node, the slices of its pool's newest generation, all there.
    pub complete: BTreeMap<&'a str, Vec<&'a ResourceSlice>>,
    /// Per node whose newest generation is not all there: the slices
    /// present and the count they announce.
    pub incomplete: BTreeMap<String, (usize, i64)>,
    /// Slices not read, with why.
    pub ignored: Vec<Ignored>,
}

/// Sorts `driver`'s `slices` into complete node pools, incomplete ones
/// and ignored slices; the controller's own pools are none of them.
pub fn node_pools<'a>(slices: &'a [ResourceSlice], driver: &str) -> NodePools<'a> {
    let mut out = NodePools::default();
    let mut by_pool: BTreeMap<&'a str, Vec<&'a ResourceSlice>> = BTreeMap::new();
    for s in slices.iter().filter(|s| s.spec.driver == driver) {
        let slice = s.metadata.name.clone().unwrap_or_default();
        let pool = &s.spec.pool.name;
        match s.spec.node_name.as_deref() {
            Some(node) if node == pool => by_pool.entry(node).or_default().push(s),
            Some(node) => out.ignored.push(Ignored::PoolNotNode {
                slice,
                pool: pool.clone(),
                node: node.to_string(),
            }),
            None if pool.starts_with(POOL_PREFIX) => {}
            None => out.ignored.push(Ignored::NotOneNode {
                slice,
                pool: pool.clone(),
            }),
        }
    }
    for (node, slices) in by_pool {
        let newest = slices.iter().map(|s| s.spec.pool.generation).max();
        let newest: Vec<&ResourceSlice> = (slices.into_iter())
            .filter(|s| Some(s.spec.pool.generation) == newest)
            .collect();
        let counts: BTreeSet<i64> = newest
            .iter()
            .map(|s| s.spec.pool.resource_slice_count)
            .collect();
        match counts.iter().collect::<Vec<_>>().as_slice() {
            [count] if usize::try_from(**count) == Ok(newest.len()) => {
                out.complete.insert(node, newest);
            }
            _ => {
                let announced = counts.last().copied().unwrap_or_default();
                out.incomplete
                    .insert(node.to_string(), (newest.len(), announced));
            }
        }
    }
    out
}

/// What one node's NICs in one fabric partition say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FabricFacts {
    /// The NICs (PF PCI addresses, each once however many VFs it has).
    pub nics: BTreeSet<String>,
    /// Their rails.
    pub rails: BTreeSet<i64>,
    /// Their leaf switches, by rail (`i64::MAX` for a NIC without one).
    pub leaves: BTreeSet<(i64, String)>,
}

/// One node's fabric facts: per fabric partition its NICs name.
pub type NodeFacts = BTreeMap<String, FabricFacts>;

pub(super) fn attribute<'a>(
    device: &'a Device,
    driver: &str,
    id: &str,
) -> Option<&'a DeviceAttribute> {
    let attrs = device.attributes.as_ref()?;
    attrs
        .get(&names::qualified(driver, id))
        .or_else(|| attrs.get(id))
}

/// The attributes [`node_facts`] reads of a node's device (bare ids, also
/// read qualified by the driver), besides [`names::ATTR_PCI_BUS_ID`].
const READ: [&str; 4] = [attr::FABRIC, attr::PHYSFN, attr::RAIL, attr::LEAF_SWITCH];

/// What the controller needs of one of `driver`'s slices: a node's slice
/// cut to its name, resourceVersion, spec shape and, per device, the attributes
/// [`node_facts`] reads (no capacities, counters, taints or other
/// attributes, no managed fields). A cluster's node slices are most of
/// what the controller reads, and their fabric facts a small part of
/// each; [`node_pools`] and [`node_facts`] say the same of the cut slices
/// as of the whole ones. A slice without a node name (the controller's own,
/// compared whole before it rewrites them) is returned as it is.
pub fn fabric_view(slice: ResourceSlice, driver: &str) -> ResourceSlice {
    if slice.spec.node_name.is_none() {
        return slice;
    }
    let read = |key: &str| {
        key == names::ATTR_PCI_BUS_ID
            || READ
                .iter()
                .any(|id| key == *id || key == names::qualified(driver, id))
    };
    let devices = (slice.spec.devices.into_iter().flatten())
        .map(|device| Device {
            name: device.name,
            attributes: device
                .attributes
                .map(|attrs| attrs.into_iter().filter(|(k, _)| read(k)).collect()),
            ..Device::default()
        })
        .collect();
    ResourceSlice {
        metadata: ObjectMeta {
            name: slice.metadata.name,
            resource_version: slice.metadata.resource_version,
            ..ObjectMeta::default()
        },
        spec: ResourceSliceSpec {
            driver: slice.spec.driver,
            node_name: slice.spec.node_name,
            pool: slice.spec.pool,
            devices: Some(devices),
            ..ResourceSliceSpec::default()
        },
    }
}

/// The fabric facts of every complete pool of `pools` (a node whose
/// devices name no fabric has empty facts: known, in no partition).
pub fn node_facts(pools: &NodePools<'_>, driver: &str) -> BTreeMap<String, NodeFacts> {
    let mut out = BTreeMap::new();
    for (node, slices) in &pools.complete {
        let facts: &mut NodeFacts = out.entry(node.to_string()).or_default();
        let devices = slices.iter().flat_map(|s| s.spec.devices.iter().flatten());
        for device in devices {
            add_device(facts, device, driver);
        }
    }
    out
}

fn add_device(facts: &mut NodeFacts, device: &Device, driver: &str) {
    let fabric = attribute(device, driver, attr::FABRIC).and_then(|a| a.string.as_deref());
    let Some(fabric) = fabric.filter(|f| !f.is_empty()) else {
        return;
    };
    let entry = facts.entry(fabric.to_string()).or_default();
    let pf = attribute(device, driver, attr::PHYSFN)
        .or_else(|| device.attributes.as_ref()?.get(names::ATTR_PCI_BUS_ID))
        .and_then(|a| a.string.clone())
        .unwrap_or_else(|| device.name.clone());
    entry.nics.insert(pf);
    let rail = attribute(device, driver, attr::RAIL).and_then(|a| a.int);
    entry.rails.extend(rail);
    let leaf = attribute(device, driver, attr::LEAF_SWITCH).and_then(|a| a.string.as_ref());
    if let Some(leaf) = leaf.filter(|l| !l.is_empty()) {
        entry
            .leaves
            .insert((rail.unwrap_or(i64::MAX), leaf.clone()));
    }
}
