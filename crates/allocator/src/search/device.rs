//! Taking one candidate for a request: availability, counters, taints,
//! constraints and capacity, recorded so that backtracking can undo it.

use super::*;

impl Search<'_, '_> {
    /// Checks availability, counters, taints, constraints and capacity of one
    /// selectable candidate, and records it as allocated to the request.
    pub(super) fn allocate_device(
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

    pub(super) fn undo(&mut self, undo: Undo) {
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
    pub(super) fn take_counters(&mut self, candidate: usize) -> bool {
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

    pub(super) fn release_counters(&mut self, candidate: usize) {
        let cand = self.ctx.candidates[candidate];
        let consumed = &mut self.consumed_counters[cand.pool];
        for use_ in &cand.device().consumes_counters {
            if let Some(set) = consumed.get_mut(&use_.counter_set) {
                capacity::sub_from(set, &use_.counters);
            }
        }
    }
}
