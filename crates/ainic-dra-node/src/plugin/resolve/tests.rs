use serde_json::json;

use super::*;
use crate::fixtures::{self, claim, nic_config};

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

/// A claim in netdev mode on PF0 (`eth0` on the host), reserved for `pods`.
fn netdev_claim(settings: serde_json::Value, pods: &[&str], share: bool) -> ResourceClaim {
    let config = json!([nic_config(
        "FromClaim",
        json!({"mode": "netdev", "netdev": settings})
    )]);
    let mut c = claim("c", "u1", &[("nic", D, "node-a", PF0)], config);
    let status = c.status.as_mut().unwrap();
    let reserved = pods
        .iter()
        .map(|uid| json!({"resource": "pods", "name": "p", "uid": uid}));
    status.reserved_for =
        Some(serde_json::from_value(json!(reserved.collect::<Vec<_>>())).unwrap());
    if share {
        let results = &mut status
            .allocation
            .as_mut()
            .unwrap()
            .devices
            .as_mut()
            .unwrap()
            .results;
        results.as_mut().unwrap()[0].share_id = Some("6ba7b810-9dad-11d1-80b4-00c04fd430c8".into());
    }
    c
}

#[test]
fn netdev_mode_plans_the_move_into_the_one_pod() {
    let c = netdev_claim(
        json!({"interfaceName": "net1", "mtu": 9000}),
        &["pod-1"],
        false,
    );
    let planned = plan(&c, "u1", &scope(), &fixtures::inventory()).unwrap();
    let netdev = planned[0].netdev.as_ref().expect("a netdev to move");
    assert_eq!(netdev.host_name, "eth0");
    assert_eq!(netdev.pod_uid, "pod-1");
    assert_eq!(
        (netdev.plan.name.as_str(), netdev.plan.mtu),
        ("net1", Some(9000))
    );
    // Without settings the pod sees the host's name.
    let c = netdev_claim(json!({}), &["pod-1"], false);
    let planned = plan(&c, "u1", &scope(), &fixtures::inventory()).unwrap();
    assert_eq!(planned[0].netdev.as_ref().unwrap().plan.name, "eth0");
    // And rdma mode moves nothing.
    let c = claim("c", "u1", &[("nic", D, "node-a", PF0)], json!([]));
    assert!(
        plan(&c, "u1", &scope(), &fixtures::inventory()).unwrap()[0]
            .netdev
            .is_none()
    );
}

#[test]
fn netdev_mode_refuses_shares_and_claims_of_several_pods() {
    for (pods, share, wanted) in [
        (&["a", "b"][..], false, "reserved for 2 pods"),
        (&[][..], false, "reserved for 0 pods"),
        (&["a"][..], true, "allocated as a share"),
    ] {
        let c = netdev_claim(json!({}), pods, share);
        let err = plan(&c, "u1", &scope(), &fixtures::inventory())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ns/c") && err.contains("request nic") && err.contains(wanted),
            "{err}"
        );
    }
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

/// A claim on PF0 reserved for one pod, with `class` and `claim` NicConfig
/// fields (a class entry and a claim entry).
fn class_and_claim(class: serde_json::Value, claim_fields: serde_json::Value) -> ResourceClaim {
    let config = json!([
        nic_config("FromClass", class),
        nic_config("FromClaim", claim_fields)
    ]);
    let mut c = claim("c", "u1", &[("nic", D, "node-a", PF0)], config);
    let reserved = json!([{"resource": "pods", "name": "p", "uid": "pod-1"}]);
    c.status.as_mut().unwrap().reserved_for = Some(serde_json::from_value(reserved).unwrap());
    c
}

/// Issue 29 item 6: the claim's netdev block replaced the class's, so a
/// claim that set only `mtu` planned a move without the class's addresses.
#[test]
fn netdev_mode_keeps_the_class_addresses_under_a_claim_setting_the_mtu() {
    let c = class_and_claim(
        json!({"mode": "netdev", "netdev": {"interfaceName": "net1", "addresses": ["10.10.0.2/24"]}}),
        json!({"netdev": {"mtu": 9000}}),
    );
    let planned = plan(&c, "u1", &scope(), &fixtures::inventory()).unwrap();
    let netdev = &planned[0].netdev.as_ref().expect("a netdev to move").plan;
    assert_eq!((netdev.name.as_str(), netdev.mtu), ("net1", Some(9000)));
    let addresses: Vec<String> = netdev
        .addresses
        .iter()
        .flatten()
        .map(|a| a.to_string())
        .collect();
    assert_eq!(addresses, ["10.10.0.2/24"]);
}
