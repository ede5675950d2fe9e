//! Features behind alpha gates in Kubernetes 1.34: consumable capacity,
//! partitionable devices (shared counters), device taints, binding
//! conditions — each on and off.

mod common;

use allocator::{AllocateError, Features, InputError, NodeFacts, Release};
use common::*;
use k8s_openapi::api::resource::v1::ResourceSlice;
use serde_json::json;

/// 1.37's defaults with `names` on (1.37 is what `simulate` answers by
/// default; earlier releases' quirks are checked by the oracle tests).
fn gates(names: &[&str]) -> Features {
    let mut f = Features::for_release(Release::V1_37);
    for n in names {
        assert!(f.set(n, true));
    }
    f
}

fn shared_nic() -> ResourceSlice {
    let nic = json!({
        "name": "nic-0",
        "allowMultipleAllocations": true,
        "capacity": { "bandwidth": { "value": "400G", "requestPolicy": {
            "default": "50G", "validRange": { "min": "50G", "max": "400G", "step": "50G" } } } }
    });
    slice("n1-nic", "n1", "ainic.amd.com", json!([nic]))
}

fn bandwidth_claim(name: &str, amount: &str) -> k8s_openapi::api::resource::v1::ResourceClaim {
    let req = json!([{ "name": "nic", "exactly": { "deviceClassName": "nic", "capacity": { "requests": { "ainic.amd.com/bandwidth": amount } } } }]);
    claim(name, req, json!([]))
}

#[test]
fn shared_device_serves_several_claims_until_capacity_runs_out() {
    let f = gates(&["DRAConsumableCapacity"]);
    let classes = [class("nic", "ainic.amd.com")];
    let node = NodeFacts::named("n1");
    let claims = [bandwidth_claim("a", "120G"), bandwidth_claim("b", "200G")];
    let out = allocate_with(f, &[shared_nic()], &classes, &[], &node, &claims).unwrap();
    let a = &out[0].devices.as_ref().unwrap().results.as_ref().unwrap()[0];
    let b = &out[1].devices.as_ref().unwrap().results.as_ref().unwrap()[0];
    assert_eq!((a.device.as_str(), b.device.as_str()), ("nic-0", "nic-0"));
    assert!(a.share_id.is_some() && a.share_id != b.share_id);
    // 120G rounds up to the 50G step: 150G, written in the canonical form
    // kube-scheduler writes (the testbed found `150000000000` here).
    assert_eq!(a.consumed_capacity.as_ref().unwrap()["bandwidth"].0, "150G");
    // Before 1.37 upstream rounds in binary units and writes that form.
    let mut v1_34 = Features::for_release(Release::V1_34);
    v1_34.set("DRAConsumableCapacity", true);
    let old = allocate_with(v1_34, &[shared_nic()], &classes, &[], &node, &claims[..1]).unwrap();
    let old = &old[0].devices.as_ref().unwrap().results.as_ref().unwrap()[0];
    assert_eq!(
        old.consumed_capacity.as_ref().unwrap()["bandwidth"].0,
        "146484375Ki"
    );
    // 150G + 200G are held; 100G more would pass 400G.
    let held = [
        allocated(claims[0].clone(), out[0].clone()),
        allocated(claims[1].clone(), out[1].clone()),
    ];
    let err = failure(allocate_with(
        f,
        &[shared_nic()],
        &classes,
        &held,
        &node,
        &[bandwidth_claim("c", "100G")],
    ));
    assert!(err.contains("0 of those are free"), "{err}");
    let fits = allocate_with(
        f,
        &[shared_nic()],
        &classes,
        &held,
        &node,
        &[bandwidth_claim("c", "50G")],
    )
    .unwrap();
    assert_eq!(names(&fits[0]), ["nic-0"]);
}

#[test]
fn capacity_request_without_the_gate_is_an_input_error() {
    let err = allocate(
        &[shared_nic()],
        &[class("nic", "ainic.amd.com")],
        &[],
        "n1",
        &[bandwidth_claim("a", "100G")],
    );
    assert!(
        matches!(err, Err(AllocateError::Input(InputError::ClaimPart { .. }))),
        "{err:?}"
    );
}

#[test]
fn without_the_gate_a_shared_device_is_exclusive() {
    let classes = [class("nic", "ainic.amd.com")];
    let plain = claim("a", json!([exactly("nic", "nic", 1)]), json!([]));
    let out = allocate(
        &[shared_nic()],
        &classes,
        &[],
        "n1",
        &[
            plain.clone(),
            claim("b", json!([exactly("nic", "nic", 1)]), json!([])),
        ],
    );
    failure(out);
    let one = allocate(&[shared_nic()], &classes, &[], "n1", &[plain]).unwrap();
    let result = &one[0].devices.as_ref().unwrap().results.as_ref().unwrap()[0];
    assert!(result.share_id.is_none() && result.consumed_capacity.is_none());
}

#[test]
fn requests_above_the_policy_maximum_do_not_fit() {
    let f = gates(&["DRAConsumableCapacity"]);
    failure(allocate_with(
        f,
        &[shared_nic()],
        &[class("nic", "ainic.amd.com")],
        &[],
        &NodeFacts::named("n1"),
        &[bandwidth_claim("a", "450G")],
    ));
}

