//! Fabric partitions across nodes, for `ainic-dra controller`: which nodes
//! have NICs in which RDMA fabric partition, read from the `fabric`
//! attribute the node agents publish (the agents stay the only source of
//! hardware facts), and the ResourceSlices that offer each partition as
//! one device.
//!
//! Only trusted, complete node pools are read ([`pools`]): a pool named
//! after the node its slices are for, of this driver, whose newest
//! generation is all there.
//!
//! Each partition is a pool of its own (`fabric/<label>`: a `/` no
//! node name has, so it never meets a node's pool) with one
//! slice whose `nodeSelector` matches the node label
//! [`LABEL_PARTITION`]`=<label>`, which the controller keeps on exactly
//! the partition's nodes (a slice selector has one term, and a field
//! selector on `metadata.name` takes one value only, so a label is the way
//! to name a set of nodes). A claim allocated the partition device carries
//! that selector, so every pod sharing the claim is scheduled into the
//! partition. With consumable capacity the device allows multiple
//! allocations and offers capacity [`CAPACITY_NODES`], the partition's
//! node count, so several jobs share a partition up to its size; without
//! it, one claim takes the whole partition.
//!
//! Beside the partition label the controller keeps a label per finer
//! fabric level, for gang schedulers that place by node labels (Kueue
//! topology-aware scheduling, KAI): [`LABEL_RAIL_GROUP`] names the set of
//! leaf switches a node's NICs reach (nodes reaching the same leaves form
//! one rail group, a scalable unit of a rail-optimized fabric) and
//! [`LABEL_LEAF`] the leaf of its lowest rail. Both come from the
//! `leafSwitch` attribute and are absent where the agents publish none.
//!
//! A node whose NICs sit in several partitions is counted in the first
//! (by name) only, since it can carry one label value. Nodes whose PFs are
//! published as their VFs count too (their VFs carry the attribute); a NIC
//! is counted once, by its PF's PCI address. Label values come from each
//! name alone (`labels`): a new partition never renames another, and
//! two names that make one value are a [`Collision`], not a rename.

mod labels;
pub mod pools;

pub use labels::{Collision, label_value};
pub use pools::{FabricFacts, Ignored, NodeFacts, NodePools, fabric_view, node_facts, node_pools};

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, Device, DeviceAttribute, DeviceCapacity,
    ResourceClaim, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::names::{self, attr};

/// The node label naming a node's fabric partition, kept by the controller.
pub const LABEL_PARTITION: &str = "ainic.amd.com/fabric-partition";
/// The node label naming the set of leaf switches a node's NICs (in its
/// partition) reach: the [`label_value`] of the leaf's name when there is
/// one, else of the sorted names joined by `,`.
pub const LABEL_RAIL_GROUP: &str = "ainic.amd.com/fabric-rail-group";
/// The node label naming the leaf switch of the node's lowest rail.
pub const LABEL_LEAF: &str = "ainic.amd.com/fabric-leaf";
/// Every node label the controller keeps, coarsest level first.
pub const NODE_LABELS: [&str; 3] = [LABEL_PARTITION, LABEL_RAIL_GROUP, LABEL_LEAF];
/// Prefix of the controller's pool names.
pub const POOL_PREFIX: &str = "fabric/";
/// The `type` attribute of a partition device.
pub const TYPE_PARTITION: &str = "fabric-partition";
/// Capacity of a partition device: its nodes.
pub const CAPACITY_NODES: &str = "nodes";
/// Attribute: nodes in the partition.
pub const ATTR_NODE_COUNT: &str = "nodeCount";
/// Attribute: NICs (PFs) in the partition.
pub const ATTR_NIC_COUNT: &str = "nicCount";
/// Attribute: distinct rails in the partition.
pub const ATTR_RAIL_COUNT: &str = "railCount";
/// Attribute: nodes of the partition's capacity that allocated claims
/// hold (the whole partition for a claim without consumed capacity).
pub const ATTR_NODES_ALLOCATED: &str = "nodesAllocated";

