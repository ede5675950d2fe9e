//! Allocation basics, after upstream's allocator behaviours: first fit in
//! pool/slice/device order, counts, `All` mode, in-use devices, admin
//! access, class and request selectors, CEL errors, configuration.

mod common;

use allocator::{AllocateError, Features, InputError, NodeFacts};
use common::*;
use serde_json::json;

fn gpus(node: &str, n: usize) -> k8s_openapi::api::resource::v1::ResourceSlice {
    let devices: Vec<_> = (0..n)
        .map(|i| device(&format!("gpu-{i}"), json!({ "index": i })))
        .collect();
    slice(
        &format!("{node}-gpus"),
        node,
        "gpu.example.com",
        json!(devices),
    )
}

#[test]
fn first_fit_takes_devices_in_slice_order() {
    let out = allocate(
        &[gpus("n1", 4)],
        &[class("gpu", "gpu.example.com")],
        &[],
        "n1",
        &[claim("c", json!([exactly("g", "gpu", 2)]), json!([]))],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["gpu-0", "gpu-1"]);
    assert_eq!(
        picks(&out[0])[0],
        ("g".to_owned(), "n1".to_owned(), "gpu-0".to_owned())
    );
}

#[test]
fn pools_are_ordered_by_driver_then_name_and_slices_by_name() {
    let b = slice_with(
        "zz-slice",
        "a.example.com",
        "pool-b",
        json!({ "allNodes": true }),
        json!([device("b0", json!({}))]),
    );
    let a = slice_with(
        "yy-slice",
        "a.example.com",
        "pool-a",
        json!({ "allNodes": true }),
        json!([device("a0", json!({}))]),
    );
    let z = slice_with(
        "aa-slice",
        "z.example.com",
        "pool-0",
        json!({ "allNodes": true }),
        json!([device("z0", json!({}))]),
    );
    let any = class_with("any", &["true"]);
    let out = allocate(
        &[z, b, a],
        &[any],
        &[],
        "n1",
        &[claim("c", json!([exactly("d", "any", 3)]), json!([]))],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["a0", "b0", "z0"]);
    // Two slices of one pool: by slice name, whatever the input order.
    let mut s2 = slice_with(
        "s2",
        "a.example.com",
        "p",
        json!({ "allNodes": true }),
        json!([device("second", json!({}))]),
    );
    let mut s1 = slice_with(
        "s1",
        "a.example.com",
        "p",
        json!({ "allNodes": true }),
        json!([device("first", json!({}))]),
    );
    s1.spec.pool.resource_slice_count = 2;
    s2.spec.pool.resource_slice_count = 2;
    let out = allocate(
        &[s2, s1],
        &[class_with("any", &["true"])],
        &[],
        "n1",
        &[claim("c", json!([exactly("d", "any", 1)]), json!([]))],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["first"]);
}

#[test]
fn not_enough_devices_fails_and_names_the_request() {
    let err = failure(allocate(
        &[gpus("n1", 2)],
        &[class("gpu", "gpu.example.com")],
        &[],
        "n1",
        &[claim("c", json!([exactly("g", "gpu", 3)]), json!([]))],
    ));
    assert!(err.contains("request g"), "{err}");
    assert!(err.contains("2 devices match class gpu"), "{err}");
    assert!(err.contains("needs 3"), "{err}");
}

#[test]
fn devices_of_allocated_claims_are_in_use() {
    let classes = [class("gpu", "gpu.example.com")];
    let slices = [gpus("n1", 2)];
    let first = allocate(
        &slices,
        &classes,
        &[],
        "n1",
        &[claim("a", json!([exactly("g", "gpu", 1)]), json!([]))],
    )
    .unwrap();
    let held = allocated(
        claim("a", json!([exactly("g", "gpu", 1)]), json!([])),
        first[0].clone(),
    );
    let out = allocate(
        &slices,
        &classes,
        std::slice::from_ref(&held),
        "n1",
        &[claim("b", json!([exactly("g", "gpu", 1)]), json!([]))],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["gpu-1"]);
    let err = failure(allocate(
        &slices,
        &classes,
        &[held],
        "n1",
        &[claim("b", json!([exactly("g", "gpu", 2)]), json!([]))],
    ));
    assert!(err.contains("1 of those are free"), "{err}");
}

