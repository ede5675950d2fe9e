//! Resource pools: slices indexed by pool and node, and the pools one node
//! can use, gathered as upstream's `GatherPools` does (newest generation
//! only, incomplete and invalid pools flagged).
//!
//! Order: Kubernetes 1.34 walks pools in Go map order (random) and slices
//! in informer order; later releases sort pools by driver then pool name
//! and slices by name so that first-fit is deterministic. That sorted
//! order is the one used here.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::error::InputError;
use crate::features::Features;
use crate::model::{NodeSelection, SliceInfo};
use crate::node::{NodeFacts, selection_matches};
use crate::quantity::Quantity;

/// (driver, pool name).
pub(crate) type PoolKey = (String, String);

/// Counter sets by name, then counter name.
pub(crate) type CounterSets = BTreeMap<String, BTreeMap<String, Quantity>>;

/// All slices, indexed so that one node's pools are found without scanning
/// the slices of other nodes.
#[derive(Debug, Default)]
pub(crate) struct PoolIndex {
    slices: Vec<SliceInfo>,
    by_pool: BTreeMap<PoolKey, Vec<usize>>,
    by_node: HashMap<String, BTreeSet<PoolKey>>,
    any_node: BTreeSet<PoolKey>,
}

/// A pool as seen from one node.
#[derive(Debug)]
pub(crate) struct NodePool<'a> {
    pub key: &'a PoolKey,
    /// Slices with devices for the node, sorted by name.
    pub slices: Vec<&'a SliceInfo>,
    pub incomplete: bool,
    pub invalid: Option<String>,
    /// Counters still available (partitionable devices only).
    pub counters: CounterSets,
    /// Counter sets belong to their slice, not the pool (1.34).
    pub counters_per_slice: bool,
}

impl NodePool<'_> {
    /// The key of counter set `set` as a device of `slice` draws on it.
    pub(crate) fn counter_key(&self, slice: &SliceInfo, set: &str) -> String {
        counter_key(self.counters_per_slice, slice, set)
    }
}

fn counter_key(per_slice: bool, slice: &SliceInfo, set: &str) -> String {
    if per_slice {
        format!("{}\u{0}{set}", slice.name)
    } else {
        set.to_owned()
    }
}

impl PoolIndex {
    pub(crate) fn new(slices: Vec<SliceInfo>) -> PoolIndex {
        let mut index = PoolIndex::default();
        for (i, slice) in slices.iter().enumerate() {
            let key = (slice.driver.clone(), slice.pool.clone());
            index.by_pool.entry(key.clone()).or_default().push(i);
            match &slice.node {
                NodeSelection::NodeName(node) => {
                    index.by_node.entry(node.clone()).or_default().insert(key);
                }
                _ => {
                    index.any_node.insert(key);
                }
            }
        }
        index.slices = slices;
        index
    }

    /// Every device in every slice, for looking up allocated devices.
    pub(crate) fn all_slices(&self) -> &[SliceInfo] {
        &self.slices
    }

