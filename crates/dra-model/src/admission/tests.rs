use super::*;
use serde_json::{Value, json};

const D: &str = "ainic.amd.com";

fn nic(fields: Value) -> Value {
    let mut v = json!({"apiVersion": nic_config::API_VERSION, "kind": nic_config::KIND});
    v.as_object_mut()
        .unwrap()
        .extend(fields.as_object().unwrap().clone());
    v
}

fn class(name: &str, config: Option<Value>) -> DeviceClass {
    let config: Vec<Value> = config
        .into_iter()
        .map(|p| json!({"opaque": {"driver": D, "parameters": p}}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "selectors": [{"cel": {"expression": format!("device.driver == \"{D}\"")}}],
            "config": config,
        },
    }))
    .unwrap()
}

fn claim(requests: Value, config: Value) -> ResourceClaimSpec {
    serde_json::from_value(json!({"devices": {"requests": requests, "config": config}})).unwrap()
}

fn exactly(name: &str, class: &str) -> Value {
    json!({"name": name, "exactly": {"deviceClassName": class}})
}

fn entry(requests: &[&str], parameters: Value) -> Value {
    let mut e = json!({"opaque": {"driver": D, "parameters": parameters}});
    if !requests.is_empty() {
        e["requests"] = json!(requests);
    }
    e
}

#[test]
fn a_claim_is_judged_under_its_class_with_the_agents_words() {
    let classes = [class("pinned", Some(nic(json!({"netdev": {"mtu": 9000}}))))];
    let spec = claim(
        json!([exactly("nic", "pinned")]),
        json!([entry(&[], nic(json!({"netdev": {"mtu": 1500}})))]),
    );
    let err = check_claim(&spec, D, &classes).unwrap_err().to_string();
    assert_eq!(
        err,
        "FromClaim config for request \"nic\" sets netdev.mtu to 1500, but its DeviceClass pins netdev.mtu to 9000; drop netdev.mtu from the claim's config, or ask an admin for a class that leaves it unset"
    );
    let same = claim(
        json!([exactly("nic", "pinned")]),
        json!([entry(&[], nic(json!({"netdev": {"mtu": 9000}})))]),
    );
    check_claim(&same, D, &classes).unwrap();
}

#[test]
fn another_drivers_class_is_not_this_drivers_business() {
    let gpu: DeviceClass = serde_json::from_value(json!({"metadata": {"name": "gpu"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.amd.com'"}}]}}))
    .unwrap();
    let nic_class = class("ainic-pf", None);
    assert!(!is_drivers_class(&gpu, D) && is_drivers_class(&nic_class, D));
    // umad: true for every request: the NIC request is refused, not the GPU's.
    let spec = claim(
        json!([exactly("gpu", "gpu"), exactly("nic", "ainic-pf")]),
        json!([entry(&[], nic(json!({"umad": true})))]),
    );
    let err = check_claim(&spec, D, &[gpu.clone(), nic_class])
        .unwrap_err()
        .to_string();
    assert!(err.contains("request \"nic\" sets umad: true"), "{err}");
    // With only the GPU request, the entry reaches no request of ours: it
    // must parse, and does.
    let spec = claim(
        json!([exactly("gpu", "gpu")]),
        json!([entry(&[], nic(json!({"umad": true})))]),
    );
    check_claim(&spec, D, std::slice::from_ref(&gpu)).unwrap();
    let spec = claim(
        json!([exactly("gpu", "gpu")]),
        json!([entry(&["gpu"], nic(json!({"umadd": true})))]),
    );
    let err = check_claim(&spec, D, &[gpu]).unwrap_err().to_string();
    assert!(err.contains("unknown field `umadd`"), "{err}");
}

#[test]
fn a_missing_class_pins_nothing_but_the_claims_entries_must_parse() {
    let spec = claim(
        json!([exactly("nic", "not-yet")]),
        json!([entry(
            &[],
            nic(json!({"umad": true, "netdev": {"mtu": 9000}}))
        )]),
    );
    check_claim(&spec, D, &[]).unwrap();
    let spec = claim(
        json!([exactly("nic", "not-yet")]),
        json!([entry(&["nic"], nic(json!({"netdev": {"mtu": 20}})))]),
    );
    let err = check_claim(&spec, D, &[]).unwrap_err().to_string();
    assert_eq!(
        err,
        "FromClaim config for request \"nic\": netdev.mtu: 20 is outside 68 to 65535"
    );
}

#[test]
fn every_subrequest_of_first_available_is_judged() {
    let classes = [
        class("ainic-pf", None),
        class("ainic-mad", Some(nic(json!({"umad": true})))),
    ];
    let requests = json!([{"name": "nic", "firstAvailable": [
        {"name": "mad", "deviceClassName": "ainic-mad"},
        {"name": "plain", "deviceClassName": "ainic-pf"}]}]);
    let spec = claim(
        requests.clone(),
        json!([entry(&["nic"], nic(json!({"umad": true})))]),
    );
    let err = check_claim(&spec, D, &classes).unwrap_err().to_string();
    assert!(
        err.contains("request \"nic/plain\" sets umad: true"),
        "{err}"
    );
    let spec = claim(
        requests,
        json!([entry(&["nic/mad"], nic(json!({"umad": true})))]),
    );
    check_claim(&spec, D, &classes).unwrap();
}

#[test]
fn a_class_is_judged_alone_and_combined() {
    let spec = |config: Vec<Value>| -> DeviceClassSpec {
        let config: Vec<Value> = config
            .into_iter()
            .map(|p| json!({"opaque": {"driver": D, "parameters": p}}))
            .collect();
        serde_json::from_value(json!({"config": config})).unwrap()
    };
    check_class(&spec(vec![nic(json!({"mode": "netdev", "umad": true}))]), D).unwrap();
    let err = check_class(&spec(vec![nic(json!({"issmm": true}))]), D)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("invalid NicConfig in FromClass config for every request of the class: unknown field `issmm`"),
        "{err}"
    );
    // Valid one by one, not together: an IPv6 address with an MTU below 1280.
    let parts = vec![
        nic(json!({"mode": "netdev", "netdev": {"mtu": 1200}})),
        nic(json!({"netdev": {"addresses": ["fd00::2/64"]}})),
    ];
    let err = check_class(&spec(parts), D).unwrap_err().to_string();
    assert_eq!(
        err,
        "every request of the class: exclusive netdev mode: netdev.mtu: 1200 is below 1280, the least IPv6 needs"
    );
    let other: DeviceClassSpec = serde_json::from_value(json!({"config": [
        {"opaque": {"driver": "gpu.amd.com", "parameters": {"anything": 1}}}]}))
    .unwrap();
    check_class(&other, D).unwrap();
}
