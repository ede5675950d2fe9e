//! `matchAttribute` and `distinctAttribute` constraints, tracked while the
//! search adds and removes devices. Both are monotonic: once a device is
//! rejected, adding more devices never makes it acceptable.

use crate::model::{AttributeValue, DeviceInfo};
use crate::request::ConstraintSpec;

/// The running state of one constraint.
#[derive(Debug, Clone)]
pub(crate) struct ConstraintState {
    pub spec: ConstraintSpec,
    /// Values of the devices added so far (one per device).
    values: Vec<AttributeValue>,
}

/// Why a device does not satisfy a constraint, for explanations.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Rejection {
    MissingAttribute,
    Differs { wanted: AttributeValue },
    Repeats { value: AttributeValue },
}

impl ConstraintState {
    pub fn new(spec: ConstraintSpec) -> ConstraintState {
        ConstraintState {
            spec,
            values: Vec::new(),
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
        if self.spec.distinct {
            return match self.values.iter().find(|v| *v == value) {
                Some(v) => Err(Rejection::Repeats { value: v.clone() }),
                None => Ok(()),
            };
        }
        match self.values.first() {
            Some(first) if first != value => Err(Rejection::Differs {
                wanted: first.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Records a device that passed [`check`](Self::check).
    pub fn add(&mut self, device: &DeviceInfo) {
        if let Some(value) = device.attribute(&self.spec.attribute) {
            self.values.push(value.clone());
        }
    }

    /// Forgets the device added last.
    pub fn remove_last(&mut self) {
        self.values.pop();
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
        let mut c = ConstraintState::new(spec(false, &[]));
        assert!(c.check(&device(Some("pci0000:00"))).is_ok());
        c.add(&device(Some("pci0000:00")));
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
        let mut c = ConstraintState::new(spec(true, &[]));
        c.add(&device(Some("a")));
        assert!(c.check(&device(Some("b"))).is_ok());
        assert!(matches!(
            c.check(&device(Some("a"))),
            Err(Rejection::Repeats { .. })
        ));
    }

    #[test]
    fn request_scoping_includes_subrequests() {
        let c = ConstraintState::new(spec(false, &["gpu", "nic/big"]));
        assert!(c.applies_to("gpu", None));
        assert!(c.applies_to("gpu", Some("any")));
        assert!(c.applies_to("nic", Some("big")));
        assert!(!c.applies_to("nic", Some("small")));
        assert!(!c.applies_to("nic", None));
    }
}
