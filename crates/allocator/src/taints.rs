//! Device taints and request tolerations (`DRADeviceTaints`), matched as
//! upstream's `resourceclaim.ToleratesTaint` does: effect, key, operator
//! (`Equal`, the default, compares values; `Exists` matches any value).
//! From 1.35 only the effects `NoSchedule` and `NoExecute` keep a device
//! from being allocated; `None` and unknown effects do not.

use k8s_openapi::api::resource::v1::{DeviceTaint, DeviceToleration};

/// A toleration's or taint's fields, the same for devices and nodes.
pub(crate) struct Fields<'a> {
    pub key: &'a str,
    pub operator: &'a str,
    pub value: &'a str,
    pub effect: &'a str,
}

/// Whether a toleration with `t`'s fields tolerates a taint with
/// `taint`'s, as upstream's `ToleratesTaint` (core and resource alike):
/// same effect unless the toleration names none, same key unless it names
/// none, then `Exists`, or `Equal` (the default) with the same value.
pub(crate) fn matches(t: Fields<'_>, taint: Fields<'_>) -> bool {
    if !t.effect.is_empty() && t.effect != taint.effect {
        return false;
    }
    if !t.key.is_empty() && t.key != taint.key {
        return false;
    }
    match t.operator {
        "Exists" => true,
        "Equal" | "" => t.value == taint.value,
        _ => false,
    }
}

impl<'a> Fields<'a> {
    /// The fields as the API objects hold them (unset = empty).
    pub(crate) fn new(
        key: Option<&'a str>,
        operator: Option<&'a str>,
        value: Option<&'a str>,
        effect: Option<&'a str>,
    ) -> Self {
        Fields {
            key: key.unwrap_or(""),
            operator: operator.unwrap_or(""),
            value: value.unwrap_or(""),
            effect: effect.unwrap_or(""),
        }
    }
}

/// Whether one toleration tolerates the device taint.
pub(crate) fn tolerates(t: &DeviceToleration, taint: &DeviceTaint) -> bool {
    matches(
        Fields::new(
            t.key.as_deref(),
            t.operator.as_deref(),
            t.value.as_deref(),
            t.effect.as_deref(),
        ),
        Fields::new(
            Some(&taint.key),
            None,
            taint.value.as_deref(),
            Some(&taint.effect),
        ),
    )
}

/// Whether every taint that keeps the device from being allocated is
/// tolerated by some toleration; with `known_effects_only` (1.35+) only
/// `NoSchedule` and `NoExecute` taints do.
pub(crate) fn all_tolerated(
    taints: &[DeviceTaint],
    tolerations: &[DeviceToleration],
    known_effects_only: bool,
) -> bool {
    taints
        .iter()
        .filter(|t| !known_effects_only || matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
        .all(|taint| tolerations.iter().any(|t| tolerates(t, taint)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: &str) -> DeviceTaint {
        DeviceTaint {
            key: key.into(),
            value: Some(value.into()),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn toleration(key: &str, op: &str, value: &str, effect: &str) -> DeviceToleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        DeviceToleration {
            key: opt(key),
            operator: opt(op),
            value: opt(value),
            effect: opt(effect),
            toleration_seconds: None,
        }
    }

    #[test]
    fn tolerations_match_key_value_and_effect() {
        let t = taint("ainic.amd.com/unhealthy", "link-down", "NoSchedule");
        assert!(tolerates(
            &toleration("ainic.amd.com/unhealthy", "Equal", "link-down", ""),
            &t
        ));
        assert!(tolerates(
            &toleration("ainic.amd.com/unhealthy", "Exists", "", "NoSchedule"),
            &t
        ));
        assert!(
            tolerates(&toleration("", "Exists", "", ""), &t),
            "empty key with Exists tolerates all"
        );
        assert!(!tolerates(
            &toleration("ainic.amd.com/unhealthy", "Equal", "other", ""),
            &t
        ));
        assert!(!tolerates(
            &toleration("ainic.amd.com/unhealthy", "Exists", "", "NoExecute"),
            &t
        ));
        assert!(!all_tolerated(std::slice::from_ref(&t), &[], true));
        assert!(all_tolerated(&[], &[], false));
        let none = taint("k", "v", "None");
        assert!(
            all_tolerated(std::slice::from_ref(&none), &[], true),
            "1.35+: None does not block"
        );
        assert!(
            !all_tolerated(&[none], &[], false),
            "1.34: every taint must be tolerated"
        );
    }
}
