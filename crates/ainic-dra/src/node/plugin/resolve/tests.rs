use serde_json::json;

use super::*;
use crate::node::fixtures::{self, claim, nic_config};

const D: &str = "ainic.amd.com";
const PF0: &str = "pf-0000-0c-00-0";
const PF1: &str = "pf-0000-0d-00-0";

fn scope() -> Scope {
    Scope {
        driver: D.into(),
        pool: "node-a".into(),
    }
}

#[test]
fn keeps_only_this_driver_and_pool() {
    let c = claim(
        "c",
        "u1",
        &[
            ("gpu", "gpu.amd.com", "node-a", "gpu-0"),
            ("nic", D, "node-a", PF0),
            ("fabric", D, "fabric-x", "partition-1"),
        ],
        json!([]),
    );
    let planned = plan(&c, "u1", &scope(), &fixtures::inventory()).unwrap();
    assert_eq!(planned.len(), 1);
    assert_eq!(planned[0].request, "nic");
    assert_eq!(planned[0].attached.nic.address.to_string(), "0000:0c:00.0");
}

#[test]
fn a_claim_for_another_node_is_rejected_naming_the_pool() {
    let c = claim("c", "u1", &[("nic", D, "node-b", PF0)], json!([]));
    let err = plan(&c, "u1", &scope(), &fixtures::inventory())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no device of driver ainic.amd.com in pool node-a"),
        "{err}"
    );
}

#[test]
fn uid_mismatch_and_missing_allocation_are_rejected() {
    let c = claim("c", "u1", &[("nic", D, "node-a", PF0)], json!([]));
    let err = plan(&c, "u2", &scope(), &fixtures::inventory())
        .unwrap_err()
        .to_string();
    assert!(err.contains("UID u1") && err.contains("UID u2"), "{err}");
    let mut unallocated = c.clone();
    unallocated.status = None;
    let err = plan(&unallocated, "u1", &scope(), &fixtures::inventory())
        .unwrap_err()
        .to_string();
    assert!(err.contains("ns/c is not allocated"), "{err}");
}

#[test]
fn config_applies_per_request_and_unknown_fields_fail() {
    let c = claim(
        "c",
        "u1",
        &[("a", D, "node-a", PF0), ("b", D, "node-a", PF1)],
        json!([nic_config("FromClass", json!({"umad": true}))]),
    );
    let planned = plan(&c, "u1", &scope(), &fixtures::inventory()).unwrap();
    assert!(planned.iter().all(|p| p.attached.umad && !p.attached.issm));

    let bad = claim(
        "c",
        "u1",
        &[("a", D, "node-a", PF0)],
        json!([nic_config("FromClaim", json!({"speed": 1}))]),
    );
    let err = plan(&bad, "u1", &scope(), &fixtures::inventory())
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `speed`"), "{err}");
}

#[test]
fn a_claim_asking_for_mad_devices_its_class_does_not_grant_is_refused() {
    let c = claim(
        "c",
        "u1",
        &[("a", D, "node-a", PF0)],
        json!([nic_config("FromClaim", json!({"issm": true}))]),
    );
    let err = plan(&c, "u1", &scope(), &fixtures::inventory())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ns/c") && err.contains("sets issm: true"),
        "{err}"
    );
}

#[test]
fn netdev_mode_is_refused_clearly() {
    let c = claim(
        "c",
        "u1",
        &[("a", D, "node-a", PF0)],
        json!([nic_config("FromClaim", json!({"mode": "netdev"}))]),
    );
    let err = plan(&c, "u1", &scope(), &fixtures::inventory())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("attach mode netdev") && err.contains("not supported yet"),
        "{err}"
    );
}

#[test]
fn a_device_missing_from_the_node_is_named() {
    let c = claim(
        "c",
        "u1",
        &[("a", D, "node-a", "pf-0000-99-00-0")],
        json!([]),
    );
    let err = plan(&c, "u1", &scope(), &fixtures::inventory())
        .unwrap_err()
        .to_string();
    assert!(err.contains("pf-0000-99-00-0"), "{err}");
}