    /// The pools usable from `node`, in allocation order.
    pub(crate) fn gather<'a>(
        &'a self,
        node: &NodeFacts,
        features: &Features,
        in_use: &HashSet<(String, String, String)>,
    ) -> Result<Vec<NodePool<'a>>, InputError> {
        let keys: BTreeSet<&PoolKey> = self
            .by_node
            .get(&node.name)
            .into_iter()
            .flatten()
            .chain(self.any_node.iter())
            .collect();
        let mut pools = Vec::new();
        for key in keys {
            if let Some(pool) = self.gather_pool(key, node, features, in_use)? {
                pools.push(pool);
            }
        }
        // Pools with devices that wait for binding conditions come last.
        pools.sort_by_key(|p| {
            p.slices
                .iter()
                .flat_map(|s| &s.devices)
                .any(|d| d.has_binding_conditions)
        });
        Ok(pools)
    }

    fn relevant(
        &self,
        slice: &SliceInfo,
        node: &NodeFacts,
        features: &Features,
    ) -> Result<bool, InputError> {
        // Without partitionable devices a slice with per-device node
        // selection is passed over, and so (except where the rules keep it,
        // refusing only the devices that draw counters) is one with
        // counter sets.
        if !features.partitionable_devices
            && (slice.per_device
                || (!slice.shared_counters.is_empty()
                    && !features.rules().counter_slices_kept_without_gate))
        {
            return Ok(false);
        }
        if !slice.shared_counters.is_empty() && features.rules().counter_slices_everywhere {
            return Ok(true);
        }
        match &slice.node {
            NodeSelection::PerDevice => {
                for device in &slice.devices {
                    if selection_matches(&device.node, node)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            other => selection_matches(other, node),
        }
    }

    fn gather_pool<'a>(
        &'a self,
        key: &'a PoolKey,
        node: &NodeFacts,
        features: &Features,
        in_use: &HashSet<(String, String, String)>,
    ) -> Result<Option<NodePool<'a>>, InputError> {
        let all: Vec<&SliceInfo> = self.by_pool[key].iter().map(|&i| &self.slices[i]).collect();
        let mut relevant: Vec<&SliceInfo> = Vec::new();
        for slice in &all {
            if !self.relevant(slice, node, features)? {
                continue;
            }
            match relevant.first().map(|s| s.generation) {
                Some(g) if slice.generation < g => {}
                Some(g) if slice.generation > g => relevant = vec![slice],
                _ => relevant.push(slice),
            }
        }
        let Some(first) = relevant.first() else {
            return Ok(None);
        };
        let generation = first.generation;
        let expected = first.slice_count;
        let node_view = features.rules().completeness_from_node_slices;
        if !node_view
            && all.iter().any(|s| s.generation > generation)
            && relevant.len() as i64 != expected
        {
            // A newer generation is being published: the old one is obsolete.
            return Ok(None);
        }
        let same_generation: Vec<&SliceInfo> = all
            .iter()
            .copied()
            .filter(|s| s.generation == generation)
            .collect();
        let per_slice = features.rules().counters_per_slice;
        let mut pool = NodePool {
            key,
            slices: Vec::new(),
            incomplete: false,
            invalid: None,
            counters: CounterSets::new(),
            counters_per_slice: per_slice,
        };
        // In 1.34 the slices of an incomplete pool that are present stay
        // usable; only `allocationMode: All` refuses the pool.
        pool.incomplete = if node_view {
            relevant.len() as i64 != expected
        } else {
            same_generation.len() as i64 != expected
        };
        relevant.sort_by(|a, b| a.name.cmp(&b.name));
        if features.rules().binding_slices_last {
            relevant.sort_by_key(|s| s.devices.iter().any(|d| d.has_binding_conditions));
        }
        pool.invalid = duplicate_device(&relevant);
        if features.partitionable_devices && pool.invalid.is_none() {
            match counter_sets(&same_generation, in_use, per_slice) {
                Ok(counters) => pool.counters = counters,
                Err(reason) => pool.invalid = Some(reason),
            }
        }
        pool.slices = relevant;
        Ok(Some(pool))
    }
}

fn duplicate_device(slices: &[&SliceInfo]) -> Option<String> {
    let mut seen = HashSet::new();
    slices
        .iter()
        .flat_map(|s| &s.devices)
        .find(|d| !seen.insert(d.name.as_str()))
        .map(|d| format!("duplicate device name {}", d.name))
}

/// The pool's counter sets, less what allocated devices consume; fails when
/// a device refers to a counter set or counter that does not exist.
fn counter_sets(
    slices: &[&SliceInfo],
    in_use: &HashSet<(String, String, String)>,
    per_slice: bool,
) -> Result<CounterSets, String> {
    let mut sets = CounterSets::new();
    for slice in slices {
        for (name, counters) in &slice.shared_counters {
            let key = counter_key(per_slice, slice, name);
            if sets.insert(key, counters.clone()).is_some() {
                return Err(format!("duplicate counter set name {name}"));
            }
        }
    }
    for slice in slices {
        for device in &slice.devices {
            let allocated = in_use.contains(&(
                slice.driver.clone(),
                slice.pool.clone(),
                device.name.clone(),
            ));
            for consumption in &device.consumes_counters {
                let key = counter_key(per_slice, slice, &consumption.counter_set);
                let Some(set) = sets.get_mut(&key) else {
                    return Err(format!("counter set {} not found", consumption.counter_set));
                };
                for (counter, amount) in &consumption.counters {
                    let Some(available) = set.get_mut(counter) else {
                        return Err(format!(
                            "counter {counter} not found in counter set {}",
                            consumption.counter_set
                        ));
                    };
                    if allocated {
                        *available = available.checked_sub(amount).unwrap_or(Quantity::ZERO);
                    }
                }
            }
        }
    }
    Ok(sets)
}
