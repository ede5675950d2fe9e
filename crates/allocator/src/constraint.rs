//! `matchAttribute` and `distinctAttribute` constraints, tracked while the
//! search adds and removes devices. Both are monotonic: once a device is
//! rejected, adding more devices never makes it acceptable.
//!
//! Up to 1.36 upstream's `distinctAttribute` keeps one value per request
//! (the last device added for it) and takes the first device of the claim
//! unchecked, so two devices of one request may repeat a value, and a
//! later request is compared only with each earlier request's last device;
//! 1.37 keeps every value. Both are followed (`per_request`).
//!
//! 1.34 (whose experimental allocator is the only one reading
//! `distinctAttribute`) compares the values' pointers, not the values: a
//! value repeats only when it is the same device's, a share of a device
//! taken twice, and two devices with equal values both pass
//! ([`Distinct::PerRequestSameDevice`]). 1.35 compares the values.
//!
//! With `DRAListTypeAttributes` (1.36+) values compare as sets, a scalar
//! being a set of one: `matchAttribute` wants the devices' sets to share
//! at least one element, `distinctAttribute` wants them pairwise
//! disjoint, and a value that is no set (none, or an empty list) is
//! refused. 1.36 narrows one running intersection that removing a device
//! does not widen again; 1.37 restores it (`Rules::match_sets_restored`).
//! Without the gate only scalars of one type compare: a list or a missing
//! value is refused except as a claim's first `matchAttribute` device
//! (or any first `distinctAttribute` one), as upstream's scalar switch.

use crate::model::{AttributeValue, DeviceInfo};
use crate::request::ConstraintSpec;

/// The running state of one constraint.
#[derive(Debug, Clone)]
pub(crate) struct ConstraintState {
    pub spec: ConstraintSpec,
    /// Values of the devices added so far, one per device, with the base
    /// request each came for (so that removal is last-in first-out).
    values: Vec<(String, AttributeValue)>,
    /// `distinctAttribute` as up to 1.36: one value per request, and a
    /// device count, as upstream's map and counter.
    per_request: Option<PerRequest>,
    /// 1.34: a held value repeats only for the device that it came from.
    same_device_only: bool,
    /// Set semantics (`DRAListTypeAttributes`).
    sets: Option<SetRules>,
}

/// How the set semantics of one release behave.
#[derive(Debug, Clone, Default)]
struct SetRules {
    /// Removing a device restores the intersection of those before (1.37).
    restored: bool,
    /// `matchAttribute`'s running intersections, the last the current one.
    intersections: Vec<ValueSet>,
}

/// The elements of a value as a set, by type (sets of different types
/// never meet).
#[derive(Debug, Clone, PartialEq)]
enum ValueSet {
    Ints(Vec<i64>),
    Bools(Vec<bool>),
    Strings(Vec<String>),
    Versions(Vec<crate::semver::Semver>),
}

impl ValueSet {
    /// The value as a set; `None` for no value or an empty list.
    fn of(value: &AttributeValue) -> Option<ValueSet> {
        let set = match value {
            AttributeValue::Int(i) => ValueSet::Ints(vec![*i]),
            AttributeValue::Bool(b) => ValueSet::Bools(vec![*b]),
            AttributeValue::String(s) => ValueSet::Strings(vec![s.clone()]),
            AttributeValue::Version(v) => ValueSet::Versions(vec![v.clone()]),
            AttributeValue::Ints(v) if !v.is_empty() => ValueSet::Ints(v.clone()),
            AttributeValue::Bools(v) if !v.is_empty() => ValueSet::Bools(v.clone()),
            AttributeValue::Strings(v) if !v.is_empty() => ValueSet::Strings(v.clone()),
            AttributeValue::Versions(v) if !v.is_empty() => ValueSet::Versions(v.clone()),
            _ => return None,
        };
        Some(set)
    }