#[test]
fn all_mode_takes_every_matching_device_and_fails_if_one_is_busy() {
    let classes = [class("gpu", "gpu.example.com")];
    let slices = [gpus("n1", 3)];
    let all =
        json!([{ "name": "g", "exactly": { "deviceClassName": "gpu", "allocationMode": "All" } }]);
    let out = allocate(
        &slices,
        &classes,
        &[],
        "n1",
        &[claim("c", all.clone(), json!([]))],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["gpu-0", "gpu-1", "gpu-2"]);
    let one = allocate(
        &slices,
        &classes,
        &[],
        "n1",
        &[claim("a", json!([exactly("g", "gpu", 1)]), json!([]))],
    )
    .unwrap();
    let held = allocated(claim("a", json!([]), json!([])), one[0].clone());
    failure(allocate(
        &slices,
        &classes,
        &[held],
        "n1",
        &[claim("c", all.clone(), json!([]))],
    ));
    // No matching device at all: All needs at least one.
    failure(allocate(
        &[],
        &classes,
        &[],
        "n1",
        &[claim("c", all, json!([]))],
    ));
}

#[test]
fn admin_access_may_use_devices_in_use_and_is_gated() {
    let classes = [class("gpu", "gpu.example.com")];
    let slices = [gpus("n1", 1)];
    let one = allocate(
        &slices,
        &classes,
        &[],
        "n1",
        &[claim("a", json!([exactly("g", "gpu", 1)]), json!([]))],
    )
    .unwrap();
    let held = allocated(claim("a", json!([]), json!([])), one[0].clone());
    let admin =
        json!([{ "name": "g", "exactly": { "deviceClassName": "gpu", "adminAccess": true } }]);
    let out = allocate(
        &slices,
        &classes,
        &[held],
        "n1",
        &[claim("mon", admin.clone(), json!([]))],
    )
    .unwrap();
    let result = &out[0].devices.as_ref().unwrap().results.as_ref().unwrap()[0];
    assert_eq!(
        (result.device.as_str(), result.admin_access),
        ("gpu-0", Some(true))
    );
    let mut off = Features::default();
    off.set("DRAAdminAccess", false);
    let err = allocate_with(
        off,
        &slices,
        &classes,
        &[],
        &NodeFacts::named("n1"),
        &[claim("mon", admin, json!([]))],
    );
    assert!(
        matches!(err, Err(AllocateError::Input(InputError::ClaimPart { .. }))),
        "{err:?}"
    );
}

#[test]
fn admin_access_results_do_not_make_devices_busy() {
    let classes = [class("gpu", "gpu.example.com")];
    let slices = [gpus("n1", 1)];
    let admin =
        json!([{ "name": "g", "exactly": { "deviceClassName": "gpu", "adminAccess": true } }]);
    let out = allocate(
        &slices,
        &classes,
        &[],
        "n1",
        &[claim("mon", admin, json!([]))],
    )
    .unwrap();
    let held = allocated(claim("mon", json!([]), json!([])), out[0].clone());
    let out = allocate(
        &slices,
        &classes,
        &[held],
        "n1",
        &[claim("b", json!([exactly("g", "gpu", 1)]), json!([]))],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["gpu-0"]);
}

#[test]
fn class_and_request_selectors_both_apply() {
    let classes = [class_with(
        "big",
        &[
            "device.driver == 'gpu.example.com'",
            "device.attributes['gpu.example.com'].index >= 1",
        ],
    )];
    let req = json!([{ "name": "g", "exactly": { "deviceClassName": "big", "selectors": [{ "cel": { "expression": "device.attributes['gpu.example.com'].index != 1" } }] } }]);
    let out = allocate(
        &[gpus("n1", 4)],
        &classes,
        &[],
        "n1",
        &[claim("c", req, json!([]))],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["gpu-2"]);
}

#[test]
fn unknown_class_and_bad_cel_are_input_errors() {
    let err = allocate(
        &[gpus("n1", 1)],
        &[],
        &[],
        "n1",
        &[claim("c", json!([exactly("g", "nope", 1)]), json!([]))],
    );
    assert!(
        matches!(
            err,
            Err(AllocateError::Input(InputError::UnknownClass { .. }))
        ),
        "{err:?}"
    );
    let bad = class_with("bad", &["device.driver =="]);
    let err = allocator::Allocator::new(Features::default(), &[], &[bad], &[]).unwrap_err();
    assert!(matches!(err, InputError::Selector { .. }), "{err:?}");
    let req = json!([{ "name": "g", "exactly": { "deviceClassName": "gpu", "selectors": [{ "cel": { "expression": "devic.driver == 'x'" } }] } }]);
    let err = allocate(
        &[gpus("n1", 1)],
        &[class("gpu", "gpu.example.com")],
        &[],
        "n1",
        &[claim("c", req, json!([]))],
    );
    assert!(
        matches!(err, Err(AllocateError::Input(InputError::Selector { .. }))),
        "{err:?}"
    );
}

