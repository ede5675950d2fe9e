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

/// Issue 36: every release needs both `DRADeviceBindingConditions` and
/// `DRAResourceClaimDeviceStatus` for a device with binding conditions
/// (1.34's allocators check `DeviceBinding && DeviceStatus`, later ones
/// `DeviceBindingAndStatus`); with the status gate off the device is passed
/// over.
#[test]
fn binding_conditions_need_device_status_in_every_release() {
    let devices = json!([{ "name": "attach", "bindingConditions": ["attached"], "bindingFailureConditions": ["failed"] }, { "name": "plain" }]);
    let s = slice("s", "n1", "d.example.com", devices);
    let one = [claim("a", json!([exactly("d", "d", 1)]), json!([]))];
    for release in Release::KNOWN {
        let run = |status: bool| {
            let mut f = Features::for_release(release);
            f.set("DRADeviceBindingConditions", true);
            f.set("DRAResourceClaimDeviceStatus", status);
            let out = allocate_with(
                f,
                std::slice::from_ref(&s),
                &[class("d", "d.example.com")],
                &[],
                &NodeFacts::named("n1"),
                &one,
            );
            names(&out.unwrap()[0])
        };
        assert_eq!(run(false), ["plain"], "{release}, device status off");
        assert_eq!(run(true), ["attach"], "{release}, device status on");
    }
}

/// A pool on n1 with devices `pf` (draws on counter set `cs`) and `plain`
/// (draws on nothing). `apart` false: the counter set is in the device
/// slice, as 1.34 publishes it; true: in a slice of its own, as the API
/// server wants it from 1.35.
fn counters_beside_a_plain_device(apart: bool) -> Vec<ResourceSlice> {
    let devices = json!([
        { "name": "pf", "consumesCounters": [{ "counterSet": "cs", "counters": { "mem": { "value": "4Gi" } } }] },
        { "name": "plain" }
    ]);
    let sets = json!([{ "name": "cs", "counters": { "mem": { "value": "8Gi" } } }]);
    let mut out = vec![slice("s-devices", "n1", "d.example.com", devices)];
    if apart {
        out.push(slice("s-counters", "n1", "d.example.com", json!([])));
        out[1].spec.devices = None;
        out[1].spec.shared_counters = Some(serde_json::from_value(sets).unwrap());
        for s in &mut out {
            s.spec.pool.resource_slice_count = 2;
        }
    } else {
        out[0].spec.shared_counters = Some(serde_json::from_value(sets).unwrap());
    }
    out
}

/// Issue 36: with `DRAPartitionableDevices` off, 1.34 (all three of its
/// allocators) and 1.35's stable allocator (every gate off) keep a slice
/// with counter sets and refuse only the devices that draw counters;
/// 1.35's incubating and experimental allocators and every allocator from
/// 1.36 pass over such a slice, devices and all. A counter set in a slice
/// of its own counts for the pool's completeness either way.
#[test]
fn without_partitionable_devices_counter_slices_follow_each_release() {
    let one = [claim("a", json!([exactly("d", "d", 1)]), json!([]))];
    let run = |f: Features, apart: bool| {
        allocate_with(
            f,
            &counters_beside_a_plain_device(apart),
            &[class("d", "d.example.com")],
            &[],
            &NodeFacts::named("n1"),
            &one,
        )
    };
    let off = |release| {
        let mut f = Features::for_release(release);
        f.set("DRAPartitionableDevices", false);
        f
    };
    let every_gate_off = |release| {
        let mut f = Features::for_release(release);
        for gate in Features::GATE_NAMES {
            f.set(gate, false);
        }
        f
    };
    // 1.34: defaults (experimental, device status being on) and every gate
    // off (stable).
    assert_eq!(
        names(&run(off(Release::V1_34), false).unwrap()[0]),
        ["plain"]
    );
    assert_eq!(
        names(&run(every_gate_off(Release::V1_34), false).unwrap()[0]),
        ["plain"]
    );
    // 1.35: stable keeps the mixed slice, incubating passes over it.
    let stable = every_gate_off(Release::V1_35);
    assert_eq!(stable.implementation(), allocator::Implementation::Stable);
    assert_eq!(names(&run(stable, false).unwrap()[0]), ["plain"]);
    assert_eq!(
        off(Release::V1_35).implementation(),
        allocator::Implementation::Incubating
    );
    failure(run(off(Release::V1_35), false));
    for release in [Release::V1_36, Release::V1_37] {
        failure(run(every_gate_off(release), false));
        failure(run(off(release), false));
    }
    // Counters apart: the device slice serves `plain` in every release.
    for release in Release::KNOWN {
        for f in [off(release), every_gate_off(release)] {
            assert_eq!(names(&run(f, true).unwrap()[0]), ["plain"], "{release}");
        }
    }
}

