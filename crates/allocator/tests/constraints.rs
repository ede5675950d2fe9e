//! Constraints across requests, backtracking, several claims at once and
//! `firstAvailable`, after upstream's allocator behaviours.

mod common;

use allocator::{AllocateError, Features, InputError, NodeFacts, Release};
use common::*;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceSlice};
use serde_json::json;

const ROOT: &str = "resource.kubernetes.io/pcieRoot";

/// GPUs on roots 0,0,1 ... and NICs: the first GPU's root has no NIC.
fn node() -> (Vec<ResourceSlice>, Vec<DeviceClass>) {
    let gpu = |name: &str, root: &str| device(name, json!({ ROOT: root }));
    let gpus = slice(
        "n1-gpu",
        "n1",
        "gpu.example.com",
        json!([
            gpu("gpu-0", "pci0000:00"),
            gpu("gpu-1", "pci0000:40"),
            gpu("gpu-2", "pci0000:80")
        ]),
    );
    let nic = |name: &str, root: &str, rail: i64| device(name, json!({ ROOT: root, "rail": rail }));
    let nics = slice(
        "n1-nic",
        "n1",
        "ainic.amd.com",
        json!([
            nic("nic-0", "pci0000:80", 0),
            nic("nic-1", "pci0000:40", 1),
            nic("nic-2", "pci0000:80", 1)
        ]),
    );
    (
        vec![gpus, nics],
        vec![
            class("gpu", "gpu.example.com"),
            class("nic", "ainic.amd.com"),
        ],
    )
}

fn pair_claim(name: &str) -> k8s_openapi::api::resource::v1::ResourceClaim {
    claim(
        name,
        json!([exactly("gpu", "gpu", 1), exactly("nic", "nic", 1)]),
        json!([{ "requests": ["gpu", "nic"], "matchAttribute": ROOT }]),
    )
}

#[test]
fn match_attribute_pairs_gpu_and_nic_with_backtracking() {
    let (slices, classes) = node();
    let out = allocate(&slices, &classes, &[], "n1", &[pair_claim("c")]).unwrap();
    // gpu-0's root has no NIC: the search backtracks to gpu-1.
    assert_eq!(names(&out[0]), ["gpu-1", "nic-1"]);
}

#[test]
fn match_attribute_failure_names_the_anchor_device() {
    let (slices, classes) = node();
    let gpu_only_0 = json!([{ "name": "gpu", "exactly": { "deviceClassName": "gpu", "selectors": [{ "cel": { "expression": "device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'" } }] } }, exactly("nic", "nic", 1)]);
    let c = claim(
        "c",
        gpu_only_0,
        json!([{ "requests": ["gpu", "nic"], "matchAttribute": ROOT }]),
    );
    let err = failure(allocate(&slices, &classes, &[], "n1", &[c]));
    assert!(
        err.contains("request nic: 3 devices match class nic"),
        "{err}"
    );
    assert!(err.contains("0 satisfy matchAttribute resource.kubernetes.io/pcieRoot with request gpu's device 'gpu-0'"), "{err}");
}

#[test]
fn constraint_without_request_list_covers_all_requests() {
    let (slices, classes) = node();
    let c = claim(
        "c",
        json!([exactly("gpu", "gpu", 1), exactly("nic", "nic", 2)]),
        json!([{ "matchAttribute": ROOT }]),
    );
    let out = allocate(&slices, &classes, &[], "n1", &[c]).unwrap();
    assert_eq!(names(&out[0]), ["gpu-2", "nic-0", "nic-2"]);
}

#[test]
fn missing_attribute_fails_the_constraint() {
    let (slices, classes) = node();
    let c = claim(
        "c",
        json!([exactly("gpu", "gpu", 1), exactly("nic", "nic", 1)]),
        json!([{ "matchAttribute": "ainic.amd.com/rail" }]),
    );
    failure(allocate(&slices, &classes, &[], "n1", &[c]));
}

#[test]
fn distinct_attribute_spreads_over_values() {
    let (slices, classes) = node();
    let c = claim(
        "c",
        json!([exactly("nic", "nic", 2)]),
        json!([{ "distinctAttribute": "ainic.amd.com/rail" }]),
    );
    let out = allocate(&slices, &classes, &[], "n1", &[c]).unwrap();
    assert_eq!(names(&out[0]), ["nic-0", "nic-1"]);
    let c = claim(
        "c",
        json!([exactly("nic", "nic", 3)]),
        json!([{ "distinctAttribute": "ainic.amd.com/rail" }]),
    );
    let node = NodeFacts::named("n1");
    let v1_37 = Features::for_release(Release::V1_37);
    let err = failure(allocate_with(
        v1_37,
        &slices,
        &classes,
        &[],
        &node,
        std::slice::from_ref(&c),
    ));
    assert!(err.contains("distinctAttribute"), "{err}");
    // Up to 1.36 upstream compares a device only with the one added
    // before it for the same request, so in 1.34's order three devices
    // on two rails fit (as upstream's allocator of 1.34 answers).
    let v1_34 = Features::for_release(Release::V1_34);
    let out = allocate_with(v1_34, &slices, &classes, &[], &node, &[c]).unwrap();
    assert_eq!(names(&out[0]).len(), 3);
}

