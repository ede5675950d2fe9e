//! Device taints and request tolerations (`DRADeviceTaints`), matched as
//! upstream's `resourceclaim.ToleratesTaint` does: effect, key, operator
//! (`Equal`, the default, compares values; `Exists` matches any value).
//! From 1.35 only the effects `NoSchedule` and `NoExecute` keep a device
//! from being allocated; `None` and unknown effects do not.

use k8s_openapi::api::resource::v1::{DeviceTaint, DeviceToleration};

/// Whether one toleration tolerates the taint.
pub(crate) fn tolerates(toleration: &DeviceToleration, taint: &DeviceTaint) -> bool {
    if toleration
        .effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
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