    /// The common elements, or `None` when there are none.
    fn meet(&self, other: &ValueSet) -> Option<ValueSet> {
        fn common<T: PartialEq + Clone>(a: &[T], b: &[T]) -> Option<Vec<T>> {
            let both: Vec<T> = a.iter().filter(|x| b.contains(x)).cloned().collect();
            (!both.is_empty()).then_some(both)
        }
        match (self, other) {
            (ValueSet::Ints(a), ValueSet::Ints(b)) => common(a, b).map(ValueSet::Ints),
            (ValueSet::Bools(a), ValueSet::Bools(b)) => common(a, b).map(ValueSet::Bools),
            (ValueSet::Strings(a), ValueSet::Strings(b)) => common(a, b).map(ValueSet::Strings),
            (ValueSet::Versions(a), ValueSet::Versions(b)) => common(a, b).map(ValueSet::Versions),
            _ => None,
        }
    }
}

/// How a release's `distinctAttribute` keeps and compares values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Distinct {
    /// Every device's value, compared by value (1.37).
    EveryValue,
    /// One value per request, compared by value (1.35 and 1.36).
    PerRequest,
    /// One value per request, repeated only by the device it came from:
    /// upstream compares the values' pointers (1.34).
    PerRequestSameDevice,
}

/// Upstream's `distinctAttribute` state up to 1.36: per request, the last
/// device's identity (its candidate index) and value.
#[derive(Debug, Clone, Default)]
struct PerRequest {
    values: std::collections::BTreeMap<String, (usize, AttributeValue)>,
    devices: usize,
}

/// Why a device does not satisfy a constraint, for explanations.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Rejection {
    MissingAttribute,
    /// A value the constraint cannot compare (see the module doc).
    Incomparable {
        value: AttributeValue,
    },
    Differs {
        wanted: AttributeValue,
    },
    Repeats {
        value: AttributeValue,
    },
}

impl ConstraintState {
    /// `distinct`: how the release keeps `distinctAttribute` values
    /// ([`Distinct`]). `sets`: values compare as sets
    /// (`DRAListTypeAttributes`), `Some(restored)` as [`SetRules`].
    pub(crate) fn new(
        spec: ConstraintSpec,
        distinct: Distinct,
        sets: Option<bool>,
    ) -> ConstraintState {
        let per_request =
            (distinct != Distinct::EveryValue && spec.distinct).then(PerRequest::default);
        ConstraintState {
            spec,
            values: Vec::new(),
            per_request,
            same_device_only: distinct == Distinct::PerRequestSameDevice,
            sets: sets.map(|restored| SetRules {
                restored,
                intersections: Vec::new(),
            }),
        }
    }

    /// Whether the constraint covers devices of `base` (a request name) or
    /// `base/sub` (a subrequest).
    pub(crate) fn applies_to(&self, base: &str, sub: Option<&str>) -> bool {
        let names = &self.spec.requests;
        if names.is_empty() {
            return true;
        }
        names.iter().any(|n| {
            n == base
                || sub.is_some_and(|s| {
                    n.len() == base.len() + 1 + s.len() && *n == format!("{base}/{s}")
                })
        })
    }

    /// Checks a device without recording it; `id` tells devices apart
    /// (the candidate's index).
    pub(crate) fn check(&self, id: usize, device: &DeviceInfo) -> Result<(), Rejection> {
        let Some(value) = device.attribute(&self.spec.attribute) else {
            return Err(Rejection::MissingAttribute);
        };
        if let Some(state) = &self.per_request {
            if state.devices == 0 {
                return Ok(());
            }
            if self.same_device_only {
                if state.values.values().any(|(held, _)| *held == id) {
                    return Err(Rejection::Repeats {
                        value: value.clone(),
                    });
                }
                return Ok(());
            }
            return self.distinct(value, state.values.values().map(|(_, v)| v));
        }
        if self.spec.distinct {
            return self.distinct(value, self.values.iter().map(|(_, v)| v));
        }
        self.matching(value)
    }