/// Upstream aborts the allocation at a CEL runtime error, but only when the
/// search reaches the device (the oracle found that we skipped the device
/// instead).
#[test]
fn a_cel_runtime_error_aborts_when_the_search_reaches_the_device() {
    let bare = device("gpu-0", json!({}));
    let model = device("gpu-1", json!({ "model": "mi300x" }));
    let req = json!([{ "name": "g", "exactly": { "deviceClassName": "gpu", "selectors": [{ "cel": { "expression": "device.attributes['gpu.example.com'].model == 'mi300x'" } }] } }]);
    let run = |devices: Vec<serde_json::Value>| {
        let slices = [slice("s", "n1", "gpu.example.com", json!(devices))];
        allocate(
            &slices,
            &[class("gpu", "gpu.example.com")],
            &[],
            "n1",
            &[claim("c", req.clone(), json!([]))],
        )
    };
    let err = run(vec![bare.clone(), model.clone()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("CEL runtime error") && err.contains("gpu-0") && err.contains("model"),
        "{err}"
    );
    let out = run(vec![model, bare]).unwrap();
    assert_eq!(names(&out[0]), ["gpu-1"]);
}

#[test]
fn class_and_claim_configuration_is_copied_into_the_result() {
    let mut gpu = class("gpu", "gpu.example.com");
    gpu.spec.as_mut().unwrap().config = Some(vec![
        serde_json::from_value(
            json!({ "opaque": { "driver": "gpu.example.com", "parameters": { "a": 1 } } }),
        )
        .unwrap(),
    ]);
    let mut c = claim("c", json!([exactly("g", "gpu", 1)]), json!([]));
    c.spec.as_mut().unwrap().devices.as_mut().unwrap().config = Some(vec![serde_json::from_value(json!({ "requests": ["g"], "opaque": { "driver": "gpu.example.com", "parameters": { "b": 2 } } })).unwrap()]);
    let out = allocate(&[gpus("n1", 1)], &[gpu], &[], "n1", &[c]).unwrap();
    let config = out[0].devices.as_ref().unwrap().config.as_ref().unwrap();
    let sources: Vec<_> = config.iter().map(|c| c.source.as_str()).collect();
    assert_eq!(sources, ["FromClass", "FromClaim"]);
}

#[test]
fn claims_over_the_result_limit_are_rejected() {
    let reqs: Vec<_> = (0..33)
        .map(|i| exactly(&format!("r{i}"), "gpu", 1))
        .collect();
    let err = allocate(
        &[gpus("n1", 40)],
        &[class("gpu", "gpu.example.com")],
        &[],
        "n1",
        &[claim("c", json!(reqs), json!([]))],
    );
    assert!(
        matches!(&err, Err(AllocateError::Input(InputError::Aborted { reason })) if reason.contains("exceeds the claim limit of 32")),
        "{err:?}"
    );
    // Upstream's words: the request that does not fit, and what came before.
    assert!(
        format!("{err:?}").contains(
            "claim default/c, request r32: adding 1 devices exceeds the claim limit of 32, with 32 already accounted for"
        ),
        "{err:?}"
    );
}

/// A count over the limit is valid input: in a prioritized list the
/// search moves on to the next subrequest (found by the oracle: `count:
/// 33` used to be refused as invalid).
#[test]
fn a_subrequest_over_the_result_limit_gives_way_to_the_next() {
    let req = json!([{ "name": "g", "firstAvailable": [
        { "name": "many", "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 33 },
        { "name": "one", "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1 }
    ] }]);
    let out = allocate(
        &[gpus("n1", 40)],
        &[class("gpu", "gpu.example.com")],
        &[],
        "n1",
        &[claim("c", req, json!([]))],
    )
    .unwrap();
    let results = out[0].devices.as_ref().unwrap().results.as_ref().unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].request, "g/one");
}

#[test]
fn node_name_slices_restrict_the_result_to_the_node() {
    let out = allocate(
        &[gpus("n1", 1)],
        &[class("gpu", "gpu.example.com")],
        &[],
        "n1",
        &[claim("c", json!([exactly("g", "gpu", 1)]), json!([]))],
    )
    .unwrap();
    let selector = out[0].node_selector.as_ref().unwrap();
    let field = &selector.node_selector_terms[0]
        .match_fields
        .as_ref()
        .unwrap()[0];
    assert_eq!(
        (field.key.as_str(), field.values.as_deref().unwrap()),
        ("metadata.name", &["n1".to_owned()][..])
    );
}