/// One fabric partition as the node agents' slices describe it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Partition {
    /// Its name, as the `fabric` attribute gives it.
    pub name: String,
    /// Nodes with a NIC in it.
    pub nodes: BTreeSet<String>,
    /// PFs in it, over all its nodes.
    pub nics: u64,
    /// Rails of its NICs.
    pub rails: BTreeSet<i64>,
    /// Per node, the leaf switch of each of its NICs in the partition, by
    /// rail (`i64::MAX` for a NIC without one).
    pub leaves: BTreeMap<String, BTreeSet<(i64, String)>>,
    /// Nodes of its capacity allocated claims hold ([`count_allocated`]).
    pub nodes_allocated: u64,
    /// Its label value ([`label_value`]), pool `fabric/<label>` and device
    /// name; `None` when another partition holds that value (a
    /// [`Collision`]): no label, pool or device then.
    pub label: Option<String>,
}

/// The partitions `driver`'s trusted, complete node pools among `slices`
/// name, by name, each with its label value (collisions: none held, the
/// first by name keeps the value).
pub fn partitions(slices: &[ResourceSlice], driver: &str) -> BTreeMap<String, Partition> {
    let facts = node_facts(&node_pools(slices, driver), driver);
    from_facts(&facts, &BTreeMap::new()).0
}

/// The partitions of `facts` (node → its facts), each with its label
/// value, and the collisions; `held` (label value → partition name) says
/// which partition holds a value now ([`held_labels`]).
pub fn from_facts(
    facts: &BTreeMap<String, NodeFacts>,
    held: &BTreeMap<String, String>,
) -> (BTreeMap<String, Partition>, Vec<Collision>) {
    let mut out: BTreeMap<String, Partition> = BTreeMap::new();
    for (node, fabrics) in facts {
        // One label per node: it belongs to its first partition only.
        let Some((fabric, f)) = fabrics.first_key_value() else {
            continue;
        };
        let p = out.entry(fabric.clone()).or_insert_with(|| Partition {
            name: fabric.clone(),
            ..Partition::default()
        });
        p.nodes.insert(node.clone());
        p.nics += f.nics.len() as u64;
        p.rails.extend(f.rails.iter().copied());
        if !f.leaves.is_empty() {
            p.leaves.insert(node.clone(), f.leaves.clone());
        }
    }
    let names = (out.iter())
        .map(|(name, p)| (name.clone(), p.nodes.clone()))
        .collect();
    let (values, collisions) = labels::assign(LABEL_PARTITION, &names, held);
    for (name, p) in &mut out {
        p.label = values.get(name).cloned();
    }
    (out, collisions)
}

/// Which partition holds each label value now: the `fabric` attribute of
/// the device in each of the controller's `fabric/<value>` slices.
pub fn held_labels(slices: &[ResourceSlice], driver: &str) -> BTreeMap<String, String> {
    (slices.iter())
        .filter(|s| s.spec.driver == driver && s.spec.node_name.is_none())
        .filter_map(|s| {
            let value = s.spec.pool.name.strip_prefix(POOL_PREFIX)?;
            let device = s.spec.devices.as_ref()?.first()?;
            let name = pools::attribute(device, driver, attr::FABRIC)?
                .string
                .clone()?;
            Some((value.to_string(), name))
        })
        .collect()
}

fn string(value: &str) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(value.to_string()),
        ..DeviceAttribute::default()
    }
}

fn int(value: i64) -> DeviceAttribute {
    DeviceAttribute {
        int: Some(value),
        ..DeviceAttribute::default()
    }
}

fn device(p: &Partition, driver: &str, label: &str, shared: bool) -> Device {
    let q = |n: &str| names::qualified(driver, n);
    let attributes = BTreeMap::from([
        (q(attr::TYPE), string(TYPE_PARTITION)),
        (q(attr::FABRIC), string(&p.name)),
        (q(ATTR_NODE_COUNT), int(p.nodes.len() as i64)),
        (q(ATTR_NIC_COUNT), int(p.nics as i64)),
        (q(ATTR_RAIL_COUNT), int(p.rails.len() as i64)),
        (q(ATTR_NODES_ALLOCATED), int(p.nodes_allocated as i64)),
    ]);
    let one = || Quantity("1".to_string());
    // Whole nodes: steps of one, where there is room for a step.
    let step = (p.nodes.len() > 1).then(one);
    let policy = shared.then(|| CapacityRequestPolicy {
        default: Some(one()),
        valid_range: Some(CapacityRequestPolicyRange {
            min: one(),
            step,
            max: None,
        }),
        valid_values: None,
    });
    let capacity = BTreeMap::from([(
        CAPACITY_NODES.to_string(),
        DeviceCapacity {
            value: Quantity(p.nodes.len().to_string()),
            request_policy: policy,
        },
    )]);
    Device {
        name: label.to_string(),
        attributes: Some(attributes),
        capacity: Some(capacity),
        allow_multiple_allocations: shared.then_some(true),
        ..Device::default()
    }
}