    /// `distinctAttribute`: `value` against the values held.
    fn distinct<'v>(
        &self,
        value: &AttributeValue,
        mut held: impl Iterator<Item = &'v AttributeValue>,
    ) -> Result<(), Rejection> {
        let incomparable = || Rejection::Incomparable {
            value: value.clone(),
        };
        let repeats = |v: &AttributeValue| Rejection::Repeats { value: v.clone() };
        if self.sets.is_some() {
            let new = ValueSet::of(value).ok_or_else(incomparable)?;
            return match held.find(|v| ValueSet::of(v).is_some_and(|old| old.meet(&new).is_some()))
            {
                Some(v) => Err(repeats(v)),
                None => Ok(()),
            };
        }
        match held.next() {
            None => Ok(()),
            Some(_) if !value.is_scalar() => Err(incomparable()),
            Some(first) => match std::iter::once(first).chain(held).find(|v| *v == value) {
                Some(v) => Err(repeats(v)),
                None => Ok(()),
            },
        }
    }

    /// `matchAttribute`: `value` against the first device's value (or the
    /// running intersection).
    fn matching(&self, value: &AttributeValue) -> Result<(), Rejection> {
        let incomparable = || Rejection::Incomparable {
            value: value.clone(),
        };
        let first = self.values.first().map(|(_, v)| v);
        if let Some(sets) = &self.sets {
            let new = ValueSet::of(value).ok_or_else(incomparable)?;
            return match (first, sets.intersections.last()) {
                (Some(first), Some(current)) if current.meet(&new).is_none() => {
                    Err(Rejection::Differs {
                        wanted: first.clone(),
                    })
                }
                _ => Ok(()),
            };
        }
        match first {
            None => Ok(()),
            Some(_) if !value.is_scalar() => Err(incomparable()),
            Some(first) if first != value => Err(Rejection::Differs {
                wanted: first.clone(),
            }),
            Some(_) => Ok(()),
        }
    }

    /// Records device `id` of `request` (the base request) that passed
    /// [`check`](Self::check).
    pub(crate) fn add(&mut self, request: &str, id: usize, device: &DeviceInfo) {
        let Some(value) = device.attribute(&self.spec.attribute) else {
            return;
        };
        if let Some(state) = &mut self.per_request {
            state.values.insert(request.to_owned(), (id, value.clone()));
            state.devices += 1;
        }
        if let Some(sets) = &mut self.sets
            && !self.spec.distinct
            && let Some(new) = ValueSet::of(value)
        {
            let narrowed = match sets.intersections.last() {
                Some(current) if !self.values.is_empty() => current.meet(&new),
                _ => {
                    sets.intersections.clear();
                    Some(new)
                }
            };
            sets.intersections.extend(narrowed);
        }
        self.values.push((request.to_owned(), value.clone()));
    }

    /// Forgets the device added last (up to 1.36 `distinctAttribute`
    /// forgets its request's value, as upstream deletes the map entry).
    pub(crate) fn remove_last(&mut self) {
        let Some((request, _)) = self.values.pop() else {
            return;
        };
        if let Some(state) = &mut self.per_request {
            state.values.remove(&request);
            state.devices = state.devices.saturating_sub(1);
        }
        if let Some(sets) = &mut self.sets
            && sets.restored
        {
            sets.intersections.truncate(self.values.len());
        }
    }
}

