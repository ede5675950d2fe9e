//! A pod's claims as the scheduler's DynamicResources plugin finds them
//! before it looks at any node: PreEnqueue (every claim exists, a
//! template's claim was made for this pod) and PreFilter (every class an
//! unallocated claim names exists), with the plugin's own messages.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim};
use serde::Serialize;

/// Where the scheduler stops before the nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Stage {
    /// The pod is not even tried: it waits in the queue, and the scheduler
    /// writes no condition or event for it.
    PreEnqueue,
    /// Tried and refused for every node at once.
    PreFilter,
}

/// The scheduler stops before the nodes: where, and its words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Blocked {
    /// Where.
    pub stage: Stage,
    /// The scheduler's message.
    pub words: String,
    /// The pod's claim entry (or `request` of a claim) concerned.
    pub entry: Option<String>,
}

/// The pod's claims that exist: allocated (`held`) or to allocate.
#[derive(Clone, Debug, Default)]
pub(crate) struct PodClaims {
    /// Claims with an allocation, kept as they are.
    pub held: Vec<ResourceClaim>,
    /// Claims the scheduler must allocate with the pod.
    pub pending: Vec<ResourceClaim>,
}

/// Finds `pod`'s claims among `claims` (those of its namespace), and
/// checks the classes of those to allocate against `classes`.
pub(crate) fn resolve(
    pod: &Pod,
    claims: &[ResourceClaim],
    classes: &[DeviceClass],
) -> Result<PodClaims, Blocked> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let statuses = (pod.status.as_ref()).and_then(|s| s.resource_claim_statuses.clone());
    let statuses = statuses.unwrap_or_default();
    let blocked = |words: String, entry: &str| Blocked {
        stage: Stage::PreEnqueue,
        words,
        entry: Some(entry.to_string()),
    };
    let mut out = PodClaims::default();
    let entries = (pod.spec.as_ref()).and_then(|s| s.resource_claims.clone());
    for entry in entries.unwrap_or_default() {
        let (name, generated) = match (
            &entry.resource_claim_name,
            &entry.resource_claim_template_name,
        ) {
            (Some(name), _) => (name.clone(), false),
            (None, Some(_)) => match statuses.iter().find(|s| s.name == entry.name) {
                Some(status) => match &status.resource_claim_name {
                    Some(name) => (name.clone(), true),
                    None => continue,
                },
                None => {
                    let words =
                        format!("pod \"{namespace}/{pod_name}\": ResourceClaim not created yet");
                    return Err(blocked(words, &entry.name));
                }
            },
            (None, None) => {
                let words = format!(
                    "pod \"{namespace}/{pod_name}\", spec.resourceClaim {:?}: none of the supported fields are set",
                    entry.name
                );
                return Err(blocked(words, &entry.name));
            }
        };
        let found = claims.iter().find(|c| {
            c.metadata.name.as_deref() == Some(&name)
                && c.metadata.namespace.as_deref() == Some(&namespace)
        });
        let Some(claim) = found else {
            let words = format!("could not find ResourceClaim \"{namespace}/{name}\"");
            return Err(blocked(words, &entry.name));
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(blocked(
                format!("resourceclaim {name:?} is being deleted"),
                &entry.name,
            ));
        }
        if generated && !owned_by(claim, pod) {
            let words = format!(
                "ResourceClaim {namespace}/{name} was not created for Pod {namespace}/{pod_name} (Pod is not owner)"
            );
            return Err(blocked(words, &entry.name));
        }
        if claim
            .status
            .as_ref()
            .is_some_and(|s| s.allocation.is_some())
        {
            out.held.push(claim.clone());
        } else {
            check_classes(claim, classes)?;
            out.pending.push(claim.clone());
        }
    }
    Ok(out)
}

/// Whether the pod is the claim's controller (a claim made from the pod's
/// template).
fn owned_by(claim: &ResourceClaim, pod: &Pod) -> bool {
    let uid = pod.metadata.uid.as_deref();
    (claim.metadata.owner_references.iter().flatten())
        .any(|o| o.controller == Some(true) && Some(o.uid.as_str()) == uid)
}

/// Every class an unallocated claim names exists (PreFilter).
fn check_classes(claim: &ResourceClaim, classes: &[DeviceClass]) -> Result<(), Blocked> {
    let spec = claim.spec.clone().unwrap_or_default();
    let exists = |name: &str| {
        classes
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(name))
    };
    for target in dra_model::admission::targets(&spec) {
        if !exists(&target.class) {
            return Err(Blocked {
                stage: Stage::PreFilter,
                words: format!(
                    "request {}: device class {} does not exist",
                    target.request, target.class
                ),
                entry: Some(target.request),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(entries: serde_json::Value, statuses: serde_json::Value) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"containers": [], "resourceClaims": entries},
            "status": {"resourceClaimStatuses": statuses}}),
        )
        .unwrap()
    }

    fn claim(name: &str, class: &str, owner: Option<&str>, allocated: bool) -> ResourceClaim {
        let mut v = json!({"metadata": {"name": name, "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": class}}]}}});
        if let Some(uid) = owner {
            v["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod",
                "name": "p", "uid": uid, "controller": true}]);
        }
        if allocated {
            v["status"] = json!({"allocation": {"devices": {"results": []}}});
        }
        serde_json::from_value(v).unwrap()
    }

    fn class(name: &str) -> DeviceClass {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {}})).unwrap()
    }

    #[test]
    fn missing_claims_hold_the_pod_before_the_queue_with_the_plugins_words() {
        let p = pod(
            json!([{"name": "nic", "resourceClaimTemplateName": "t"}]),
            json!([]),
        );
        let b = resolve(&p, &[], &[]).unwrap_err();
        assert_eq!(
            (b.stage, b.words.as_str()),
            (
                Stage::PreEnqueue,
                "pod \"ns/p\": ResourceClaim not created yet"
            )
        );
        let p = pod(
            json!([{"name": "nic", "resourceClaimName": "c"}]),
            json!([]),
        );
        let b = resolve(&p, &[], &[]).unwrap_err();
        assert_eq!(b.words, "could not find ResourceClaim \"ns/c\"");
        // Generated for another pod.
        let p = pod(
            json!([{"name": "nic", "resourceClaimTemplateName": "t"}]),
            json!([{"name": "nic", "resourceClaimName": "p-nic-x"}]),
        );
        let b = resolve(
            &p,
            &[claim("p-nic-x", "c", Some("other"), false)],
            &[class("c")],
        )
        .unwrap_err();
        assert!(b.words.ends_with("(Pod is not owner)"), "{}", b.words);
    }

    #[test]
    fn a_missing_class_fails_prefilter_and_allocated_claims_are_held() {
        let p = pod(
            json!([{"name": "a", "resourceClaimName": "held"}, {"name": "b", "resourceClaimName": "new"}]),
            json!([]),
        );
        let claims = [
            claim("held", "gone", None, true),
            claim("new", "nope", None, false),
        ];
        let b = resolve(&p, &claims, &[]).unwrap_err();
        assert_eq!(
            (b.stage, b.words.as_str()),
            (
                Stage::PreFilter,
                "request nic: device class nope does not exist"
            )
        );
        let ok = resolve(&p, &claims, &[class("nope")]).unwrap();
        assert_eq!((ok.held.len(), ok.pending.len()), (1, 1));
    }
}
