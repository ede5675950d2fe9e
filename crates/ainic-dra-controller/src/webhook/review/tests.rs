use super::*;

const D: &str = "ainic.amd.com";

fn request(kind: &str, object: Value) -> AdmissionRequest {
    serde_json::from_value(json!({
        "uid": "u-1",
        "kind": {"group": "resource.k8s.io", "version": "v1", "kind": kind},
        "name": object.pointer("/metadata/name").cloned().unwrap_or(json!("")),
        "namespace": "team",
        "operation": "CREATE",
        "object": object,
    }))
    .unwrap()
}

fn bad_claim_spec() -> Value {
    json!({"devices": {
        "requests": [{"name": "nic", "exactly": {"deviceClassName": "ainic-pf"}}],
        "config": [{"opaque": {"driver": D, "parameters":
            {"apiVersion": "ainic.amd.com/v1alpha1", "kind": "NicConfig", "umad": true}}}],
    }})
}

fn pf_class() -> DeviceClass {
    serde_json::from_value(
        json!({"metadata": {"name": "ainic-pf"}, "spec": {"selectors": [
        {"cel": {"expression": "device.driver == \"ainic.amd.com\""}}]}}),
    )
    .unwrap()
}

#[test]
fn a_claim_is_refused_with_the_agents_message_and_its_name() {
    let r = request(
        "ResourceClaim",
        json!({"metadata": {"name": "c1"}, "spec": bad_claim_spec()}),
    );
    let subject = subject(&r).unwrap();
    assert_eq!(classes_needed(&subject), ["ainic-pf"]);
    let Verdict::Denied(message) = judge(&subject, D, &[pf_class()]) else {
        panic!("admitted");
    };
    assert!(
        message.starts_with(
            "claim team/c1: FromClaim config for request \"nic\" sets umad: true, which only the DeviceClass may grant"
        ),
        "{message}"
    );
    let answer = response("u-1", &Verdict::Denied(message.clone()));
    assert_eq!(answer["response"]["uid"], "u-1");
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["message"], message.as_str());
    assert_eq!(answer["apiVersion"], REVIEW_VERSION);
}

#[test]
fn templates_and_generated_names_are_named() {
    let r = request(
        "ResourceClaimTemplate",
        json!({"metadata": {"name": "t1"}, "spec": {"spec": bad_claim_spec()}}),
    );
    let Verdict::Denied(message) = judge(&subject(&r).unwrap(), D, &[pf_class()]) else {
        panic!("admitted");
    };
    assert!(
        message.starts_with("ResourceClaimTemplate team/t1: FromClaim"),
        "{message}"
    );
    let r = request(
        "ResourceClaim",
        json!({"metadata": {"generateName": "pod-nic-"}, "spec": bad_claim_spec()}),
    );
    let Verdict::Denied(message) = judge(&subject(&r).unwrap(), D, &[pf_class()]) else {
        panic!("admitted");
    };
    assert!(message.starts_with("claim team/pod-nic-: "), "{message}");
}

#[test]
fn a_class_is_judged_alone_and_other_kinds_pass() {
    let class = json!({"metadata": {"name": "bad"}, "spec": {"config": [{"opaque": {"driver": D,
        "parameters": {"apiVersion": "ainic.amd.com/v1alpha1", "kind": "NicConfig", "mode": "sriov"}}}]}});
    let r = request("DeviceClass", class);
    let Verdict::Denied(message) = judge(&subject(&r).unwrap(), D, &[]) else {
        panic!("admitted");
    };
    assert!(
        message.starts_with("DeviceClass bad: invalid NicConfig in FromClass config for every request of the class: unknown variant `sriov`"),
        "{message}"
    );
    let pod = request("Pod", json!({"metadata": {"name": "p"}}));
    assert_eq!(
        judge(&subject(&pod).unwrap(), D, &[]),
        Verdict::Allowed(vec![])
    );
    let mut deleted = request("ResourceClaim", json!({}));
    deleted.object = None;
    assert!(matches!(subject(&deleted).unwrap(), Subject::Other));
}

#[test]
fn warnings_travel_with_an_admission() {
    let answer = response("u", &Verdict::Allowed(vec!["cannot read class x".into()]));
    assert_eq!(answer["response"]["warnings"][0], "cannot read class x");
    assert_eq!(answer["response"]["allowed"], true);
}
