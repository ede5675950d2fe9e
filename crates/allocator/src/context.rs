//! What one allocation on one node works with: the node's pools, the
//! candidate devices in upstream's order (pools by driver and name, slices
//! by name, devices as listed), and which of them allocated claims hold.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use k8s_openapi::api::resource::v1::ResourceClaim;

use crate::capacity::Consumption;
use crate::error::InputError;
use crate::features::Features;
use crate::model::{DeviceInfo, SliceInfo, parse_quantity};
use crate::node::NodeFacts;
use crate::pools::{NodePool, PoolIndex};

/// (driver, pool, device).
pub(crate) type DeviceKey = (String, String, String);

/// Devices held by claims that are already allocated.
#[derive(Debug, Default, Clone)]
pub(crate) struct AllocatedState {
    /// Devices allocated exclusively (not shared, not admin access).
    pub exclusive: HashSet<DeviceKey>,
    /// Capacity consumed on shared devices, summed over their shares.
    pub shared: HashMap<DeviceKey, Consumption>,
    /// `DRAConsumableCapacity`: without it the scheduler counts a result
    /// with a share ID as a device allocated exclusively.
    pub shares_known: bool,
}

impl AllocatedState {
    /// The devices `claims` hold; `shares_known`: `DRAConsumableCapacity`
    /// (without it the scheduler's allocated-device tracking treats a share
    /// as the whole device).
    pub(crate) fn from_claims(
        claims: &[ResourceClaim],
        shares_known: bool,
    ) -> Result<AllocatedState, InputError> {
        let mut state = AllocatedState {
            shares_known,
            ..AllocatedState::default()
        };
        for claim in claims {
            let results = claim
                .status
                .as_ref()
                .and_then(|s| s.allocation.as_ref())
                .and_then(|a| a.devices.as_ref())
                .and_then(|d| d.results.as_ref());
            for result in results.into_iter().flatten() {
                state.record(result).map_err(|reason| InputError::Claim {
                    claim: crate::request::claim_label(claim),
                    reason,
                })?;
            }
        }
        Ok(state)
    }

    fn record(
        &mut self,
        result: &k8s_openapi::api::resource::v1::DeviceRequestAllocationResult,
    ) -> Result<(), String> {
        if result.admin_access == Some(true) {
            return Ok(());
        }
        let key = (
            result.driver.clone(),
            result.pool.clone(),
            result.device.clone(),
        );
        if result.share_id.is_none() || !self.shares_known {
            self.exclusive.insert(key);
            return Ok(());
        }
        let mut consumed = Consumption::new();
        for (name, q) in result.consumed_capacity.iter().flatten() {
            consumed.insert(name.clone(), parse_quantity(&q.0)?);
        }
        crate::capacity::add_into(self.shared.entry(key).or_default(), &consumed);
        Ok(())
    }

    /// Adds the results of a claim just allocated.
    pub(crate) fn add_results(
        &mut self,
        results: &[k8s_openapi::api::resource::v1::DeviceRequestAllocationResult],
    ) -> Result<(), String> {
        results.iter().try_for_each(|r| self.record(r))
    }
}

/// A device that may be allocated on the node.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate<'a> {
    pub pool: usize,
    pub slice: &'a SliceInfo,
    pub index: usize,
}

impl<'a> Candidate<'a> {
    pub(crate) fn device(&self) -> &'a DeviceInfo {
        &self.slice.devices[self.index]
    }
}

/// The node's view, fixed for one allocation.
#[derive(Debug)]
pub(crate) struct NodeContext<'a> {
    pub features: Features,
    pub node: NodeFacts,
    pub pools: Vec<NodePool<'a>>,
    pub candidates: Vec<Candidate<'a>>,
    pub pool_ranges: Vec<Range<usize>>,
    /// Per candidate: allocated exclusively by an earlier claim.
    pub exclusive_in_use: Vec<bool>,
    /// Per candidate: capacity already consumed by shares.
    pub shared: Vec<Option<&'a Consumption>>,
}

impl<'a> NodeContext<'a> {
    pub(crate) fn new(
        index: &'a PoolIndex,
        node: &NodeFacts,
        features: Features,
        state: &'a AllocatedState,
    ) -> Result<NodeContext<'a>, InputError> {
        // Devices whose counters are drawn by claims already allocated.
        let mut holding_counters = state.exclusive.clone();
        if features.rules().held_shares_consume_counters {
            holding_counters.extend(state.shared.keys().cloned());
        }
        let pools = index.gather(node, &features, &holding_counters)?;
        let mut candidates = Vec::new();
        let mut pool_ranges = Vec::new();
        for (p, pool) in pools.iter().enumerate() {
            let start = candidates.len();
            for slice in &pool.slices {
                candidates.extend((0..slice.devices.len()).map(|index| Candidate {
                    pool: p,
                    slice,
                    index,
                }));
            }
            pool_ranges.push(start..candidates.len());
        }
        let key = |c: &Candidate<'_>| {
            (
                c.slice.driver.clone(),
                c.slice.pool.clone(),
                c.device().name.clone(),
            )
        };
        let exclusive_in_use = candidates
            .iter()
            .map(|c| state.exclusive.contains(&key(c)))
            .collect();
        let shared = candidates
            .iter()
            .map(|c| state.shared.get(&key(c)))
            .collect();
        Ok(NodeContext {
            features,
            node: node.clone(),
            pools,
            candidates,
            pool_ranges,
            exclusive_in_use,
            shared,
        })
    }
}
