//! Device taints and request tolerations (`DRADeviceTaints`), matched as
//! pod taints and tolerations are: key, operator (`Equal`/`Exists`), value
//! and effect.

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
            !key.is_empty()
                && toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// Whether every taint is tolerated by some toleration.
pub(crate) fn all_tolerated(taints: &[DeviceTaint], tolerations: &[DeviceToleration]) -> bool {
    taints
        .iter()
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
        assert!(!all_tolerated(std::slice::from_ref(&t), &[]));
        assert!(all_tolerated(&[], &[]));
    }
}
