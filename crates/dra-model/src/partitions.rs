//! Fabric partitions across nodes, for `ainic-dra controller`: which nodes
//! have NICs in which RDMA fabric partition, read from the `fabric`
//! attribute the node agents publish (the agents stay the only source of
//! hardware facts), and the ResourceSlices that offer each partition as
//! one device.
//!
//! Each partition is a pool of its own (`fabric/<partition>`: a `/` no
//! node name has, so it never meets a node's pool) with one
//! slice whose `nodeSelector` matches the node label
//! [`LABEL_PARTITION`]`=<partition>`, which the controller keeps on exactly
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
//! is counted once, by its PF's PCI address. Two partition names that make
//! the same DNS label get a hash of the name appended, so each keeps a
//! label, pool and slice of its own.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, Device, DeviceAttribute, DeviceCapacity,
    ResourceClaim, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::names::{self, attr};
use crate::validate::format;

/// The node label naming a node's fabric partition, kept by the controller.
pub const LABEL_PARTITION: &str = "ainic.amd.com/fabric-partition";
/// The node label naming the set of leaf switches a node's NICs (in its
/// partition) reach: the leaf's own name when there is one, else
/// `leaves-<hash of the sorted set>`.
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
    /// Nodes of its capacity allocated claims hold ([`allocated_nodes`]).
    pub nodes_allocated: u64,
}

fn attribute<'a>(device: &'a Device, driver: &str, id: &str) -> Option<&'a DeviceAttribute> {
    let attrs = device.attributes.as_ref()?;
    attrs
        .get(&names::qualified(driver, id))
        .or_else(|| attrs.get(id))
}

/// The newest generation of each node pool of `driver` among `slices`:
/// (node, its devices). The controller's own pools are not node pools.
fn node_devices<'a>(slices: &'a [ResourceSlice], driver: &str) -> Vec<(&'a str, &'a Device)> {
    let ours = |s: &&ResourceSlice| s.spec.driver == driver && s.spec.node_name.is_some();
    let mut newest: BTreeMap<&str, i64> = BTreeMap::new();
    for s in slices.iter().filter(ours) {
        let g = newest.entry(s.spec.pool.name.as_str()).or_insert(i64::MIN);
        *g = (*g).max(s.spec.pool.generation);
    }
    slices
        .iter()
        .filter(ours)
        .filter(|s| newest[s.spec.pool.name.as_str()] == s.spec.pool.generation)
        .flat_map(|s| {
            let node = s.spec.node_name.as_deref().unwrap_or_default();
            s.spec.devices.iter().flatten().map(move |d| (node, d))
        })
        .collect()
}

/// The partitions the devices of `driver`'s node slices name, by name.
pub fn partitions(slices: &[ResourceSlice], driver: &str) -> BTreeMap<String, Partition> {
    let mut by_node: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    // (node, fabric) -> the PCI addresses of the NICs (PFs) seen in it, and rails.
    let mut nics: BTreeMap<(&str, &str), BTreeSet<String>> = BTreeMap::new();
    let mut rails: BTreeMap<(&str, &str), BTreeSet<i64>> = BTreeMap::new();
    let mut leaves: BTreeMap<(&str, &str), BTreeSet<(i64, String)>> = BTreeMap::new();
    for (node, device) in node_devices(slices, driver) {
        let fabric = attribute(device, driver, attr::FABRIC).and_then(|a| a.string.as_deref());
        let Some(fabric) = fabric.filter(|f| !f.is_empty()) else {
            continue;
        };
        by_node.entry(node).or_default().insert(fabric);
        let pf = attribute(device, driver, attr::PHYSFN)
            .or_else(|| device.attributes.as_ref()?.get(names::ATTR_PCI_BUS_ID))
            .and_then(|a| a.string.clone())
            .unwrap_or_else(|| device.name.clone());
        nics.entry((node, fabric)).or_default().insert(pf);
        let rail = attribute(device, driver, attr::RAIL).and_then(|a| a.int);
        rails.entry((node, fabric)).or_default().extend(rail);
        let leaf = attribute(device, driver, attr::LEAF_SWITCH).and_then(|a| a.string.as_ref());
        if let Some(leaf) = leaf.filter(|l| !l.is_empty()) {
            let by_rail = (rail.unwrap_or(i64::MAX), leaf.clone());
            leaves.entry((node, fabric)).or_default().insert(by_rail);
        }
    }
    let mut out: BTreeMap<String, Partition> = BTreeMap::new();
    for (node, fabrics) in by_node {
        // One label per node: it belongs to its first partition only.
        let Some(fabric) = fabrics.first() else {
            continue;
        };
        let p = out.entry(fabric.to_string()).or_insert_with(|| Partition {
            name: fabric.to_string(),
            ..Partition::default()
        });
        p.nodes.insert(node.to_string());
        p.nics += nics.get(&(node, *fabric)).map_or(0, |s| s.len() as u64);
        p.rails
            .extend(rails.get(&(node, *fabric)).into_iter().flatten());
        if let Some(found) = leaves.remove(&(node, *fabric)) {
            p.leaves.insert(node.to_string(), found);
        }
    }
    out
}

