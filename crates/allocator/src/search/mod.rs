//! The depth-first search of upstream's `allocateOne`: claims in order,
//! requests in order, each needed device tried against the candidates in
//! order, backtracking on failure; the first complete solution wins.
//! `firstAvailable` alternatives are tried in order for each request.

use std::collections::{BTreeSet, HashMap};

use crate::capacity::{self, Consumption};
use crate::constraint::ConstraintState;
use crate::context::NodeContext;
use crate::node::selection_matches;
use crate::pools::CounterSets;
use crate::request::{ALLOCATION_RESULTS_MAX_SIZE, ClaimPlan, Mode, RequestPlan, RequestSpec};
use crate::taints::all_tolerated;

mod device;
mod filters;

/// Most search steps before giving up, so that a hopeless search of a
/// large input ends.
pub(crate) const STEP_LIMIT: u64 = 2_000_000;

/// A device chosen for a request.
#[derive(Debug, Clone)]
pub(crate) struct Picked {
    pub request: usize,
    pub sub: usize,
    pub candidate: usize,
    pub consumed: Option<Consumption>,
}

/// Why the search stopped without exploring everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The step budget ran out.
    Budget,
    /// Upstream aborts the allocation with this error.
    Fatal(String),
}

/// What `allocate_device` changed, to be undone on backtracking.
struct Undo {
    claim: usize,
    candidate: usize,
    constraints: Vec<usize>,
    exclusive: bool,
    capacity: Option<Consumption>,
    counters: bool,
    pushed: bool,
}

/// The search state of one allocation attempt.
pub(crate) struct Search<'c, 'a> {
    ctx: &'c NodeContext<'a>,
    claims: &'c [ClaimPlan],
    allocating: HashMap<usize, Vec<usize>>,
    allocating_capacity: HashMap<usize, Consumption>,
    consumed_counters: Vec<CounterSets>,
    pub constraints: Vec<Vec<ConstraintState>>,
    match_cache: HashMap<(usize, usize, usize, usize), bool>,
    all_devices: HashMap<(usize, usize, usize), Vec<usize>>,
    pub picked: Vec<Vec<Picked>>,
    pub selected_sub: HashMap<(usize, usize), usize>,
    pub steps: u64,
    /// CEL runtime errors met (the device did not match).
    pub cel_errors: BTreeSet<String>,
}

impl<'c, 'a> Search<'c, 'a> {
    pub(crate) fn new(ctx: &'c NodeContext<'a>, claims: &'c [ClaimPlan]) -> Search<'c, 'a> {
        Search {
            ctx,
            claims,
            allocating: HashMap::new(),
            allocating_capacity: HashMap::new(),
            consumed_counters: vec![CounterSets::new(); ctx.pools.len()],
            constraints: claims
                .iter()
                .map(|c| {
                    c.constraints
                        .iter()
                        .cloned()
                        .map(ConstraintState::new)
                        .collect()
                })
                .collect(),
            match_cache: HashMap::new(),
            all_devices: HashMap::new(),
            picked: vec![Vec::new(); claims.len()],
            selected_sub: HashMap::new(),
            steps: 0,
            cel_errors: BTreeSet::new(),
        }
    }

    /// Runs the search; `Ok(true)` when every claim got its devices.
    pub(crate) fn run(&mut self) -> Result<bool, Stop> {
        self.prepare_all_mode()?;
        self.allocate_one(0, 0, 0, 0, false)
    }