/// One slice per partition that has a label value (see
/// [`Partition::label`]), each in pool `fabric/<label>` at `generation` 0
/// (the controller sets it), selecting the nodes labelled
/// [`LABEL_PARTITION`]`=<label>`. `shared`: the device allows multiple
/// allocations (`DRAConsumableCapacity`).
pub fn partition_slices(
    partitions: &BTreeMap<String, Partition>,
    driver: &str,
    shared: bool,
) -> Vec<ResourceSlice> {
    partitions
        .values()
        .filter_map(|p| {
            let label = p.label.clone()?;
            let pool = format!("{POOL_PREFIX}{label}");
            let selector = NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: LABEL_PARTITION.to_string(),
                        operator: "In".to_string(),
                        values: Some(vec![label.clone()]),
                    }]),
                    match_fields: None,
                }],
            };
            Some(ResourceSlice {
                metadata: ObjectMeta {
                    name: Some(format!("{driver}-fabric-{label}")),
                    ..ObjectMeta::default()
                },
                spec: ResourceSliceSpec {
                    driver: driver.to_string(),
                    pool: ResourcePool {
                        name: pool,
                        generation: 0,
                        resource_slice_count: 1,
                    },
                    node_selector: Some(selector),
                    devices: Some(vec![device(p, driver, &label, shared)]),
                    ..ResourceSliceSpec::default()
                },
            })
        })
        .collect()
}

/// The [`LABEL_PARTITION`] value each node should carry.
pub fn node_labels(partitions: &BTreeMap<String, Partition>) -> BTreeMap<String, String> {
    partitions
        .values()
        .filter_map(|p| Some((p.label.clone()?, p)))
        .flat_map(|(label, p)| p.nodes.iter().map(move |n| (n.clone(), label.clone())))
        .collect()
}

/// Sets each partition's [`Partition::nodes_allocated`] from the
/// allocations of `claims`: the `nodes` a result consumed from the
/// partition's device, or the whole partition for a result without
/// consumed capacity (an exclusive allocation), at most the partition.
pub fn count_allocated(
    partitions: &mut BTreeMap<String, Partition>,
    claims: &[ResourceClaim],
    driver: &str,
) {
    let by_pool: BTreeMap<String, String> = (partitions.values())
        .filter_map(|p| {
            Some((
                format!("{POOL_PREFIX}{}", p.label.as_ref()?),
                p.name.clone(),
            ))
        })
        .collect();
    for p in partitions.values_mut() {
        p.nodes_allocated = 0;
    }
    let results = (claims.iter())
        .flat_map(crate::claim::allocation_results)
        .filter(|r| r.driver == driver);
    for result in results {
        let Some(p) = by_pool
            .get(&result.pool)
            .and_then(|name| partitions.get_mut(name))
        else {
            continue;
        };
        let size = p.nodes.len() as u64;
        let consumed = (result.consumed_capacity.as_ref())
            .and_then(|c| c.get(CAPACITY_NODES))
            .map(|q| whole_nodes(q).unwrap_or(size));
        p.nodes_allocated = (p.nodes_allocated + consumed.unwrap_or(size)).min(size);
    }
}

/// A `nodes` quantity as whole nodes, rounded up (`1Ki` as the scheduler
/// before 1.37 writes 1024, `1.5` as 2).
fn whole_nodes(q: &Quantity) -> Option<u64> {
    let parsed = k8s_quantity::Quantity::parse(&q.0).ok()?;
    u64::try_from(parsed.ceil_i128()?).ok()
}

