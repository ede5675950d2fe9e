//! The names of a claim that become parts of paths, checked before
//! prepare writes anything. The claim's UID names its CDI spec and its
//! device-metadata directory on the host; its name, or the pod's name for
//! it (the `resource.kubernetes.io/pod-claim-name` annotation), and its
//! request names make the path where the metadata appears in the
//! container. The API server validates names, but not annotations, and a
//! `/` or `..` in any of them would place a file, or a bind mount,
//! outside the directory meant for it. A name that is not what the API
//! allows refuses the claim with a message naming it.

use dra_model::validate::format::{is_dns_label, is_dns_subdomain};
use k8s_openapi::api::resource::v1::ResourceClaim;

use super::ClaimRef;
use super::resolve::Scope;
use crate::metadata::POD_CLAIM_NAME;

/// A name that cannot go into a path.
#[derive(Debug, thiserror::Error)]
#[error(
    "claim {claim}: {what} {value:?} is not {rule}, and it would become part of a path ({used}); refusing to prepare the claim"
)]
pub struct BadName {
    /// `namespace/name` as the kubelet sent them.
    pub claim: String,
    /// Which name.
    pub what: String,
    /// Its value.
    pub value: String,
    /// What it must be.
    pub rule: &'static str,
    /// Where it is used.
    pub used: &'static str,
}

const SUBDOMAIN: &str = "a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253)";
const LABEL: &str = "a DNS label (lowercase letters, digits and '-', at most 63)";
const UID: &str = "a UID (letters, digits and '-', at most 128)";

fn is_uid(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// Checks every name of `claim` (as the kubelet named it, `object` as the
/// API server returned it) that a prepare turns into a path.
pub fn check(claim: &ClaimRef, object: &ResourceClaim, scope: &Scope) -> Result<(), BadName> {
    let bad = |what: String, value: &str, rule, used| BadName {
        claim: format!("{}/{}", claim.namespace, claim.name),
        what,
        value: value.to_string(),
        rule,
        used,
    };
    if !is_uid(&claim.uid) {
        let used = "the CDI spec's and the device metadata's file names";
        return Err(bad("UID".into(), &claim.uid, UID, used));
    }
    if !is_dns_label(&claim.namespace) {
        return Err(bad(
            "namespace".into(),
            &claim.namespace,
            LABEL,
            "messages only",
        ));
    }
    if !is_dns_subdomain(&claim.name) {
        let used = "the device metadata's path in the container";
        return Err(bad("name".into(), &claim.name, SUBDOMAIN, used));
    }
    let annotations = object.metadata.annotations.as_ref();
    if let Some(pod_name) = annotations.and_then(|a| a.get(POD_CLAIM_NAME))
        && !pod_name.is_empty()
        && !is_dns_subdomain(pod_name)
    {
        let what = format!("annotation {POD_CLAIM_NAME}");
        let used = "the device metadata's path in the container";
        return Err(bad(what, pod_name, SUBDOMAIN, used));
    }
    let results = (object.status.as_ref())
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref());
    for result in results.into_iter().flatten().filter(|r| scope.serves(r)) {
        // `a` or a subrequest `a/b`: each part a label.
        if !result.request.split('/').all(is_dns_label) || result.request.split('/').count() > 2 {
            let used = "the device metadata's file and path in the container";
            return Err(bad("request".into(), &result.request, LABEL, used));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fixtures::claim;

    const PF0: &str = "pf-0000-0c-00-0";

    fn scope() -> Scope {
        Scope {
            driver: "ainic.amd.com".into(),
            pool: "node-a".into(),
        }
    }

    fn kubelet_ref(namespace: &str, name: &str, uid: &str) -> ClaimRef {
        ClaimRef {
            namespace: namespace.into(),
            uid: uid.into(),
            name: name.into(),
        }
    }

    fn with_pod_claim_name(name: &str) -> ResourceClaim {
        let mut c = claim(
            "c",
            "u1",
            &[("nic", "ainic.amd.com", "node-a", PF0)],
            json!([]),
        );
        c.metadata.annotations = Some([(POD_CLAIM_NAME.to_string(), name.to_string())].into());
        c
    }

    #[test]
    fn names_that_are_path_parts_must_be_what_the_api_allows() {
        let ok = kubelet_ref("ns", "c", "0b6f5b52-3c3a-4c1e-9a43-2f6b0a4f1b77");
        for fine in ["nics", "nics.fast", ""] {
            check(&ok, &with_pod_claim_name(fine), &scope()).unwrap();
        }
        for (who, value) in [
            (kubelet_ref("ns", "c", "../../etc"), "UID"),
            (kubelet_ref("ns", "c", "u1/x"), "UID"),
            (kubelet_ref("../ns", "c", "u1"), "namespace"),
            (kubelet_ref("ns", "a/../../b", "u1"), "name"),
        ] {
            let error = check(&who, &with_pod_claim_name("nics"), &scope()).unwrap_err();
            assert_eq!(error.what, value, "{error}");
        }
        for evil in ["../../../../etc", "a/b", "..", "Nics"] {
            let error = check(&ok, &with_pod_claim_name(evil), &scope()).unwrap_err();
            assert!(
                error.to_string().contains(&format!(
                    "annotation resource.kubernetes.io/pod-claim-name {evil:?} is not a DNS subdomain"
                )),
                "{error}"
            );
        }
        let mut bad_request = with_pod_claim_name("nics");
        let results = bad_request
            .status
            .as_mut()
            .unwrap()
            .allocation
            .as_mut()
            .unwrap();
        results.devices.as_mut().unwrap().results.as_mut().unwrap()[0].request = "a/../b".into();
        let error = check(&ok, &bad_request, &scope()).unwrap_err();
        assert_eq!(error.what, "request", "{error}");
    }
}
