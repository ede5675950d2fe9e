//! `GetPreferredAllocation` scoring: which `size` devices, out of those the
//! kubelet says are available, a container should get.
//!
//! The kubelet tells the plugin nothing about the pod's GPUs, so the score
//! looks at the chosen NICs among themselves. A candidate set's cost is the
//! tuple below, compared in this order (lower wins):
//!
//! 1. `numa_nodes`: distinct NUMA nodes in the set; a device whose NUMA node
//!    is unknown counts as a node of its own. One node when possible.
//! 2. `shared_card_pairs`: pairs of devices on the same physical card (VFs of
//!    one PF, or a PF and its VF). VFs of distinct PFs first.
//! 3. `shared_switch_pairs`: pairs of different cards under the same PCIe
//!    switch. Distinct switches spread traffic over independent uplinks.
//! 4. `shared_rail_pairs`: pairs of different cards on the same rail.
//!    Distinct rails reach distinct leaf switches of a rail-optimised fabric.
//!
//! (Two functions of one card always share its switch and rail; criterion 2
//! already counts that pair, so 3 and 4 do not count it again.)
//! 5. `pcie_distance`: sum over pairs of the affinity class between the two
//!    devices (PIX 0, PXB 1, PHB 2, NODE 3, SYS 4): once spread over
//!    switches, stay under one root complex rather than crossing host bridges.
//!
//! Ties go to the set whose sorted addresses are lowest, so the answer is a
//! pure function of the request and the inventory. Must-include devices are
//! always in the set and count like the others.
//!
//! Search: when the number of candidate sets is at most [`EXHAUSTIVE_LIMIT`]
//! every set is scored (the usual case: 8 PFs choose a few). Otherwise, for
//! each NUMA node among the candidates, a greedy pass starts from the
//! must-include devices and adds the device of least added cost, preferring
//! that node's devices; the best pass wins. The cost is a sum over devices and
//! pairs, so the added cost of one device is exact, and filling one NUMA node
//! first is what criterion 1 asks. Functions of one card at one PCIe
//! position add the same cost, so each step only weighs the lowest address
//! of each such group (8 PFs × 256 VFs: about 0.5 ms per request,
//! `cargo bench -p dra-model --bench classic`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use topology::{Affinity, PciAddress, classify};

use super::device::ClassicDevice;

/// Largest number of candidate sets scored one by one.
pub const EXHAUSTIVE_LIMIT: u64 = 20_000;

/// Why no preference could be computed (the kubelet then picks by itself).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PreferenceError {
    /// An ID is not a device this resource offers.
    #[error("unknown device {id:?} in preferred allocation request")]
    UnknownDevice {
        /// The ID as the kubelet sent it.
        id: String,
    },
    /// More devices asked for than available, or fewer than must be included.
    #[error("cannot choose {size} devices from {available} available with {must_include} required")]
    BadSize {
        /// `allocation_size`.
        size: usize,
        /// Number of available IDs.
        available: usize,
        /// Number of must-include IDs.
        must_include: usize,
    },
}

/// The cost of a set of devices; see the module doc. Ordered field by field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct SetCost {
    /// Distinct NUMA nodes (unknown ones each count once).
    pub numa_nodes: usize,
    /// Pairs on the same physical card.
    pub shared_card_pairs: usize,
    /// Pairs of different cards under the same PCIe switch.
    pub shared_switch_pairs: usize,
    /// Pairs of different cards on the same rail.
    pub shared_rail_pairs: usize,
    /// Sum of pairwise affinity class ranks.
    pub pcie_distance: usize,
}

impl std::ops::Add for SetCost {
    type Output = SetCost;
    fn add(self, o: SetCost) -> SetCost {
        SetCost {
            numa_nodes: self.numa_nodes + o.numa_nodes,
            shared_card_pairs: self.shared_card_pairs + o.shared_card_pairs,
            shared_switch_pairs: self.shared_switch_pairs + o.shared_switch_pairs,
            shared_rail_pairs: self.shared_rail_pairs + o.shared_rail_pairs,
            pcie_distance: self.pcie_distance + o.pcie_distance,
        }
    }
}