/// Why an unallocated claim asking `class` for a partition fits none, in
/// words, when it fits none: the nodes it asks for (its `nodes` capacity
/// request, else one) against each partition's free nodes, those with the
/// most room first, cut to fit an Event's note ([`NOTE_LIMIT`]).
pub fn why_no_partition_fits(
    partitions: &BTreeMap<String, Partition>,
    claim: &ResourceClaim,
    class: &str,
) -> Option<String> {
    if claim
        .status
        .as_ref()
        .is_some_and(|s| s.allocation.is_some())
    {
        return None;
    }
    let wanted = claim
        .spec
        .as_ref()?
        .devices
        .as_ref()?
        .requests
        .as_ref()?
        .iter()
        .filter_map(|r| r.exactly.as_ref())
        .filter(|e| e.device_class_name == class)
        .map(|e| {
            let nodes = (e.capacity.as_ref())
                .and_then(|c| c.requests.as_ref()?.get(CAPACITY_NODES).cloned());
            nodes.and_then(|q| whole_nodes(&q)).unwrap_or(1)
        })
        .max()?;
    let free = |p: &Partition| (p.nodes.len() as u64).saturating_sub(p.nodes_allocated);
    if partitions.values().any(|p| free(p) >= wanted) {
        return None;
    }
    let mut by_room: Vec<&Partition> = partitions.values().collect();
    by_room.sort_by_key(|p| std::cmp::Reverse(free(p)));
    let head = format!("no fabric partition has room for {wanted} nodes: ");
    if by_room.is_empty() {
        return Some(head + "none published");
    }
    let each: Vec<String> = (by_room.iter())
        .map(|p| format!("{} {} of {} free", p.name, free(p), p.nodes.len()))
        .collect();
    Some(head.clone() + &within_note(&each, NOTE_LIMIT - head.len()))
}

/// The longest an Event's note may be (the API server refuses longer).
pub const NOTE_LIMIT: usize = 1024;

/// `items` joined by `, `, as many as fit in `limit` bytes with the count of
/// those left out (`…, and 12 more`).
fn within_note(items: &[String], limit: usize) -> String {
    let mut out = String::new();
    for (i, item) in items.iter().enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        let left = items.len() - i - 1;
        // Room for this item and, if others follow, the longest tail.
        let tail = if left > 0 {
            format!(", and {} more", items.len()).len()
        } else {
            0
        };
        if out.len() + sep.len() + item.len() + tail > limit {
            if i == 0 {
                return format!("{} partitions", items.len());
            }
            return format!("{out}, and {} more", items.len() - i);
        }
        out.push_str(sep);
        out.push_str(item);
    }
    out
}

/// The labels of [`NODE_LABELS`] each node should carry, and the
/// collisions of rail-group and leaf values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FabricLabels {
    /// Per node, its labels; a node missing here carries none of them.
    pub nodes: BTreeMap<String, BTreeMap<&'static str, String>>,
    /// Rail-group and leaf names whose value another name holds.
    pub collisions: Vec<Collision>,
}

/// Every label of [`NODE_LABELS`] each node should carry: its partition's
/// label and, where its NICs publish leaf switches, its rail group (the
/// sorted set of its leaves, joined by `,`) and the leaf of its lowest
/// rail, each as its [`label_value`].
pub fn node_fabric_labels(partitions: &BTreeMap<String, Partition>) -> FabricLabels {
    let mut nodes: BTreeMap<String, BTreeMap<&'static str, String>> = BTreeMap::new();
    for (node, label) in node_labels(partitions) {
        nodes
            .entry(node)
            .or_default()
            .insert(LABEL_PARTITION, label);
    }
    let mut groups: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut leaves: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let labelled = partitions.values().filter(|p| p.label.is_some());
    for (node, found) in labelled.flat_map(|p| &p.leaves) {
        let distinct: BTreeSet<&str> = found.iter().map(|(_, l)| l.as_str()).collect();
        let group = distinct.into_iter().collect::<Vec<_>>().join(",");
        groups.entry(group).or_default().insert(node.clone());
        if let Some((_, lowest)) = found.first() {
            leaves
                .entry(lowest.clone())
                .or_default()
                .insert(node.clone());
        }
    }
    let mut collisions = Vec::new();
    for (key, names) in [(LABEL_RAIL_GROUP, groups), (LABEL_LEAF, leaves)] {
        let (values, lost) = labels::assign(key, &names, &BTreeMap::new());
        collisions.extend(lost);
        for (name, value) in values {
            for node in &names[&name] {
                (nodes.entry(node.clone()).or_default()).insert(key, value.clone());
            }
        }
    }
    FabricLabels { nodes, collisions }
}

#[cfg(test)]
mod tests;