/// Upstream's 1.36 table (list-attributes-disabled-*-constraint-with-lists):
/// with `DRAListTypeAttributes` off, 1.36's CEL environment converts a
/// list value to nothing, so evaluating any selector on a device with a
/// list-valued attribute aborts ("unsupported attribute value"). 1.37
/// converts lists whatever the gate, and with the gate 1.36 does too.
#[test]
fn in_1_36_without_list_attributes_a_selector_on_a_list_valued_device_aborts() {
    let devices =
        json!([{ "name": "listed", "attributes": { "zones": { "strings": ["z1", "z2"] } } }]);
    let s = slice("s", "n1", "d.example.com", devices);
    let one = [claim("a", json!([exactly("d", "d", 1)]), json!([]))];
    let run = |release, lists: bool| {
        let mut f = Features::for_release(release);
        f.set("DRAListTypeAttributes", lists);
        allocate_with(
            f,
            std::slice::from_ref(&s),
            &[class("d", "d.example.com")],
            &[],
            &NodeFacts::named("n1"),
            &one,
        )
    };
    match run(Release::V1_36, false) {
        Err(AllocateError::Input(InputError::Aborted { reason })) => assert!(
            reason.contains("attribute d.example.com/zones: unsupported attribute value"),
            "{reason}"
        ),
        other => panic!("1.36 without the gate: expected an abort, got {other:?}"),
    }
    assert_eq!(names(&run(Release::V1_36, true).unwrap()[0]), ["listed"]);
    assert_eq!(names(&run(Release::V1_37, false).unwrap()[0]), ["listed"]);
}

/// The stable allocator (and before 1.36 the incubating one) does not know
/// consumable capacity at all: it ignores a capacity request instead of
/// refusing it, and refuses `distinctAttribute` as a constraint that names
/// no attribute.
#[test]
fn an_allocator_that_does_not_know_consumable_capacity_ignores_capacity_requests() {
    let mut f = Features::for_release(Release::V1_37);
    for gate in Features::GATE_NAMES {
        f.set(gate, false);
    }
    let classes = [class("nic", "ainic.amd.com")];
    let node = NodeFacts::named("n1");
    let out = allocate_with(
        f,
        &[shared_nic()],
        &classes,
        &[],
        &node,
        &[bandwidth_claim("a", "100G")],
    )
    .unwrap();
    let result = &out[0].devices.as_ref().unwrap().results.as_ref().unwrap()[0];
    assert!(result.share_id.is_none() && result.consumed_capacity.is_none());
    let distinct = claim(
        "b",
        json!([exactly("nic", "nic", 1)]),
        json!([{ "requests": ["nic"], "distinctAttribute": "ainic.amd.com/model" }]),
    );
    let err = allocate_with(f, &[shared_nic()], &classes, &[], &node, &[distinct]);
    assert!(
        matches!(err, Err(AllocateError::Input(InputError::ClaimPart { .. }))),
        "{err:?}"
    );
}

/// From 1.37 `DRAFractionalCapacityRange` is an allocator feature that
/// only the incubating and experimental allocators support, so with it on
/// the scheduler picks one of those even when every other gate is off,
/// and that one refuses a capacity request without `DRAConsumableCapacity`.
#[test]
fn in_1_37_fractional_ranges_pick_an_allocator_that_checks_capacity_requests() {
    let mut f = Features::for_release(Release::V1_37);
    for gate in Features::GATE_NAMES {
        f.set(gate, false);
    }
    f.set("DRAFractionalCapacityRange", true);
    let out = allocate_with(
        f,
        &[shared_nic()],
        &[class("nic", "ainic.amd.com")],
        &[],
        &NodeFacts::named("n1"),
        &[bandwidth_claim("a", "100G")],
    );
    assert!(
        matches!(out, Err(AllocateError::Input(InputError::ClaimPart { .. }))),
        "{out:?}"
    );
}

/// The kube-scheduler counts a held result with a share ID as a share only
/// with `DRAConsumableCapacity`; with the gate off it tracks the device as
/// allocated outright (its allocated-devices helper), in every release, so
/// no other claim gets the device or the counters it draws.
#[test]
fn without_consumable_capacity_a_held_share_holds_the_whole_device() {
    let classes = [class("nic", "ainic.amd.com")];
    let node = NodeFacts::named("n1");
    let share = bandwidth_claim("a", "100G");
    let on = gates(&["DRAConsumableCapacity"]);
    let out = allocate_with(
        on,
        &[shared_nic()],
        &classes,
        &[],
        &node,
        std::slice::from_ref(&share),
    )
    .unwrap();
    let held = [allocated(share, out[0].clone())];
    let plain = [claim("b", json!([exactly("nic", "nic", 1)]), json!([]))];
    for release in Release::KNOWN {
        let mut off = Features::for_release(release);
        off.set("DRAConsumableCapacity", false);
        let err = failure(allocate_with(
            off,
            &[shared_nic()],
            &classes,
            &held,
            &node,
            &plain,
        ));
        assert!(err.contains("0 of those are free"), "{release}: {err}");
    }
}