    pub(crate) fn spec(&self, claim: usize, request: usize, sub: usize) -> &'c RequestSpec {
        &self.claims[claim].requests[request].alternatives()[sub]
    }

    /// Devices for `allocationMode: All` requests, fixed up front.
    fn prepare_all_mode(&mut self) -> Result<(), Stop> {
        for (c, claim) in self.claims.iter().enumerate() {
            for (r, plan) in claim.requests.iter().enumerate() {
                for (s, spec) in plan.alternatives().iter().enumerate() {
                    if spec.mode != Mode::All {
                        continue;
                    }
                    if let Some(pool) = self
                        .ctx
                        .pools
                        .iter()
                        .find(|p| p.incomplete || p.invalid.is_some())
                    {
                        let state = if pool.incomplete {
                            "currently being updated"
                        } else {
                            "currently invalid"
                        };
                        return Err(Stop::Fatal(format!(
                            "claim {}, request {}: asks for all devices, but resource pool {}/{} is {state}",
                            claim.label,
                            spec.full_name(),
                            pool.key.0,
                            pool.key.1
                        )));
                    }
                    let devices = (0..self.ctx.candidates.len())
                        .filter(|&i| self.selectable(c, r, s, i) && self.capacity_ok(spec, i))
                        .collect();
                    self.all_devices.insert((c, r, s), devices);
                }
            }
        }
        Ok(())
    }

    fn allocate_one(
        &mut self,
        c: usize,
        r: usize,
        s: usize,
        d: usize,
        in_sub: bool,
    ) -> Result<bool, Stop> {
        self.steps += 1;
        if self.steps > STEP_LIMIT {
            return Err(Stop::Budget);
        }
        let Some(claim) = self.claims.get(c) else {
            return Ok(true);
        };
        let Some(plan) = claim.requests.get(r) else {
            return self.allocate_one(c + 1, 0, 0, 0, false);
        };
        if matches!(plan, RequestPlan::FirstAvailable(_)) && !in_sub {
            for sub in 0..plan.alternatives().len() {
                if self.allocate_one(c, r, sub, 0, true)? {
                    self.selected_sub.insert((c, r), sub);
                    return Ok(true);
                }
            }
            return Ok(false);
        }
        let spec = self.spec(c, r, s);
        match spec.mode {
            Mode::All => self.allocate_all(c, r, s, d, in_sub),
            Mode::ExactCount(n) if d >= n => self.allocate_one(c, r + 1, 0, 0, false),
            Mode::ExactCount(n) => {
                if self.picked[c].len() + n - d > ALLOCATION_RESULTS_MAX_SIZE {
                    return Ok(false);
                }
                self.allocate_exact(c, r, s, d, in_sub)
            }
        }
    }

    fn allocate_all(
        &mut self,
        c: usize,
        r: usize,
        s: usize,
        d: usize,
        in_sub: bool,
    ) -> Result<bool, Stop> {
        let devices = &self.all_devices[&(c, r, s)];
        if devices.is_empty() {
            return Ok(false);
        }
        let Some(&candidate) = devices.get(d) else {
            return self.allocate_one(c, r + 1, 0, 0, false);
        };
        if self.picked[c].len() + devices.len() - d > ALLOCATION_RESULTS_MAX_SIZE {
            return Ok(false);
        }
        let Some(undo) = self.allocate_device(c, r, s, candidate, true)? else {
            return Ok(false);
        };
        if self.allocate_one(c, r, s, d + 1, in_sub)? {
            return Ok(true);
        }
        self.undo(undo);
        Ok(false)
    }

    fn allocate_exact(
        &mut self,
        c: usize,
        r: usize,
        s: usize,
        d: usize,
        in_sub: bool,
    ) -> Result<bool, Stop> {
        let spec = self.spec(c, r, s);
        for (p, range) in self.ctx.pool_ranges.iter().enumerate() {
            let pool = &self.ctx.pools[p];
            if let Some(reason) = &pool.invalid {
                return Err(Stop::Fatal(format!(
                    "pool {}/{} is invalid: {reason}",
                    pool.key.0, pool.key.1
                )));
            }
            for candidate in range.clone() {
                if spec.admin_access && self.allocating_for_claim(candidate, c) {
                    continue;
                }
                if !spec.admin_access && self.in_use(candidate) {
                    continue;
                }
                if !self.selectable(c, r, s, candidate) || !self.capacity_ok(spec, candidate) {
                    continue;
                }
                let Some(undo) = self.allocate_device(c, r, s, candidate, false)? else {
                    continue;
                };
                if self.allocate_one(c, r, s, d + 1, in_sub)? {
                    return Ok(true);
                }
                self.undo(undo);
            }
        }
        Ok(false)
    }
}
