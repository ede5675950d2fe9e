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
        if device.has_binding_conditions && !self.ctx.features.binding_conditions() {
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

    pub(super) fn eval_all(
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
}
