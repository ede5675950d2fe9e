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

    pub(crate) fn in_use(&self, candidate: usize) -> bool {
        self.ctx.exclusive_in_use[candidate]
            || self
                .allocating
                .get(&candidate)
                .is_some_and(|c| !c.is_empty())
    }

    fn allocating_for_claim(&self, candidate: usize, claim: usize) -> bool {
        self.allocating
            .get(&candidate)
            .is_some_and(|c| c.contains(&claim))
    }

    /// Class selectors, request selectors and per-device node selection.
    pub(crate) fn selectable(&mut self, c: usize, r: usize, s: usize, candidate: usize) -> bool {
        if let Some(&known) = self.match_cache.get(&(c, r, s, candidate)) {
            return known;
        }
        let spec = self.spec(c, r, s);
        let matches = self.class_matches(spec, candidate) && self.request_matches(spec, candidate);
        self.match_cache.insert((c, r, s, candidate), matches);
        matches
    }

    pub(crate) fn class_matches(&mut self, spec: &RequestSpec, candidate: usize) -> bool {
        let device = self.ctx.candidates[candidate].device();
        if device.has_binding_conditions && !self.ctx.features.device_binding_conditions {
            return false;
        }
        self.eval_all(
            &spec.class_selectors,
            candidate,
            &format!(
                "class {}",
                spec.class.metadata.name.as_deref().unwrap_or("")
            ),
        )
    }

    pub(crate) fn request_matches(&mut self, spec: &RequestSpec, candidate: usize) -> bool {
        if !self.eval_all(
            &spec.selectors,
            candidate,
            &format!("request {}", spec.full_name()),
        ) {
            return false;
        }
        let cand = self.ctx.candidates[candidate];
        if !cand.slice.per_device {
            return true;
        }
        match selection_matches(&cand.device().node, &self.ctx.node) {
            Ok(m) => m,
            Err(e) => {
                self.cel_errors
                    .insert(format!("device {}: {e}", cand.device().name));
                false
            }
        }
    }

    fn eval_all(
        &mut self,
        selectors: &[std::sync::Arc<crate::cel::Selector>],
        candidate: usize,
        owner: &str,
    ) -> bool {
        let device = self.ctx.candidates[candidate].device();
        for (i, selector) in selectors.iter().enumerate() {
            match selector.matches(device, self.ctx.features.consumable_capacity) {
                Ok(true) => {}
                Ok(false) => return false,
                Err(e) => {
                    self.cel_errors.insert(format!(
                        "{owner}, selector #{i}, device {}: {e}",
                        device.name
                    ));
                    return false;
                }
            }
        }
        true
    }

    /// Whether the request's capacity fits the device (consumable capacity only).
    pub(crate) fn capacity_ok(&self, spec: &RequestSpec, candidate: usize) -> bool {
        if !self.ctx.features.consumable_capacity {
            return true;
        }
        let device = self.ctx.candidates[candidate].device();
        match capacity::consumption(device, &spec.capacity) {
            Some(consumed) => capacity::fits(
                device,
                &consumed,
                self.ctx.shared[candidate],
                self.allocating_capacity.get(&candidate),
            ),
            None => false,
        }
    }

    /// Checks availability, counters, taints, constraints and capacity of one
    /// selectable candidate, and records it as allocated to the request.
    fn allocate_device(
        &mut self,
        c: usize,
        r: usize,
        s: usize,
        candidate: usize,
        must: bool,
    ) -> Result<Option<Undo>, Stop> {
        let spec = self.spec(c, r, s);
        let features = self.ctx.features;
        let cand = self.ctx.candidates[candidate];
        let device = cand.device();
        let multi = features.consumable_capacity && device.allow_multiple_allocations;
        if !multi && spec.admin_access && self.allocating_for_claim(candidate, c) {
            return Ok(None);
        }
        if !spec.admin_access && self.in_use(candidate) {
            return Ok(None);
        }
        let consumes = !device.consumes_counters.is_empty();
        if consumes && (!features.partitionable_devices || !self.take_counters(candidate)) {
            return Ok(None);
        }
        let mut undo = Undo {
            claim: c,
            candidate,
            constraints: Vec::new(),
            exclusive: false,
            capacity: None,
            counters: consumes,
            pushed: false,
        };
        if features.device_taints && !all_tolerated(&device.taints, &spec.tolerations) {
            self.undo(undo);
            return Ok(None);
        }
        let sub_name = spec.parent.as_ref().map(|_| spec.name.as_str());
        for (i, constraint) in self.constraints[c].iter_mut().enumerate() {
            if !constraint.applies_to(spec.base_name(), sub_name) {
                continue;
            }
            if constraint.check(device).is_err() {
                self.undo(undo);
                if must {
                    return Err(Stop::Fatal(format!(
                        "claim {}, request {}: cannot add device {} because a claim constraint would not be satisfied",
                        self.claims[c].label,
                        spec.full_name(),
                        device.name
                    )));
                }
                return Ok(None);
            }
            constraint.add(device);
            undo.constraints.push(i);
        }
        let mut consumed = None;
        if features.consumable_capacity {
            let fitting = capacity::consumption(device, &spec.capacity).filter(|amount| {
                capacity::fits(
                    device,
                    amount,
                    self.ctx.shared[candidate],
                    self.allocating_capacity.get(&candidate),
                )
            });
            let Some(amount) = fitting else {
                self.undo(undo);
                return Ok(None);
            };
            if multi {
                capacity::add_into(
                    self.allocating_capacity.entry(candidate).or_default(),
                    &amount,
                );
                undo.capacity = Some(amount.clone());
                consumed = Some(amount);
            }
        }
        if !multi {
            self.allocating.entry(candidate).or_default().push(c);
            undo.exclusive = true;
        }
        self.picked[c].push(Picked {
            request: r,
            sub: s,
            candidate,
            consumed,
        });
        undo.pushed = true;
        Ok(Some(undo))
    }

    fn undo(&mut self, undo: Undo) {
        for &i in undo.constraints.iter().rev() {
            self.constraints[undo.claim][i].remove_last();
        }
        if undo.exclusive
            && let Some(claims) = self.allocating.get_mut(&undo.candidate)
            && let Some(pos) = claims.iter().rposition(|&x| x == undo.claim)
        {
            claims.remove(pos);
        }
        if let Some(amount) = &undo.capacity
            && let Some(total) = self.allocating_capacity.get_mut(&undo.candidate)
        {
            capacity::sub_from(total, amount);
        }
        if undo.counters {
            self.release_counters(undo.candidate);
        }
        if undo.pushed {
            self.picked[undo.claim].pop();
        }
    }

    /// Draws the candidate's counters; false (and nothing drawn) when a
    /// counter set of its pool would be overdrawn.
    fn take_counters(&mut self, candidate: usize) -> bool {
        let cand = self.ctx.candidates[candidate];
        let available = &self.ctx.pools[cand.pool].counters;
        let consumed = &mut self.consumed_counters[cand.pool];
        for use_ in &cand.device().consumes_counters {
            let set = consumed.entry(use_.counter_set.clone()).or_default();
            capacity::add_into(set, &use_.counters);
        }
        let fits = available.iter().all(|(name, counters)| {
            counters.iter().all(|(counter, limit)| {
                consumed
                    .get(name)
                    .and_then(|s| s.get(counter))
                    .is_none_or(|used| used <= limit)
            })
        });
        if !fits {
            self.release_counters(candidate);
        }
        fits
    }

    fn release_counters(&mut self, candidate: usize) {
        let cand = self.ctx.candidates[candidate];
        let consumed = &mut self.consumed_counters[cand.pool];
        for use_ in &cand.device().consumes_counters {
            if let Some(set) = consumed.get_mut(&use_.counter_set) {
                capacity::sub_from(set, &use_.counters);
            }
        }
    }
}