/// What adding `d` to `set` costs.
fn added_cost(set: &[&ClassicDevice], d: &ClassicDevice) -> SetCost {
    let new_node = match d.numa_node() {
        None => true,
        Some(n) => !set.iter().any(|s| s.numa_node() == Some(n)),
    };
    let count = |f: &dyn Fn(&ClassicDevice) -> bool| set.iter().filter(|s| f(s)).count();
    SetCost {
        numa_nodes: usize::from(new_node),
        shared_card_pairs: count(&|s| s.card() == d.card()),
        shared_switch_pairs: count(&|s| {
            s.card() != d.card()
                && s.location.switch.is_some()
                && s.location.switch == d.location.switch
        }),
        shared_rail_pairs: count(&|s| s.card() != d.card() && s.rail == d.rail),
        pcie_distance: set
            .iter()
            .map(|s| affinity_rank(classify(&s.location, &d.location)))
            .sum(),
    }
}

fn affinity_rank(a: Affinity) -> usize {
    Affinity::ALL.iter().position(|x| *x == a).unwrap_or(4)
}

/// The cost of a whole set.
pub fn set_cost(set: &[&ClassicDevice]) -> SetCost {
    let mut total = SetCost::default();
    for i in 0..set.len() {
        total = total + added_cost(&set[..i], set[i]);
    }
    total
}

/// Chooses `size` of the `available` IDs, including every `must_include`
/// ID; `devices` are all devices of the resource. Returns IDs by address.
pub fn preferred_allocation(
    devices: &[ClassicDevice],
    available: &[String],
    must_include: &[String],
    size: usize,
) -> Result<Vec<String>, PreferenceError> {
    let by_address: BTreeMap<PciAddress, &ClassicDevice> =
        devices.iter().map(|d| (d.address, d)).collect();
    let lookup = |id: &String| {
        id.parse::<PciAddress>()
            .ok()
            .and_then(|a| by_address.get(&a).copied())
            .ok_or_else(|| PreferenceError::UnknownDevice { id: id.clone() })
    };
    let must: BTreeSet<PciAddress> = must_include
        .iter()
        .map(|id| lookup(id).map(|d| d.address))
        .collect::<Result<_, _>>()?;
    let mut pool: Vec<&ClassicDevice> = available.iter().map(lookup).collect::<Result<_, _>>()?;
    pool.sort_by_key(|d| d.address);
    pool.dedup_by_key(|d| d.address);
    let fixed: Vec<&ClassicDevice> = pool
        .iter()
        .copied()
        .filter(|d| must.contains(&d.address))
        .collect();
    let free: Vec<&ClassicDevice> = pool
        .iter()
        .copied()
        .filter(|d| !must.contains(&d.address))
        .collect();
    if fixed.len() != must.len() || size < fixed.len() || size > pool.len() {
        return Err(PreferenceError::BadSize {
            size,
            available: pool.len(),
            must_include: must.len(),
        });
    }
    let wanted = size - fixed.len();
    let chosen = if binomial(free.len(), wanted) <= EXHAUSTIVE_LIMIT {
        exhaustive(&fixed, &free, wanted)
    } else {
        greedy_best(&fixed, &free, wanted)
    };
    let mut ids: Vec<PciAddress> = chosen.iter().map(|d| d.address).collect();
    ids.sort();
    Ok(ids.iter().map(|a| a.to_string()).collect())
}

/// C(n, k), saturating at `u64::MAX`; 0 when k > n.
fn binomial(n: usize, k: usize) -> u64 {
    if k > n {
        return 0;
    }
    let k = k.min(n - k);
    let mut acc: u128 = 1;
    for i in 0..k {
        acc = acc * (n - i) as u128 / (i as u128 + 1);
        if acc > u128::from(u64::MAX) {
            return u64::MAX;
        }
    }
    acc as u64
}