fn pf_and_vfs() -> ResourceSlice {
    let consume = |amount: &str| json!([{ "counterSet": "pf-0", "counters": { "bandwidth": { "value": amount } } }]);
    let devices = json!([
        { "name": "pf-0", "consumesCounters": consume("400G") },
        { "name": "vf-0", "consumesCounters": consume("100G") },
        { "name": "vf-1", "consumesCounters": consume("100G") }
    ]);
    let mut s = slice("n1-nic", "n1", "ainic.amd.com", devices);
    s.spec.shared_counters = Some(vec![
        serde_json::from_value(
            json!({ "name": "pf-0", "counters": { "bandwidth": { "value": "400G" } } }),
        )
        .unwrap(),
    ]);
    s
}

#[test]
fn shared_counters_make_pf_and_vfs_exclusive() {
    let f = gates(&["DRAPartitionableDevices"]);
    let classes = [class("nic", "ainic.amd.com")];
    let node = NodeFacts::named("n1");
    let pf = claim("pf", json!([exactly("nic", "nic", 1)]), json!([]));
    let out = allocate_with(
        f,
        &[pf_and_vfs()],
        &classes,
        &[],
        &node,
        std::slice::from_ref(&pf),
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["pf-0"]);
    let held = allocated(pf, out[0].clone());
    let err = failure(allocate_with(
        f,
        &[pf_and_vfs()],
        &classes,
        &[held],
        &node,
        &[claim("vf", json!([exactly("nic", "nic", 1)]), json!([]))],
    ));
    assert!(err.contains("request nic"), "{err}");
    // Two VFs fit together (200G of 400G), but then the PF no longer does.
    let two_vfs = claim(
        "vfs",
        json!([{ "name": "nic", "exactly": { "deviceClassName": "nic", "count": 2, "selectors": [{ "cel": { "expression": "device.attributes['ainic.amd.com'].type == 'vf'" } }] } }]),
        json!([]),
    );
    let mut s = pf_and_vfs();
    for d in s.spec.devices.as_mut().unwrap() {
        let kind = if d.name.starts_with("vf") { "vf" } else { "pf" };
        d.attributes = Some(
            [(
                "type".to_owned(),
                serde_json::from_value(json!({ "string": kind })).unwrap(),
            )]
            .into(),
        );
    }
    let out = allocate_with(
        f,
        std::slice::from_ref(&s),
        &classes,
        &[],
        &node,
        &[two_vfs],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["vf-0", "vf-1"]);
}

#[test]
fn devices_consuming_counters_need_the_gate() {
    failure(allocate(
        &[pf_and_vfs()],
        &[class("nic", "ainic.amd.com")],
        &[],
        "n1",
        &[claim("a", json!([exactly("nic", "nic", 1)]), json!([]))],
    ));
}

fn tainted() -> ResourceSlice {
    let devices = json!([
        { "name": "sick", "taints": [{ "key": "ainic.amd.com/unhealthy", "value": "link-down", "effect": "NoSchedule" }] },
        { "name": "healthy" }
    ]);
    slice("n1-nic", "n1", "ainic.amd.com", devices)
}

#[test]
fn taints_are_skipped_unless_tolerated() {
    let f = gates(&["DRADeviceTaints"]);
    let classes = [class("nic", "ainic.amd.com")];
    let node = NodeFacts::named("n1");
    let out = allocate_with(
        f,
        &[tainted()],
        &classes,
        &[],
        &node,
        &[claim("a", json!([exactly("nic", "nic", 1)]), json!([]))],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["healthy"]);
    let tolerant = json!([{ "name": "nic", "exactly": { "deviceClassName": "nic", "count": 2, "tolerations": [{ "key": "ainic.amd.com/unhealthy", "operator": "Exists" }] } }]);
    let out = allocate_with(
        f,
        &[tainted()],
        &classes,
        &[],
        &node,
        &[claim("a", tolerant, json!([]))],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["sick", "healthy"]);
    let result = &out[0].devices.as_ref().unwrap().results.as_ref().unwrap()[0];
    assert!(
        result.tolerations.is_some(),
        "tolerations are copied into the result"
    );
    // Gate off: taints are ignored.
    let out = allocate(
        &[tainted()],
        &classes,
        &[],
        "n1",
        &[claim("a", json!([exactly("nic", "nic", 1)]), json!([]))],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["sick"]);
}

#[test]
fn devices_with_binding_conditions_need_their_gate() {
    let devices = json!([{ "name": "attach", "bindingConditions": ["attached"], "bindingFailureConditions": ["failed"] }, { "name": "plain" }]);
    let s = slice("s", "n1", "d.example.com", devices);
    let out = allocate(
        &[s],
        &[class("d", "d.example.com")],
        &[],
        "n1",
        &[claim("a", json!([exactly("d", "d", 1)]), json!([]))],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["plain"]);
}

/// 1.37 passes over a slice whose devices draw counters under compatibility
/// groups (their gate is alpha and off): the pool is incomplete. 1.36 has
/// no such field and uses the slice.
#[test]
fn from_1_37_slices_with_compatibility_groups_are_passed_over() {
    let mut grouped = pf_and_vfs();
    for d in grouped.spec.devices.as_mut().unwrap() {
        for c in d.consumes_counters.as_mut().unwrap() {
            c.compatibility_groups = Some(vec!["g1".into()]);
        }
    }
    let one = [claim("a", json!([exactly("nic", "nic", 1)]), json!([]))];
    let on = |release| Features::for_release(release);
    let run = |release| {
        allocate_with(
            on(release),
            std::slice::from_ref(&grouped),
            &[class("nic", "ainic.amd.com")],
            &[],
            &NodeFacts::named("n1"),
            &one,
        )
    };
    assert_eq!(names(&run(Release::V1_36).unwrap()[0]), ["pf-0"]);
    let err = failure(run(Release::V1_37));
    assert!(err.contains("request nic"), "{err}");
}