/// A value as people read it.
pub(crate) fn show(value: &AttributeValue) -> String {
    fn list<T>(items: &[T], one: impl Fn(&T) -> String) -> String {
        let items: Vec<String> = items.iter().map(one).collect();
        format!("[{}]", items.join(", "))
    }
    let version = |v: &crate::semver::Semver| format!("{}.{}.{}", v.major, v.minor, v.patch);
    match value {
        AttributeValue::Int(i) => i.to_string(),
        AttributeValue::Bool(b) => b.to_string(),
        AttributeValue::String(s) => format!("{s:?}"),
        AttributeValue::Version(v) => version(v),
        AttributeValue::Ints(v) => list(v, i64::to_string),
        AttributeValue::Bools(v) => list(v, bool::to_string),
        AttributeValue::Strings(v) => list(v, |s| format!("{s:?}")),
        AttributeValue::Versions(v) => list(v, version),
        AttributeValue::Unset => "no value".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn device(root: Option<&str>) -> DeviceInfo {
        let mut attributes = BTreeMap::new();
        if let Some(root) = root {
            attributes.insert(
                "resource.kubernetes.io".to_owned(),
                BTreeMap::from([(
                    "pcieRoot".to_owned(),
                    AttributeValue::String(root.to_owned()),
                )]),
            );
        }
        let mut d = crate::model::test_device("x");
        d.attributes = attributes;
        d
    }

    fn spec(distinct: bool, requests: &[&str]) -> ConstraintSpec {
        ConstraintSpec {
            attribute: "resource.kubernetes.io/pcieRoot".into(),
            distinct,
            requests: requests.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn match_attribute_pins_the_first_value() {
        let mut c = ConstraintState::new(spec(false, &[]), Distinct::EveryValue, None);
        assert!(c.check(1, &device(Some("pci0000:00"))).is_ok());
        c.add("r", 2, &device(Some("pci0000:00")));
        assert!(c.check(3, &device(Some("pci0000:00"))).is_ok());
        assert!(matches!(
            c.check(4, &device(Some("pci0000:80"))),
            Err(Rejection::Differs { .. })
        ));
        assert_eq!(c.check(5, &device(None)), Err(Rejection::MissingAttribute));
        c.remove_last();
        assert!(c.check(6, &device(Some("pci0000:80"))).is_ok());
    }

    #[test]
    fn distinct_attribute_rejects_repeats() {
        let mut c = ConstraintState::new(spec(true, &[]), Distinct::EveryValue, None);
        c.add("r", 1, &device(Some("a")));
        assert!(c.check(2, &device(Some("b"))).is_ok());
        assert!(matches!(
            c.check(3, &device(Some("a"))),
            Err(Rejection::Repeats { .. })
        ));
    }

    /// Up to 1.36 (found by the oracle): one value per request, so a later
    /// request may repeat the value of an earlier request's first device.
    #[test]
    fn up_to_1_36_distinct_keeps_each_requests_last_value() {
        let mut c = ConstraintState::new(spec(true, &[]), Distinct::PerRequest, None);
        c.add("r1", 1, &device(Some("a")));
        assert!(c.check(2, &device(Some("b"))).is_ok());
        c.add("r1", 3, &device(Some("b")));
        assert!(
            c.check(4, &device(Some("a"))).is_ok(),
            "r1's 'a' was overwritten"
        );
        assert!(c.check(5, &device(Some("b"))).is_err());
        c.remove_last();
        assert!(c.check(6, &device(Some("b"))).is_ok(), "r1's entry is gone");
    }

    /// 1.34 (issue 36, found by the oracle): upstream compares the values'
    /// pointers, so only the device a held value came from repeats it.
    #[test]
    fn in_1_34_distinct_repeats_only_the_same_device() {
        let mut c = ConstraintState::new(spec(true, &[]), Distinct::PerRequestSameDevice, None);
        c.add("r1", 1, &device(Some("a")));
        assert!(c.check(2, &device(Some("a"))).is_ok(), "an equal value");
        assert!(matches!(
            c.check(1, &device(Some("a"))),
            Err(Rejection::Repeats { .. })
        ));
        c.add("r1", 2, &device(Some("a")));
        assert!(c.check(1, &device(Some("a"))).is_ok(), "r1 holds device 2");
        assert!(c.check(2, &device(Some("a"))).is_err());
        c.remove_last();
        assert!(c.check(2, &device(Some("a"))).is_ok(), "r1's entry is gone");
    }

    /// A device whose pcieRoot attribute is `value`.
    fn with(value: AttributeValue) -> DeviceInfo {
        let mut d = crate::model::test_device("x");
        d.attributes = BTreeMap::from([(
            "resource.kubernetes.io".to_owned(),
            BTreeMap::from([("pcieRoot".to_owned(), value)]),
        )]);
        d
    }

    fn strings(items: &[&str]) -> DeviceInfo {
        with(AttributeValue::Strings(
            items.iter().map(|s| s.to_string()).collect(),
        ))
    }

    #[test]
    fn with_lists_match_attribute_narrows_a_common_element() {
        let mut c = ConstraintState::new(spec(false, &[]), Distinct::EveryValue, Some(true));
        c.add("r", 1, &strings(&["a", "b", "c"]));
        c.add("r", 2, &strings(&["b", "c"]));
        // A scalar is a set of one; the intersection is now {b, c}.
        assert!(c.check(3, &device(Some("c"))).is_ok());
        assert!(matches!(
            c.check(4, &strings(&["a"])),
            Err(Rejection::Differs { .. })
        ));
        assert!(matches!(
            c.check(5, &with(AttributeValue::Ints(vec![1]))),
            Err(Rejection::Differs { .. })
        ));
        assert!(matches!(
            c.check(6, &with(AttributeValue::Unset)),
            Err(Rejection::Incomparable { .. })
        ));
        // 1.37: removing the second device widens the intersection again.
        c.remove_last();
        assert!(c.check(7, &strings(&["a"])).is_ok());
    }

    /// 1.36 narrows one intersection in place; removing a device keeps it.
    #[test]
    fn in_1_36_match_attribute_keeps_the_narrowed_intersection() {
        let mut c = ConstraintState::new(spec(false, &[]), Distinct::EveryValue, Some(false));
        c.add("r", 1, &strings(&["a", "b"]));
        c.add("r", 2, &strings(&["b"]));
        c.remove_last();
        assert!(c.check(3, &strings(&["a"])).is_err());
        // Until the set is empty: the next first device starts anew.
        c.remove_last();
        c.add("r", 4, &strings(&["a"]));
        assert!(c.check(5, &strings(&["a", "z"])).is_ok());
    }

    #[test]
    fn with_lists_distinct_attribute_wants_disjoint_sets() {
        let mut c = ConstraintState::new(spec(true, &[]), Distinct::EveryValue, Some(true));
        assert!(matches!(
            c.check(1, &strings(&[])),
            Err(Rejection::Incomparable { .. })
        ));
        c.add("r", 2, &strings(&["a", "b"]));
        assert!(c.check(3, &strings(&["c", "d"])).is_ok());
        assert!(matches!(
            c.check(4, &device(Some("b"))),
            Err(Rejection::Repeats { .. })
        ));
        // Sets of another type never meet.
        assert!(c.check(5, &with(AttributeValue::Ints(vec![1]))).is_ok());
    }

    /// Without the gate only scalars compare: a list is taken as the first
    /// device and refused after.
    #[test]
    fn without_lists_a_list_value_is_refused_after_the_first_device() {
        for distinct in [false, true] {
            let mut c = ConstraintState::new(spec(distinct, &[]), Distinct::EveryValue, None);
            assert!(c.check(1, &strings(&["a"])).is_ok(), "distinct {distinct}");
            c.add("r", 2, &strings(&["a"]));
            assert!(matches!(
                c.check(3, &strings(&["a"])),
                Err(Rejection::Incomparable { .. })
            ));
        }
    }

    #[test]
    fn request_scoping_includes_subrequests() {
        let c = ConstraintState::new(spec(false, &["gpu", "nic/big"]), Distinct::EveryValue, None);
        assert!(c.applies_to("gpu", None));
        assert!(c.applies_to("gpu", Some("any")));
        assert!(c.applies_to("nic", Some("big")));
        assert!(!c.applies_to("nic", Some("small")));
        assert!(!c.applies_to("nic", None));
    }
}