/// The DNS label of each partition: [`label_of`] its name, with a hash of
/// the name appended where two names give the same label.
pub fn labels(partitions: &BTreeMap<String, Partition>) -> BTreeMap<String, String> {
    let mut plain: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for name in partitions.keys() {
        if let Some(label) = label_of(name) {
            plain.entry(label).or_default().push(name);
        }
    }
    let mut out = BTreeMap::new();
    for (label, names) in plain {
        for name in &names {
            let unique = if names.len() == 1 {
                label.clone()
            } else {
                let mut base = label.clone();
                base.truncate(63 - 9);
                format!("{}-{:08x}", base.trim_end_matches('-'), fnv(name))
            };
            out.insert(name.to_string(), unique);
        }
    }
    out
}

/// FNV-1a, 32 bits: a short stable suffix.
fn fnv(s: &str) -> u32 {
    s.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// `name` as a DNS label (lower case, `[a-z0-9-]`, at most 63), or `None`
/// when nothing usable is left.
pub fn label_of(name: &str) -> Option<String> {
    let mut s: String = name
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    s.truncate(63);
    let s = s.trim_matches('-').to_string();
    format::is_dns_label(&s).then_some(s)
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

/// One slice per partition whose name makes a DNS label, each in pool
/// `fabric/<label>` at `generation` 0 (the controller sets it), selecting
/// the nodes labelled [`LABEL_PARTITION`]`=<label>`. `shared`: the device
/// allows multiple allocations (`DRAConsumableCapacity`).
pub fn partition_slices(
    partitions: &BTreeMap<String, Partition>,
    driver: &str,
    shared: bool,
) -> Vec<ResourceSlice> {
    let labels = labels(partitions);
    partitions
        .values()
        .filter_map(|p| {
            let label = labels.get(&p.name)?.clone();
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
    let labels = labels(partitions);
    partitions
        .values()
        .filter_map(|p| Some((labels.get(&p.name)?.clone(), p)))
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
    let labels = labels(partitions);
    let by_pool: BTreeMap<String, String> = (labels.iter())
        .map(|(name, label)| (format!("{POOL_PREFIX}{label}"), name.clone()))
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
/// request, else one) against each partition's free nodes.
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
    let each: Vec<String> = (partitions.values())
        .map(|p| format!("{} {} of {} free", p.name, free(p), p.nodes.len()))
        .collect();
    let each = if each.is_empty() {
        "none published".to_string()
    } else {
        each.join(", ")
    };
    Some(format!(
        "no fabric partition has room for {wanted} nodes: {each}"
    ))
}

/// Every label of [`NODE_LABELS`] each node should carry: its partition's
/// label and, where its NICs publish leaf switches, its rail group and
/// leaf. A node missing here should carry none of them.
pub fn node_fabric_labels(
    partitions: &BTreeMap<String, Partition>,
) -> BTreeMap<String, BTreeMap<&'static str, String>> {
    let mut out: BTreeMap<String, BTreeMap<&'static str, String>> = BTreeMap::new();
    for (node, label) in node_labels(partitions) {
        out.entry(node).or_default().insert(LABEL_PARTITION, label);
    }
    for p in partitions.values() {
        for (node, leaves) in &p.leaves {
            let Some(labels) = out.get_mut(node) else {
                continue;
            };
            let distinct: BTreeSet<&str> = leaves.iter().map(|(_, l)| l.as_str()).collect();
            let group = match distinct.iter().collect::<Vec<_>>().as_slice() {
                [one] => label_of(one),
                many => {
                    let joined = many.iter().map(|l| **l).collect::<Vec<_>>().join(",");
                    Some(format!("leaves-{:08x}", fnv(&joined)))
                }
            };
            labels.extend(group.map(|g| (LABEL_RAIL_GROUP, g)));
            let lowest = leaves.first().and_then(|(_, leaf)| label_of(leaf));
            labels.extend(lowest.map(|l| (LABEL_LEAF, l)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FeatureGates, ModelConfig, ModelOptions, Release, build_slices, sample};

    fn node_pool(node: &str, fabric: &str) -> Vec<ResourceSlice> {
        let mut o = ModelOptions::new(node);
        o.gates = FeatureGates::for_release(Release::NEWEST);
        o.fabric.node_labels = BTreeMap::from([("ainic.amd.com/fabric".into(), fabric.into())]);
        build_slices(&sample::inventory(2, 2), &ModelConfig::new(o).unwrap()).slices
    }

    #[test]
    fn nodes_group_by_the_fabric_of_their_pfs() {
        let mut slices = node_pool("n1", "pod-a");
        slices.extend(node_pool("n2", "pod-a"));
        slices.extend(node_pool("n3", "Pod_B"));
        let parts = partitions(&slices, "ainic.amd.com");
        assert_eq!(parts.len(), 2, "{parts:?}");
        let a = &parts["pod-a"];
        assert_eq!(a.nodes, BTreeSet::from(["n1".into(), "n2".into()]));
        assert_eq!(a.nics, 4, "two NICs per node, each once with its VFs");
        let labels = node_labels(&parts);
        assert_eq!(labels["n3"], "pod-b");
        let out = partition_slices(&parts, "ainic.amd.com", true);
        assert_eq!(out.len(), 2);
        for pool in &out {
            let violations = crate::validate::check_pool(std::slice::from_ref(pool));
            assert!(violations.is_empty(), "{violations:#?}");
        }
        let a = out
            .iter()
            .find(|s| s.spec.pool.name == "fabric/pod-a")
            .unwrap();
        let d = &a.spec.devices.as_ref().unwrap()[0];
        assert_eq!(d.name, "pod-a");
        assert_eq!(d.allow_multiple_allocations, Some(true));
        assert_eq!(d.capacity.as_ref().unwrap()[CAPACITY_NODES].value.0, "2");
        let term = &a.spec.node_selector.as_ref().unwrap().node_selector_terms[0];
        let req = &term.match_expressions.as_ref().unwrap()[0];
        assert_eq!(
            (req.key.as_str(), req.values.as_deref()),
            (LABEL_PARTITION, Some(&["pod-a".to_string()][..]))
        );
        assert!(
            partition_slices(&parts, "ainic.amd.com", false)[0]
                .spec
                .devices
                .as_ref()
                .unwrap()[0]
                .allow_multiple_allocations
                .is_none()
        );
    }

    /// Gives every device of `slices` the leaf switch `leaf(rail)`.
    fn with_leaves(
        mut slices: Vec<ResourceSlice>,
        leaf: impl Fn(i64) -> &'static str,
    ) -> Vec<ResourceSlice> {
        for d in slices
            .iter_mut()
            .flat_map(|s| s.spec.devices.iter_mut().flatten())
        {
            let rail = attribute(d, "ainic.amd.com", attr::RAIL)
                .and_then(|a| a.int)
                .unwrap();
            let value = DeviceAttribute {
                string: Some(leaf(rail).to_string()),
                ..DeviceAttribute::default()
            };
            (d.attributes.get_or_insert_with(BTreeMap::new))
                .insert(names::qualified("ainic.amd.com", attr::LEAF_SWITCH), value);
        }
        slices
    }

    #[test]
    fn rail_group_and_leaf_labels_follow_the_leaf_switches() {
        let mut slices = with_leaves(node_pool("n1", "pod-a"), |rail| {
            if rail == 0 { "Leaf-11" } else { "leaf-12" }
        });
        slices.extend(with_leaves(node_pool("n2", "pod-a"), |_| "leaf-11"));
        slices.extend(with_leaves(node_pool("n4", "pod-a"), |rail| {
            if rail == 0 { "leaf-11" } else { "leaf-12" }
        }));
        slices.extend(node_pool("n3", "pod-b"));
        let labels = node_fabric_labels(&partitions(&slices, "ainic.amd.com"));
        let n1 = &labels["n1"];
        assert_eq!(n1[LABEL_PARTITION], "pod-a");
        assert!(n1[LABEL_RAIL_GROUP].starts_with("leaves-"), "{n1:?}");
        assert_eq!(n1[LABEL_LEAF], "leaf-11", "the lowest rail's, as a label");
        assert_eq!(
            labels["n2"][LABEL_RAIL_GROUP], "leaf-11",
            "one leaf: its name"
        );
        assert_ne!(
            labels["n4"][LABEL_RAIL_GROUP], n1[LABEL_RAIL_GROUP],
            "Leaf-11 is not leaf-11"
        );
        assert_eq!(
            labels["n3"].keys().copied().collect::<Vec<_>>(),
            [LABEL_PARTITION],
            "no leaves published: the partition only"
        );
    }

    fn claim(json: serde_json::Value) -> ResourceClaim {
        serde_json::from_value(json).unwrap()
    }

    /// A claim for `nodes` of a partition, allocated from `pool` when given.
    fn job(nodes: &str, pool: Option<&str>) -> ResourceClaim {
        let mut c = serde_json::json!({"metadata": {"name": "j"}, "spec": {"devices": {"requests": [
            {"name": "p", "exactly": {"deviceClassName": "ainic-fabric",
                "capacity": {"requests": {"nodes": nodes}}}}]}}});
        if let Some(pool) = pool {
            c["status"] = serde_json::json!({"allocation": {"devices": {"results": [
                {"request": "p", "driver": "ainic.amd.com", "pool": pool, "device": "d",
                 "consumedCapacity": {"nodes": nodes}}]}}});
        }
        claim(c)
    }

    #[test]
    fn allocated_nodes_are_counted_and_a_claim_that_fits_nowhere_says_why() {
        let mut slices = node_pool("n1", "pod-a");
        slices.extend(node_pool("n2", "pod-a"));
        slices.extend(node_pool("n3", "pod-b"));
        let mut parts = partitions(&slices, "ainic.amd.com");
        let held = [
            job("1", Some("fabric/pod-a")),
            job("1", Some("fabric/pod-b")),
        ];
        count_allocated(&mut parts, &held, "ainic.amd.com");
        assert_eq!(
            (
                parts["pod-a"].nodes_allocated,
                parts["pod-b"].nodes_allocated
            ),
            (1, 1)
        );
        assert_eq!(
            why_no_partition_fits(&parts, &job("1", None), "ainic-fabric"),
            None
        );
        assert_eq!(
            why_no_partition_fits(&parts, &job("2", None), "ainic-fabric").as_deref(),
            Some("no fabric partition has room for 2 nodes: pod-a 1 of 2 free, pod-b 0 of 1 free")
        );
        assert_eq!(
            why_no_partition_fits(&parts, &job("2", None), "other"),
            None
        );
        // Quantities, not digits (found by review): 1.5 nodes is 2.
        assert!(why_no_partition_fits(&parts, &job("1.5", None), "ainic-fabric").is_some());
        assert_eq!(whole_nodes(&Quantity("1Ki".into())), Some(1024));
        assert_eq!(
            why_no_partition_fits(&parts, &held[0], "ainic-fabric"),
            None,
            "allocated"
        );
        // The count is published on the partition device.
        let out = partition_slices(&parts, "ainic.amd.com", true);
        let attrs = out[0].spec.devices.as_ref().unwrap()[0]
            .attributes
            .clone()
            .unwrap();
        assert_eq!(attrs["ainic.amd.com/nodesAllocated"].int, Some(1));
    }

    #[test]
    fn only_the_newest_generation_of_a_pool_counts_and_odd_names_are_cleaned() {
        let old = node_pool("n1", "pod-a");
        let mut new = node_pool("n1", "pod-b");
        for s in &mut new {
            s.spec.pool.generation = 2;
        }
        let parts = partitions(&[old, new].concat(), "ainic.amd.com");
        assert_eq!(parts.keys().collect::<Vec<_>>(), ["pod-b"]);
        assert_eq!(label_of("Rack 7 / East").as_deref(), Some("rack-7---east"));
        assert_eq!(label_of("__"), None);
    }

    #[test]
    fn names_that_make_one_label_get_labels_of_their_own_and_vf_only_nodes_count() {
        let mut slices = node_pool("n1", "pod_b");
        slices.extend(node_pool("n2", "Pod-B"));
        let mut o = ModelOptions::new("n3");
        o.pf_with_vfs = crate::PfWithVfs::VfsOnly;
        o.fabric.node_labels = BTreeMap::from([("ainic.amd.com/fabric".into(), "pod_b".into())]);
        slices.extend(build_slices(&sample::inventory(2, 2), &ModelConfig::new(o).unwrap()).slices);
        let parts = partitions(&slices, "ainic.amd.com");
        assert_eq!(parts["pod_b"].nodes.len(), 2, "n3 publishes only VFs");
        assert_eq!(parts["pod_b"].nics, 4);
        let labels = labels(&parts);
        assert_ne!(labels["pod_b"], labels["Pod-B"]);
        assert!(
            labels
                .values()
                .all(|l| l.starts_with("pod-b-") && l.len() == 14),
            "{labels:?}"
        );
        let out = partition_slices(&parts, "ainic.amd.com", true);
        let names: BTreeSet<_> = out.iter().map(|s| s.metadata.name.clone()).collect();
        assert_eq!(names.len(), 2);
    }
}