/// Scores every set; the first minimum in lexicographic index order is the
/// one with the lowest addresses (`free` is sorted by address).
fn exhaustive<'a>(
    fixed: &[&'a ClassicDevice],
    free: &[&'a ClassicDevice],
    k: usize,
) -> Vec<&'a ClassicDevice> {
    let mut idx: Vec<usize> = (0..k).collect();
    let mut best: Option<(SetCost, Vec<usize>)> = None;
    loop {
        let set: Vec<&ClassicDevice> = fixed
            .iter()
            .copied()
            .chain(idx.iter().map(|&i| free[i]))
            .collect();
        let cost = set_cost(&set);
        if best.as_ref().is_none_or(|(b, _)| cost < *b) {
            best = Some((cost, idx.clone()));
        }
        if !next_combination(&mut idx, free.len()) {
            break;
        }
    }
    let (_, idx) = best.unwrap_or_default();
    fixed
        .iter()
        .copied()
        .chain(idx.iter().map(|&i| free[i]))
        .collect()
}

/// Advances `idx` to the next k-combination of `0..n`; false after the last.
fn next_combination(idx: &mut [usize], n: usize) -> bool {
    let k = idx.len();
    for i in (0..k).rev() {
        if idx[i] < n - k + i {
            idx[i] += 1;
            for j in i + 1..k {
                idx[j] = idx[j - 1] + 1;
            }
            return true;
        }
    }
    false
}

/// One greedy pass per NUMA node of the candidates (plus one with no home
/// node); the lowest-cost result wins, lowest addresses on ties.
fn greedy_best<'a>(
    fixed: &[&'a ClassicDevice],
    free: &[&'a ClassicDevice],
    k: usize,
) -> Vec<&'a ClassicDevice> {
    let homes: BTreeSet<Option<u32>> = free.iter().map(|d| d.numa_node()).collect();
    let mut best: Option<(SetCost, Vec<PciAddress>, Vec<&ClassicDevice>)> = None;
    for home in homes.into_iter().chain([None]) {
        let set = greedy(fixed, free, k, home);
        let mut addrs: Vec<PciAddress> = set.iter().map(|d| d.address).collect();
        addrs.sort();
        let key = (set_cost(&set), addrs);
        if best.as_ref().is_none_or(|(c, a, _)| key < (*c, a.clone())) {
            best = Some((key.0, key.1, set));
        }
    }
    best.map(|b| b.2).unwrap_or_default()
}

fn greedy<'a>(
    fixed: &[&'a ClassicDevice],
    free: &[&'a ClassicDevice],
    k: usize,
    home: Option<u32>,
) -> Vec<&'a ClassicDevice> {
    let mut set: Vec<&ClassicDevice> = fixed.to_vec();
    let mut buckets = same_cost_buckets(free);
    for _ in 0..k {
        let pick = buckets
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.front().map(|d| (i, *d)))
            .min_by_key(|(_, d)| {
                let away = home.is_some() && d.numa_node() != home;
                (away, added_cost(&set, d), d.address)
            })
            .map(|(i, _)| i);
        let Some(d) = pick.and_then(|i| buckets[i].pop_front()) else {
            break;
        };
        set.push(d);
    }
    set
}

/// Groups `free` (sorted by address) into buckets of functions that add the
/// same cost to any set: same card, rail and PCIe position (the VFs of one
/// PF, typically). Within a bucket only the lowest address can win, so each
/// greedy step looks at bucket heads instead of every VF.
fn same_cost_buckets<'a>(free: &[&'a ClassicDevice]) -> Vec<VecDeque<&'a ClassicDevice>> {
    let mut buckets: Vec<VecDeque<&ClassicDevice>> = Vec::new();
    for d in free {
        let same = |b: &&mut VecDeque<&ClassicDevice>| {
            b.front().is_some_and(|h| {
                h.card() == d.card() && h.rail == d.rail && h.location == d.location
            })
        };
        match buckets.iter_mut().find(same) {
            Some(bucket) => bucket.push_back(d),
            None => buckets.push(VecDeque::from([*d])),
        }
    }
    buckets
}

#[cfg(test)]
mod tests;
