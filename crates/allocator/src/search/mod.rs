//! The depth-first search of upstream's `allocateOne`: claims in order,
//! requests in order, each needed device tried against the candidates in
//! order, backtracking on failure; the first complete solution wins.
//! `firstAvailable` alternatives are tried in order for each request.

use std::collections::HashMap;

use crate::capacity::{self, Consumption};
use crate::constraint::{ConstraintState, Distinct};
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
    /// Upstream aborts the allocation with this error (invalid input).
    Fatal(String),
    /// Upstream aborts the allocation: the search met invalid pool `p`
    /// (1.34).
    InvalidPool(usize),
    /// Upstream fails this node only: nothing fits and invalid pools were
    /// passed over (1.35+).
    InvalidPools,
    /// The per-claim result limit would be passed (see `allocate_one`).
    ResultLimit,
}

/// What `allocate_device` changed, to be undone on backtracking.
struct Undo {
    claim: usize,
    candidate: usize,
    constraints: Vec<usize>,
    exclusive: bool,
    capacity: Option<Consumption>,
    /// The device had capacity being allocated before this share.
    capacity_existed: bool,
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
}

impl<'c, 'a> Search<'c, 'a> {
    pub(crate) fn new(ctx: &'c NodeContext<'a>, claims: &'c [ClaimPlan]) -> Search<'c, 'a> {
        let rules = ctx.features.rules();
        let distinct = match (rules.distinct_per_request, rules.distinct_by_device) {
            (false, _) => Distinct::EveryValue,
            (true, false) => Distinct::PerRequest,
            (true, true) => Distinct::PerRequestSameDevice,
        };
        let sets = (ctx.features.list_type_attributes
            && ctx.features.release.has_list_type_attributes())
        .then_some(rules.match_sets_restored);
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
                        .map(|spec| ConstraintState::new(spec, distinct, sets))
                        .collect()
                })
                .collect(),
            match_cache: HashMap::new(),
            all_devices: HashMap::new(),
            picked: vec![Vec::new(); claims.len()],
            selected_sub: HashMap::new(),
            steps: 0,
        }
    }

    /// Runs the search; `Ok(true)` when every claim got its devices.
    pub(crate) fn run(&mut self) -> Result<bool, Stop> {
        self.prepare_all_mode()?;
        // Upstream starts the search with a fresh cache of selector results.
        self.match_cache.clear();
        self.check_claim_limits()?;
        let found = match self.allocate_one(0, 0, 0, 0, false, 0) {
            // Not caught by a prioritized list or an earlier claim: upstream
            // returns it as an error.
            Err(Stop::ResultLimit) => {
                return Err(Stop::Fatal("allocation max size exceeded".into()));
            }
            other => other?,
        };
        let rules = self.ctx.features.rules();
        if !found && rules.skip_unusable_pools && self.ctx.pools.iter().any(|p| p.invalid.is_some())
        {
            return Err(Stop::InvalidPools);
        }
        Ok(found)
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
                    let rules = self.ctx.features.rules();
                    let static_only = rules.all_mode_static_capacity;
                    let key = if rules.subrequest_checks_off_by_one && plan.is_prioritized() {
                        s.saturating_sub(1)
                    } else {
                        s
                    };
                    let mut devices = Vec::new();
                    for i in 0..self.ctx.candidates.len() {
                        if !self.selectable_filed_as(c, r, s, key, i)? {
                            continue;
                        }
                        let fits = if static_only {
                            self.capacity_ok_alone(spec, i)?
                        } else {
                            self.capacity_ok(spec, i)?
                        };
                        if fits {
                            devices.push(i);
                        }
                    }
                    self.all_devices.insert((c, r, s), devices);
                }
            }
        }
        Ok(())
    }

    /// Upstream refuses a claim whose requests need more devices than a
    /// result holds even with the smallest alternatives (`All` counting the
    /// devices it would take).
    fn check_claim_limits(&self) -> Result<(), Stop> {
        for (c, claim) in self.claims.iter().enumerate() {
            let mut total = 0usize;
            for (r, plan) in claim.requests.iter().enumerate() {
                let least = plan
                    .alternatives()
                    .iter()
                    .enumerate()
                    .map(|(s, spec)| match spec.mode {
                        Mode::ExactCount(n) => n,
                        Mode::All => self.all_devices.get(&(c, r, s)).map_or(0, Vec::len),
                    })
                    .min()
                    .unwrap_or(0);
                // Upstream's check and words: the first request that
                // does not fit names itself.
                if least > ALLOCATION_RESULTS_MAX_SIZE - total {
                    return Err(Stop::Fatal(format!(
                        "claim {}, request {}: adding {least} devices exceeds the claim limit of {ALLOCATION_RESULTS_MAX_SIZE}, with {total} already accounted for",
                        claim.label,
                        plan.alternatives()[0].base_name()
                    )));
                }
                total += least;
            }
        }
        Ok(())
    }

    /// Allocates device `d` of request `r` (alternative `s`) of claim `c`
    /// and everything after it; `start` is the first candidate to try when
    /// the request's devices are taken in order.
    ///
    /// Going past the per-claim result limit raises [`Stop::ResultLimit`],
    /// as upstream's `errAllocationResultMaxSizeExceeded`: it unwinds past
    /// the device choices of earlier requests (no other device can help)
    /// to the nearest prioritized list, which tries its next subrequest, or
    /// to the previous claim, which tries its other devices.
    fn allocate_one(
        &mut self,
        c: usize,
        r: usize,
        s: usize,
        d: usize,
        in_sub: bool,
        start: usize,
    ) -> Result<bool, Stop> {
        self.steps += 1;
        if self.steps > STEP_LIMIT {
            return Err(Stop::Budget);
        }
        let Some(claim) = self.claims.get(c) else {
            return Ok(true);
        };
        let Some(plan) = claim.requests.get(r) else {
            return match self.allocate_one(c + 1, 0, 0, 0, false, 0) {
                Err(Stop::ResultLimit) => Ok(false),
                other => other,
            };
        };
        if matches!(plan, RequestPlan::FirstAvailable(_)) && !in_sub {
            return self.allocate_first_available(c, r);
        }
        let spec = self.spec(c, r, s);
        let needed = match spec.mode {
            Mode::All => {
                let all = &self.all_devices[&(c, r, s)];
                if all.is_empty() {
                    return Ok(false);
                }
                all.len()
            }
            Mode::ExactCount(n) => n,
        };
        if d >= needed {
            return self.allocate_one(c, r + 1, 0, 0, false, 0);
        }
        if needed - d > ALLOCATION_RESULTS_MAX_SIZE.saturating_sub(self.picked[c].len()) {
            return Err(Stop::ResultLimit);
        }
        match spec.mode {
            Mode::All => self.allocate_all(c, r, s, d, in_sub),
            Mode::ExactCount(_) => self.allocate_exact(c, r, s, d, in_sub, start),
        }
    }

    /// Tries each subrequest in turn; the result limit of all of them
    /// unwinds further.
    fn allocate_first_available(&mut self, c: usize, r: usize) -> Result<bool, Stop> {
        let mut all_over_limit = true;
        for sub in 0..self.claims[c].requests[r].alternatives().len() {
            match self.allocate_one(c, r, sub, 0, true, 0) {
                Err(Stop::ResultLimit) => continue,
                Ok(true) => {
                    self.selected_sub.insert((c, r), sub);
                    return Ok(true);
                }
                Ok(false) => all_over_limit = false,
                Err(stop) => return Err(stop),
            }
        }
        if all_over_limit {
            Err(Stop::ResultLimit)
        } else {
            Ok(false)
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
        let candidate = self.all_devices[&(c, r, s)][d];
        let Some(undo) = self.allocate_device(c, r, s, candidate, d, true)? else {
            return Ok(false);
        };
        let next = if self.ctx.features.rules().all_subrequest_continues_as_first {
            0
        } else {
            s
        };
        match self.allocate_one(c, r, next, d + 1, in_sub, 0) {
            Ok(true) => Ok(true),
            other => {
                self.undo(undo);
                other
            }
        }
    }

    fn allocate_exact(
        &mut self,
        c: usize,
        r: usize,
        s: usize,
        d: usize,
        in_sub: bool,
        start: usize,
    ) -> Result<bool, Stop> {
        let spec = self.spec(c, r, s);
        let rules = self.ctx.features.rules();
        for (p, range) in self.ctx.pool_ranges.iter().enumerate() {
            let pool = &self.ctx.pools[p];
            if rules.skip_unusable_pools && (pool.incomplete || pool.invalid.is_some()) {
                continue;
            }
            if pool.invalid.is_some() {
                return Err(Stop::InvalidPool(p));
            }
            let first = if rules.ordered_devices {
                range.start.max(start)
            } else {
                range.start
            };
            for candidate in first..range.end {
                if spec.admin_access && self.allocating_for_claim(candidate, c) {
                    continue;
                }
                if !spec.admin_access && self.in_use(candidate) {
                    continue;
                }
                if !self.selectable(c, r, s, candidate)? || !self.capacity_ok(spec, candidate)? {
                    continue;
                }
                let Some(undo) = self.allocate_device(c, r, s, candidate, d, false)? else {
                    continue;
                };
                match self.allocate_one(c, r, s, d + 1, in_sub, candidate + 1) {
                    Ok(true) => return Ok(true),
                    Ok(false) => self.undo(undo),
                    Err(stop) => {
                        self.undo(undo);
                        return Err(stop);
                    }
                }
            }
        }
        Ok(false)
    }
}