#[test]
fn unqualified_driver_attributes_are_found_under_the_driver_domain() {
    let (slices, classes) = node();
    let c = claim(
        "c",
        json!([exactly("nic", "nic", 2)]),
        json!([{ "matchAttribute": "ainic.amd.com/rail" }]),
    );
    let out = allocate(&slices, &classes, &[], "n1", &[c]).unwrap();
    assert_eq!(names(&out[0]), ["nic-1", "nic-2"]);
}

#[test]
fn several_claims_are_allocated_together_with_backtracking_across_claims() {
    let (slices, classes) = node();
    // The first claim would take nic-0 (first fit), but the second claim
    // needs a NIC on root pci0000:80 and rail 0: only nic-0.
    let any = claim("any", json!([exactly("nic", "nic", 1)]), json!([]));
    let rail0 = json!([{ "name": "nic", "exactly": { "deviceClassName": "nic", "selectors": [{ "cel": { "expression": "device.attributes['ainic.amd.com'].rail == 0" } }] } }]);
    let out = allocate(
        &slices,
        &classes,
        &[],
        "n1",
        &[any.clone(), claim("rail0", rail0.clone(), json!([]))],
    )
    .unwrap();
    assert_eq!(
        (names(&out[0]), names(&out[1])),
        (vec!["nic-1".to_owned()], vec!["nic-0".to_owned()])
    );
    // All or nothing: if the second cannot be satisfied, neither is allocated.
    let rail9 = json!([{ "name": "nic", "exactly": { "deviceClassName": "nic", "selectors": [{ "cel": { "expression": "device.attributes['ainic.amd.com'].rail == 9" } }] } }]);
    let err = failure(allocate(
        &slices,
        &classes,
        &[],
        "n1",
        &[any, claim("rail9", rail9, json!([]))],
    ));
    assert!(err.contains("claim default/rail9"), "{err}");
}

#[test]
fn constraints_are_per_claim() {
    let (slices, classes) = node();
    let out = allocate(
        &slices,
        &classes,
        &[],
        "n1",
        &[pair_claim("a"), pair_claim("b")],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["gpu-1", "nic-1"]);
    assert_eq!(names(&out[1]), ["gpu-2", "nic-0"]);
}

#[test]
fn first_available_tries_subrequests_in_order() {
    let (slices, classes) = node();
    let req = json!([{ "name": "nic", "firstAvailable": [
        { "name": "two-on-rail-1", "deviceClassName": "nic", "count": 3, "selectors": [{ "cel": { "expression": "device.attributes['ainic.amd.com'].rail == 1" } }] },
        { "name": "one", "deviceClassName": "nic", "count": 1 }
    ] }]);
    let out = allocate(
        &slices,
        &classes,
        &[],
        "n1",
        &[claim("c", req.clone(), json!([]))],
    )
    .unwrap();
    assert_eq!(
        picks(&out[0]),
        [("nic/one".to_owned(), "n1".to_owned(), "nic-0".to_owned())]
    );
    let mut off = Features::default();
    off.set("DRAPrioritizedList", false);
    let err = allocate_with(
        off,
        &slices,
        &classes,
        &[],
        &NodeFacts::named("n1"),
        &[claim("c", req, json!([]))],
    );
    assert!(
        matches!(err, Err(AllocateError::Input(InputError::ClaimPart { .. }))),
        "{err:?}"
    );
}

#[test]
fn first_available_subrequest_choice_backtracks_for_constraints() {
    let (slices, classes) = node();
    let req = json!([exactly("gpu", "gpu", 1), { "name": "nic", "firstAvailable": [
        { "name": "rail0", "deviceClassName": "nic", "selectors": [{ "cel": { "expression": "device.attributes['ainic.amd.com'].rail == 0" } }] },
        { "name": "any", "deviceClassName": "nic" }
    ] }]);
    let c = claim(
        "c",
        req,
        json!([{ "requests": ["gpu", "nic/any"], "matchAttribute": ROOT }]),
    );
    let out = allocate(&slices, &classes, &[], "n1", &[c]).unwrap();
    // rail0 is not in the constraint, so gpu-0 + nic-0 (rail 0) works first.
    assert_eq!(
        picks(&out[0])
            .iter()
            .map(|p| p.0.as_str())
            .collect::<Vec<_>>(),
        ["gpu", "nic/rail0"]
    );
    assert_eq!(names(&out[0]), ["gpu-0", "nic-0"]);
}

#[test]
fn malformed_claims_are_input_errors() {
    let (slices, classes) = node();
    let twice = claim(
        "c",
        json!([exactly("nic", "nic", 1), exactly("nic", "nic", 1)]),
        json!([]),
    );
    let unknown = claim(
        "c",
        json!([exactly("nic", "nic", 1)]),
        json!([{ "requests": ["gpu"], "matchAttribute": ROOT }]),
    );
    let unqualified = claim(
        "c",
        json!([exactly("nic", "nic", 1)]),
        json!([{ "matchAttribute": "rail" }]),
    );
    for bad in [twice, unknown, unqualified] {
        let err = allocate(&slices, &classes, &[], "n1", std::slice::from_ref(&bad));
        assert!(
            matches!(err, Err(AllocateError::Input(InputError::Claim { .. }))),
            "{err:?}"
        );
    }
}