/// 1.35's stable allocator (every gate that adds a feature off) does not
/// copy a request's tolerations into its results; its incubating and
/// experimental ones do, and from 1.36 every allocator does.
#[test]
fn in_1_35_the_stable_allocator_leaves_tolerations_out_of_results() {
    let s = slice("s", "n1", "d.example.com", json!([{ "name": "dev" }]));
    let req = json!([{ "name": "r", "exactly": { "deviceClassName": "d",
        "tolerations": [{ "key": "k", "operator": "Exists" }] } }]);
    let one = [claim("a", req, json!([]))];
    let run = |release: Release, taints: bool| {
        let mut f = Features::for_release(release);
        for gate in Features::GATE_NAMES {
            f.set(gate, false);
        }
        f.set("DRADeviceTaints", taints);
        let out = allocate_with(
            f,
            std::slice::from_ref(&s),
            &[class("d", "d.example.com")],
            &[],
            &NodeFacts::named("n1"),
            &one,
        )
        .unwrap();
        out[0].devices.as_ref().unwrap().results.as_ref().unwrap()[0]
            .tolerations
            .is_some()
    };
    assert!(!run(Release::V1_34, true));
    assert!(!run(Release::V1_35, false), "1.35 stable");
    assert!(run(Release::V1_35, true), "1.35 incubating");
    assert!(run(Release::V1_36, false) && run(Release::V1_37, false));
}

/// Issue 36 (oracle cases 1.34-1002600, -1004832, -1004906, -1004925,
/// -1005770): 1.34's experimental allocator, picked by either of the
/// binding-conditions and device-status gates or by consumable capacity,
/// compares `distinctAttribute` values by pointer. Two devices with equal
/// values both pass, taken in order; only a second share of the same
/// device repeats its value. 1.35 compares the values.
#[test]
fn in_1_34_distinct_attribute_repeats_only_the_same_device() {
    let nics = [slice(
        "n1-nic",
        "n1",
        "ainic.amd.com",
        json!([
            device("nic-0", json!({ "model": "m2" })),
            device("nic-1", json!({ "model": "m1" })),
            device("nic-2", json!({ "model": "m1" })),
        ]),
    )];
    let classes = [class("nic", "ainic.amd.com")];
    let node = NodeFacts::named("n1");
    let distinct = json!([{ "distinctAttribute": "ainic.amd.com/model" }]);
    let three = claim("a", json!([exactly("nic", "nic", 3)]), distinct.clone());
    // 1.34's defaults have device status on: the experimental allocator.
    let v1_34 = Features::for_release(Release::V1_34);
    let out = allocate_with(v1_34, &nics, &classes, &[], &node, &[three]).unwrap();
    assert_eq!(names(&out[0]), ["nic-0", "nic-1", "nic-2"]);
    let mut v1_35 = Features::for_release(Release::V1_35);
    v1_35.set("DRAConsumableCapacity", true);
    let two = claim("b", json!([exactly("nic", "nic", 2)]), distinct.clone());
    let out = allocate_with(v1_35, &nics, &classes, &[], &node, &[two]).unwrap();
    assert_eq!(names(&out[0]), ["nic-0", "nic-1"], "1.35 compares values");
    // Two shares of one device: the same value, refused.
    let mut shared = v1_34;
    shared.set("DRAConsumableCapacity", true);
    let req = |name: &str| {
        json!({ "name": name, "exactly": { "deviceClassName": "nic",
            "capacity": { "requests": { "ainic.amd.com/bandwidth": "100G" } } } })
    };
    let twice = claim("c", json!([req("r0"), req("r1")]), distinct);
    let nic = json!({
        "name": "nic-0",
        "allowMultipleAllocations": true,
        "attributes": { "model": { "string": "m1" } },
        "capacity": { "bandwidth": { "value": "400G" } }
    });
    let one = slice("n1-nic", "n1", "ainic.amd.com", json!([nic]));
    let err = allocate_with(shared, &[one], &classes, &[], &node, &[twice]);
    assert!(
        matches!(err, Err(AllocateError::Unsatisfiable(_))),
        "{err:?}"
    );
}
