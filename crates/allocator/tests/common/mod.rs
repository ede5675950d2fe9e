//! Builders for the objects the allocator tests feed in, written as the
//! JSON a user would write, so that each test reads like its input.
#![allow(dead_code)]

use allocator::{AllocateError, Allocator, Features, NodeFacts};
use k8s_openapi::api::resource::v1::{AllocationResult, DeviceClass, ResourceClaim, ResourceSlice};
use serde_json::{Value, json};

/// A slice of `driver` on `node` (pool named after the node), generation 1, one slice.
pub fn slice(name: &str, node: &str, driver: &str, devices: Value) -> ResourceSlice {
    slice_with(name, driver, node, json!({ "nodeName": node }), devices)
}

/// A slice with any node selection (`{"allNodes": true}`, `{"nodeSelector": …}`).
pub fn slice_with(
    name: &str,
    driver: &str,
    pool: &str,
    selection: Value,
    devices: Value,
) -> ResourceSlice {
    let mut spec = json!({
        "driver": driver,
        "pool": { "name": pool, "generation": 1, "resourceSliceCount": 1 },
        "devices": devices,
    });
    for (k, v) in selection.as_object().expect("selection is an object") {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({ "metadata": { "name": name }, "spec": spec }))
        .expect("valid slice")
}

/// A device with string/int attributes given as `{"name": value}` (JSON
/// strings become `string`, numbers `int`, booleans `bool`).
pub fn device(name: &str, attributes: Value) -> Value {
    let attrs: serde_json::Map<String, Value> = attributes
        .as_object()
        .expect("attributes object")
        .iter()
        .map(|(k, v)| {
            let typed = match v {
                Value::String(s) => json!({ "string": s }),
                Value::Bool(b) => json!({ "bool": b }),
                other => json!({ "int": other }),
            };
            (k.clone(), typed)
        })
        .collect();
    json!({ "name": name, "attributes": attrs })
}

/// A class selecting the devices of `driver`, plus extra selectors.
pub fn class(name: &str, driver: &str) -> DeviceClass {
    class_with(name, &[&format!("device.driver == '{driver}'")])
}

/// A class with the given selector expressions.
pub fn class_with(name: &str, expressions: &[&str]) -> DeviceClass {
    let selectors: Vec<Value> = expressions
        .iter()
        .map(|e| json!({ "cel": { "expression": e } }))
        .collect();
    serde_json::from_value(
        json!({ "metadata": { "name": name }, "spec": { "selectors": selectors } }),
    )
    .expect("valid class")
}

/// A claim `default/NAME` with these requests and constraints.
pub fn claim(name: &str, requests: Value, constraints: Value) -> ResourceClaim {
    serde_json::from_value(json!({
        "metadata": { "name": name, "namespace": "default" },
        "spec": { "devices": { "requests": requests, "constraints": constraints } },
    }))
    .expect("valid claim")
}

/// An `exactly` request for `count` devices of `class`.
pub fn exactly(name: &str, class: &str, count: i64) -> Value {
    json!({ "name": name, "exactly": { "deviceClassName": class, "count": count } })
}

/// `claim` with `status.allocation` set to `result`.
pub fn allocated(mut claim: ResourceClaim, result: AllocationResult) -> ResourceClaim {
    claim.status = Some(k8s_openapi::api::resource::v1::ResourceClaimStatus {
        allocation: Some(result),
        ..Default::default()
    });
    claim
}

/// Allocates on `node` with default gates.
pub fn allocate(
    slices: &[ResourceSlice],
    classes: &[DeviceClass],
    allocated: &[ResourceClaim],
    node: &str,
    claims: &[ResourceClaim],
) -> Result<Vec<AllocationResult>, AllocateError> {
    allocate_with(
        Features::default(),
        slices,
        classes,
        allocated,
        &NodeFacts::named(node),
        claims,
    )
}

/// Allocates with explicit gates and node facts.
pub fn allocate_with(
    features: Features,
    slices: &[ResourceSlice],
    classes: &[DeviceClass],
    allocated: &[ResourceClaim],
    node: &NodeFacts,
    claims: &[ResourceClaim],
) -> Result<Vec<AllocationResult>, AllocateError> {
    Allocator::new(features, slices, classes, allocated)?.allocate(node, claims)
}

/// `(request, pool, device)` of each result of one claim.
pub fn picks(result: &AllocationResult) -> Vec<(String, String, String)> {
    result
        .devices
        .as_ref()
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
        .map(|r| (r.request.clone(), r.pool.clone(), r.device.clone()))
        .collect()
}

/// Device names picked for one claim.
pub fn names(result: &AllocationResult) -> Vec<String> {
    picks(result).into_iter().map(|(_, _, d)| d).collect()
}

/// The explanation of an unsatisfiable allocation (panics otherwise).
pub fn failure(result: Result<Vec<AllocationResult>, AllocateError>) -> String {
    match result {
        Err(AllocateError::Unsatisfiable(f)) => f.explanation,
        other => panic!("expected an allocation failure, got {other:?}"),
    }
}

/// Features with every gate on.
pub fn all_gates() -> Features {
    let mut f = Features::default();
    for name in Features::GATE_NAMES {
        f.set(name, true);
    }
    f
}
