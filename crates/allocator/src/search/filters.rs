//! Filters on candidates: in use or not, class and request selectors
//! (CEL), per-device node selection, capacity.

use super::*;

impl Search<'_, '_> {
    pub(crate) fn in_use(&self, candidate: usize) -> bool {
        self.ctx.exclusive_in_use[candidate]
            || self
                .allocating
                .get(&candidate)
                .is_some_and(|c| !c.is_empty())
    }

    pub(super) fn allocating_for_claim(&self, candidate: usize, claim: usize) -> bool {
        self.allocating
            .get(&candidate)
            .is_some_and(|c| c.contains(&claim))
    }

    /// Class selectors, request selectors and per-device node selection.
    /// A CEL runtime error aborts the allocation, as upstream's does: the
    /// outcome then depends on whether the search met the device.
    pub(crate) fn selectable(
        &mut self,
        c: usize,
        r: usize,
        s: usize,
        candidate: usize,
    ) -> Result<bool, Stop> {
        self.selectable_filed_as(c, r, s, s, candidate)
    }

    /// [`selectable`](Self::selectable) for alternative `s`, with the
    /// result remembered under alternative `key` (upstream's off-by-one of
    /// 1.34 and 1.35, see `Rules::subrequest_checks_off_by_one`).
    pub(crate) fn selectable_filed_as(
        &mut self,
        c: usize,
        r: usize,
        s: usize,
        key: usize,
        candidate: usize,
    ) -> Result<bool, Stop> {
        if let Some(&known) = self.match_cache.get(&(c, r, key, candidate)) {
            return Ok(known);
        }
        let device = self.ctx.candidates[candidate].device();
        if device.has_binding_conditions && !self.ctx.features.binding_conditions() {
            return Ok(false);
        }
        let spec = self.spec(c, r, s);
        let matches =
            self.class_matches(c, spec, candidate)? && self.request_matches(c, spec, candidate)?;
        self.match_cache.insert((c, r, key, candidate), matches);
        Ok(matches)
    }

    pub(crate) fn class_matches(
        &mut self,
        _claim: usize,
        spec: &RequestSpec,
        candidate: usize,
    ) -> Result<bool, Stop> {
        let device = self.ctx.candidates[candidate].device();
        if device.has_binding_conditions && !self.ctx.features.binding_conditions() {
            return Ok(false);
        }
        let owner = format!(
            "class {}",
            spec.class.metadata.name.as_deref().unwrap_or("")
        );
        self.eval_all(&spec.class_selectors, candidate, &owner)
    }

    pub(crate) fn request_matches(
        &mut self,
        c: usize,
        spec: &RequestSpec,
        candidate: usize,
    ) -> Result<bool, Stop> {
        let owner = format!("claim {}", self.claims[c].label);
        if !self.eval_all(&spec.selectors, candidate, &owner)? {
            return Ok(false);
        }
        let cand = self.ctx.candidates[candidate];
        if !cand.slice.per_device {
            return Ok(true);
        }
        selection_matches(&cand.device().node, &self.ctx.node)
            .map_err(|e| Stop::Fatal(format!("device {}: {e}", cand.device().name)))
    }

    pub(super) fn eval_all(
        &mut self,
        selectors: &[std::sync::Arc<crate::cel::Selector>],
        candidate: usize,
        owner: &str,
    ) -> Result<bool, Stop> {
        let cand = self.ctx.candidates[candidate];
        let device = cand.device();
        let features = &self.ctx.features;
        let unconvertible = (features.rules().list_values_fail_cel_without_gate
            && !features.list_type_attributes)
            .then(|| list_valued_attribute(device))
            .flatten();
        for (i, selector) in selectors.iter().enumerate() {
            let answer = match &unconvertible {
                Some(name) => Err(format!("attribute {name}: unsupported attribute value")),
                None => selector.matches(device, features.rules().consumable_capacity_known),
            };
            match answer {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => {
                    return Err(Stop::Fatal(format!(
                        "{owner}: selector #{i} on device {}/{}/{}: CEL runtime error: {e}",
                        cand.slice.driver, cand.slice.pool, device.name
                    )));
                }
            }
        }
        Ok(true)
    }

    /// Whether the request's capacity fits the device on its own, ignoring
    /// shares already held or being allocated (consumable capacity only).
    pub(crate) fn capacity_ok_alone(
        &self,
        spec: &RequestSpec,
        candidate: usize,
    ) -> Result<bool, Stop> {
        self.capacity_fits(spec, candidate, false)
    }

    /// Whether a multi-allocation device already has capacity in use, by a
    /// held share or one being allocated.
    pub(crate) fn capacity_in_use(&self, candidate: usize) -> bool {
        self.ctx.shared[candidate].is_some() || self.allocating_capacity.contains_key(&candidate)
    }

    /// Whether the request's capacity fits the device (consumable capacity only).
    pub(crate) fn capacity_ok(&self, spec: &RequestSpec, candidate: usize) -> Result<bool, Stop> {
        self.capacity_fits(spec, candidate, true)
    }

    /// Whether the request's capacity fits the device, beside what is held
    /// and being allocated when `beside_others`; a request upstream aborts
    /// over stops the search.
    fn capacity_fits(
        &self,
        spec: &RequestSpec,
        candidate: usize,
        beside_others: bool,
    ) -> Result<bool, Stop> {
        if !self.ctx.features.consumable_capacity {
            return Ok(true);
        }
        let cand = self.ctx.candidates[candidate];
        let device = cand.device();
        let arithmetic = capacity::Arithmetic::of(&self.ctx.features);
        let consumed = capacity::consumption(device, &spec.capacity, arithmetic).map_err(|e| {
            Stop::Fatal(format!(
                "request {}, device {}/{}/{}: {e}",
                spec.full_name(),
                cand.slice.driver,
                cand.slice.pool,
                device.name
            ))
        })?;
        let Some(consumed) = consumed else {
            return Ok(false);
        };
        let (held, allocating) = if beside_others {
            (
                self.ctx.shared[candidate],
                self.allocating_capacity.get(&candidate),
            )
        } else {
            (None, None)
        };
        Ok(capacity::fits(
            device, &consumed, held, allocating, arithmetic,
        ))
    }
}

/// The first attribute of `device` (`domain/name`) with a list value.
fn list_valued_attribute(device: &crate::model::DeviceInfo) -> Option<String> {
    device.attributes.iter().find_map(|(domain, names)| {
        let (name, _) = names
            .iter()
            .find(|(_, v)| !v.is_scalar() && **v != crate::model::AttributeValue::Unset)?;
        Some(format!("{domain}/{name}"))
    })
}
