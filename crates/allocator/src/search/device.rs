//! Taking one candidate for a request: availability, counters, taints,
//! constraints and capacity, recorded so that backtracking can undo it.

use super::*;

impl Search<'_, '_> {
    /// Checks availability, counters, taints, constraints and capacity of one
    /// selectable candidate, and records it as allocated to the request.
    /// `nth` is the position of the device within its request.
    pub(super) fn allocate_device(
        &mut self,
        c: usize,
        r: usize,
        s: usize,
        candidate: usize,
        nth: usize,
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
        if !device.consumes_counters.is_empty() && !features.partitionable_devices {
            return Ok(None);
        }
        // A further share of a device already in use draws no counters.
        let skip =
            multi && features.rules().shares_skip_counters && self.capacity_in_use(candidate);
        let consumes = !device.consumes_counters.is_empty() && !skip;
        if consumes && !self.take_counters(candidate) {
            return Ok(None);
        }
        let mut undo = Undo {
            claim: c,
            candidate,
            constraints: Vec::new(),
            exclusive: false,
            capacity: None,
            capacity_existed: false,
            counters: consumes,
            pushed: false,
        };
        let known_effects_only = features.release.taint_effect_none();
        let leak = features.rules().counters_leak_on_rejection;
        if features.device_taints
            && !all_tolerated(&device.taints, &spec.tolerations, known_effects_only)
        {
            undo.counters &= !leak;
            self.undo(undo);
            return Ok(None);
        }
        let Some(undo) = self.constrain(c, spec, candidate, must, undo, leak)? else {
            return Ok(None);
        };
        let (mut undo, consumed) = if features.consumable_capacity {
            match self.take_capacity(c, spec, candidate, nth, undo, leak) {
                Some(taken) => taken,
                None => return Ok(None),
            }
        } else {
            (undo, None)
        };
        if !multi {
            self.allocating.entry(candidate).or_default().push(c);
            undo.exclusive = true;
        } else if features.rules().share_counters_leak_on_backtrack {
            undo.counters = false;
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

    /// Adds `candidate` to the claim's constraints that apply to its
    /// request, recorded in `undo`; `None` (after undoing) when one
    /// refuses it, an error when the device had to be taken (`must`).
    fn constrain(
        &mut self,
        c: usize,
        spec: &RequestSpec,
        candidate: usize,
        must: bool,
        mut undo: Undo,
        leak: bool,
    ) -> Result<Option<Undo>, Stop> {
        let cand = self.ctx.candidates[candidate];
        let device = cand.device();
        let sub_name = spec.parent.as_ref().map(|_| spec.name.as_str());
        for (i, constraint) in self.constraints[c].iter_mut().enumerate() {
            if !constraint.applies_to(spec.base_name(), sub_name) {
                continue;
            }
            if constraint.check(candidate, device).is_err() {
                undo.counters &= !leak;
                self.undo(undo);
                if must {
                    return Err(Stop::Fatal(format!(
                        "claim {}, request {}: cannot add device {}/{}/{} because a claim constraint would not be satisfied",
                        self.claims[c].label,
                        spec.full_name(),
                        cand.slice.driver,
                        cand.slice.pool,
                        device.name
                    )));
                }
                return Ok(None);
            }
            constraint.add(spec.base_name(), candidate, device);
            undo.constraints.push(i);
        }
        Ok(Some(undo))
    }

    /// Takes the capacity `spec` asks of `candidate` (device `nth` of its
    /// request), recorded in `undo`; what a shared device gave, or `None`
    /// (after undoing) when it does not fit.
    fn take_capacity(
        &mut self,
        c: usize,
        spec: &RequestSpec,
        candidate: usize,
        nth: usize,
        mut undo: Undo,
        leak: bool,
    ) -> Option<(Undo, Option<Consumption>)> {
        let features = self.ctx.features;
        let device = self.ctx.candidates[candidate].device();
        let multi = features.consumable_capacity && device.allow_multiple_allocations;
        let arithmetic = crate::capacity::Arithmetic::of(&features);
        // Both were checked when the device was found selectable, so an
        // abort cannot come from here.
        let checked = self.capacity_checked_device(candidate, nth);
        let fits = checked.is_some_and(|k| {
            let other = self.ctx.candidates[k].device();
            capacity::consumption(other, &spec.capacity, arithmetic)
                .ok()
                .flatten()
                .is_some_and(|amount| {
                    capacity::fits(
                        other,
                        &amount,
                        self.ctx.shared[k],
                        self.allocating_capacity.get(&k),
                        arithmetic,
                    )
                })
        });
        let amount = capacity::consumption(device, &spec.capacity, arithmetic)
            .ok()
            .flatten();
        let Some(amount) = amount.filter(|_| fits) else {
            undo.counters &= !leak;
            if leak {
                // Up to 1.35 upstream returns from this check without
                // rolling back: the constraint values stay recorded and
                // an exclusive device stays marked in use.
                undo.constraints.clear();
            }
            self.undo(undo);
            if leak && !multi {
                self.allocating.entry(candidate).or_default().push(c);
            }
            return None;
        };
        if multi {
            undo.capacity_existed = self.allocating_capacity.contains_key(&candidate);
            capacity::add_into(
                self.allocating_capacity.entry(candidate).or_default(),
                &amount,
            );
            undo.capacity = Some(amount.clone());
            return Some((undo, Some(amount)));
        }
        Some((undo, None))
    }

    /// The candidate whose capacity is checked when taking `candidate` as
    /// device `nth` of its request: itself, or in 1.34 the device of the
    /// same slice at position `nth` (none when the slice has fewer devices:
    /// upstream fails there).
    fn capacity_checked_device(&self, candidate: usize, nth: usize) -> Option<usize> {
        if !self.ctx.features.rules().capacity_recheck_by_position {
            return Some(candidate);
        }
        let cand = self.ctx.candidates[candidate];
        (nth < cand.slice.devices.len()).then(|| candidate - cand.index + nth)
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
        if let Some(amount) = &undo.capacity {
            // The entry itself says "capacity in use" (a further share
            // skips counters): drop it with the share that made it.
            if !undo.capacity_existed {
                self.allocating_capacity.remove(&undo.candidate);
            } else if let Some(total) = self.allocating_capacity.get_mut(&undo.candidate) {
                capacity::sub_from(total, amount);
            }
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
        let pool = &self.ctx.pools[cand.pool];
        let available = &pool.counters;
        let consumed = &mut self.consumed_counters[cand.pool];
        for use_ in &cand.device().consumes_counters {
            let key = pool.counter_key(cand.slice, &use_.counter_set);
            let set = consumed.entry(key).or_default();
            capacity::add_into(set, &use_.counters);
        }
        // With counters per slice (1.34), upstream checks only the sets of
        // the device's own slice: another slice's overdrawn set (held
        // devices can overdraw) does not stop this device.
        let own_prefix = format!("{}\u{0}", cand.slice.name);
        let fits = available
            .iter()
            .filter(|(name, _)| !pool.counters_per_slice || name.starts_with(&own_prefix))
            .all(|(name, counters)| {
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
        let pool = &self.ctx.pools[cand.pool];
        let consumed = &mut self.consumed_counters[cand.pool];
        for use_ in &cand.device().consumes_counters {
            if let Some(set) = consumed.get_mut(&pool.counter_key(cand.slice, &use_.counter_set)) {
                capacity::sub_from(set, &use_.counters);
            }
        }
    }
}
