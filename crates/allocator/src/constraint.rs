//! `matchAttribute` and `distinctAttribute` constraints, tracked while the
//! search adds and removes devices. Both are monotonic: once a device is
//! rejected, adding more devices never makes it acceptable.
//!
//! Up to 1.36 upstream's `distinctAttribute` keeps one value per request
//! (the last device added for it) and takes the first device of the claim
//! unchecked, so two devices of one request may repeat a value, and a
//! later request is compared only with each earlier request's last device;
//! 1.37 keeps every value. Both are followed (`per_request`).

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
}

/// Upstream's `distinctAttribute` state up to 1.36.
#[derive(Debug, Clone, Default)]
struct PerRequest {
    values: std::collections::BTreeMap<String, AttributeValue>,
    devices: usize,
}

/// Why a device does not satisfy a constraint, for explanations.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Rejection {
    MissingAttribute,
    Differs { wanted: AttributeValue },
    Repeats { value: AttributeValue },
}

impl ConstraintState {
    /// `per_request`: the release keeps one `distinctAttribute` value per
    /// request (up to 1.36).
    pub fn new(spec: ConstraintSpec, per_request: bool) -> ConstraintState {
        let per_request = (per_request && spec.distinct).then(PerRequest::default);
        ConstraintState {
            spec,
            values: Vec::new(),
            per_request,
        }
    }

    /// Whether the constraint covers devices of `base` (a request name) or
    /// `base/sub` (a subrequest).
    pub fn applies_to(&self, base: &str, sub: Option<&str>) -> bool {
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

    /// Checks a device without recording it.
    pub fn check(&self, device: &DeviceInfo) -> Result<(), Rejection> {
        let Some(value) = device.attribute(&self.spec.attribute) else {
            return Err(Rejection::MissingAttribute);
        };
        if let Some(state) = &self.per_request {
            if state.devices == 0 {
                return Ok(());
            }
            return match state.values.values().find(|v| *v == value) {
                Some(v) => Err(Rejection::Repeats { value: v.clone() }),
                None => Ok(()),
            };
        }
        if self.spec.distinct {
            return match self.values.iter().map(|(_, v)| v).find(|v| *v == value) {
                Some(v) => Err(Rejection::Repeats { value: v.clone() }),
                None => Ok(()),
            };
        }
        match self.values.first() {
            Some((_, first)) if first != value => Err(Rejection::Differs {
                wanted: first.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Records a device of `request` (the base request) that passed
    /// [`check`](Self::check).
    pub fn add(&mut self, request: &str, device: &DeviceInfo) {
        let Some(value) = device.attribute(&self.spec.attribute) else {
            return;
        };
        if let Some(state) = &mut self.per_request {
            state.values.insert(request.to_owned(), value.clone());
            state.devices += 1;
        }
        self.values.push((request.to_owned(), value.clone()));
    }

    /// Forgets the device added last (up to 1.36 `distinctAttribute`
    /// forgets its request's value, as upstream deletes the map entry).
    pub fn remove_last(&mut self) {
        let Some((request, _)) = self.values.pop() else {
            return;
        };
        if let Some(state) = &mut self.per_request {
            state.values.remove(&request);
            state.devices = state.devices.saturating_sub(1);
        }
    }
}

/// A value as people read it.
pub(crate) fn show(value: &AttributeValue) -> String {
    match value {
        AttributeValue::Int(i) => i.to_string(),
        AttributeValue::Bool(b) => b.to_string(),
        AttributeValue::String(s) => format!("{s:?}"),
        AttributeValue::Version(v) => format!("{}.{}.{}", v.major, v.minor, v.patch),
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
        let mut c = ConstraintState::new(spec(false, &[]), false);
        assert!(c.check(&device(Some("pci0000:00"))).is_ok());
        c.add("r", &device(Some("pci0000:00")));
        assert!(c.check(&device(Some("pci0000:00"))).is_ok());
        assert!(matches!(
            c.check(&device(Some("pci0000:80"))),
            Err(Rejection::Differs { .. })
        ));
        assert_eq!(c.check(&device(None)), Err(Rejection::MissingAttribute));
        c.remove_last();
        assert!(c.check(&device(Some("pci0000:80"))).is_ok());
    }

    #[test]
    fn distinct_attribute_rejects_repeats() {
        let mut c = ConstraintState::new(spec(true, &[]), false);
        c.add("r", &device(Some("a")));
        assert!(c.check(&device(Some("b"))).is_ok());
        assert!(matches!(
            c.check(&device(Some("a"))),
            Err(Rejection::Repeats { .. })
        ));
    }

    /// Up to 1.36 (found by the oracle): one value per request, so a later
    /// request may repeat the value of an earlier request's first device.
    #[test]
    fn up_to_1_36_distinct_keeps_each_requests_last_value() {
        let mut c = ConstraintState::new(spec(true, &[]), true);
        c.add("r1", &device(Some("a")));
        assert!(c.check(&device(Some("b"))).is_ok());
        c.add("r1", &device(Some("b")));
        assert!(
            c.check(&device(Some("a"))).is_ok(),
            "r1's 'a' was overwritten"
        );
        assert!(c.check(&device(Some("b"))).is_err());
        c.remove_last();
        assert!(c.check(&device(Some("b"))).is_ok(), "r1's entry is gone");
    }

    #[test]
    fn request_scoping_includes_subrequests() {
        let c = ConstraintState::new(spec(false, &["gpu", "nic/big"]), false);
        assert!(c.applies_to("gpu", None));
        assert!(c.applies_to("gpu", Some("any")));
        assert!(c.applies_to("nic", Some("big")));
        assert!(!c.applies_to("nic", Some("small")));
        assert!(!c.applies_to("nic", None));
    }
}
