//! Issue 33 item 1: the admission webhook and prepare give the same
//! verdict, with the same message, on a table of good and bad NicConfigs
//! (`nicconfig_cases`).
//!
//! Admission: the webhook's own path (`ainic_dra_controller::webhook::review`) on
//! an AdmissionReview of a ResourceClaim, of a ResourceClaimTemplate
//! with the same spec, and of the DeviceClass it names. Prepare: the
//! allocator and the agent's prepare planning (see `nicconfig_cases`).
//! The testbed's `nicconfig` test runs the same table through the real
//! API server and controller.

mod nicconfig_cases;

use ainic_dra_controller::webhook::review::{self, Verdict};
use k8s_openapi::api::resource::v1::DeviceClass;
use nicconfig_cases::{D, cases, claim_spec, classes, prepare, world};
use serde_json::{Value, json};

/// The webhook's verdict on `object` of `kind`.
fn admit(kind: &str, object: Value, classes: &[DeviceClass]) -> Verdict {
    let review: review::AdmissionReview = serde_json::from_value(json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "r", "kind": {"group": "resource.k8s.io", "version": "v1", "kind": kind},
                    "namespace": "team", "name": object["metadata"]["name"], "operation": "CREATE",
                    "object": object}}))
    .unwrap();
    let subject = review::subject(review.request.as_ref().unwrap()).unwrap();
    let needed = review::classes_needed(&subject);
    let known: Vec<DeviceClass> = (classes.iter())
        .filter(|c| needed.contains(c.metadata.name.as_ref().unwrap()))
        .cloned()
        .collect();
    review::judge(&subject, D, &known)
}

#[test]
fn admission_and_prepare_give_the_same_verdict_and_message() {
    let world = world();
    let rows = cases();
    assert!(rows.len() >= 40, "{} cases", rows.len());
    let (mut admitted, mut refused) = (0, 0);
    for case in &rows {
        let classes = classes(case, "case");
        let claim = json!({"metadata": {"name": "c"}, "spec": claim_spec(case, "case")});
        let at_admission = match admit("ResourceClaim", claim, &classes) {
            Verdict::Allowed(_) => Ok(()),
            Verdict::Denied(message) => Err(message),
        };
        let at_prepare = prepare(case, "case", "team", "c", &world);
        assert_eq!(
            at_admission, at_prepare,
            "{}: admission (left) and prepare (right) differ",
            case.name
        );
        // A template of the same claim gets the same verdict.
        let template =
            json!({"metadata": {"name": "t"}, "spec": {"spec": claim_spec(case, "case")}});
        let as_template = admit("ResourceClaimTemplate", template, &classes);
        assert_eq!(
            matches!(as_template, Verdict::Allowed(_)),
            at_prepare.is_ok(),
            "{}: template {as_template:?}",
            case.name
        );
        // A class the webhook refuses never prepares.
        let class = serde_json::to_value(&classes[0]).unwrap();
        if let Verdict::Denied(message) = admit("DeviceClass", class, &[]) {
            assert!(
                at_prepare.is_err(),
                "{}: class refused ({message}), prepare admits",
                case.name
            );
        }
        match at_prepare {
            Ok(()) => admitted += 1,
            Err(message) => {
                assert!(message.starts_with("claim team/c: "), "{message}");
                refused += 1;
            }
        }
    }
    eprintln!(
        "{} NicConfig cases: {admitted} admitted and {refused} refused by both admission and prepare, with the same message",
        rows.len()
    );
    assert!(
        admitted >= 15 && refused >= 25,
        "{admitted} admitted, {refused} refused"
    );
}
