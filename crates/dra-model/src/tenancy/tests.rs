//! Who gets a sticky PF, pass by pass.

use serde_json::json;

use super::*;

const DRIVER: &str = "ainic.amd.com";

/// A claim of namespace `ns` allocated at second `at`, holding a share of
/// each PF in `pfs` (device name, share ID, condition set or not).
fn claim(ns: &str, name: &str, at: u32, pfs: &[(&str, &str, Option<&str>)]) -> ResourceClaim {
    let results: Vec<_> = pfs
        .iter()
        .map(|(device, share, _)| {
            json!({"request": "nic", "driver": DRIVER, "pool": "node-1", "device": device,
                   "shareID": share,
                   "bindingConditions": [format!("{DRIVER}/tenant-bound")],
                   "bindingFailureConditions": [format!("{DRIVER}/tenant-conflict")]})
        })
        .collect();
    let devices: Vec<_> = pfs
        .iter()
        .filter_map(|(device, share, condition)| {
            let kind = (*condition)?;
            Some(
                json!({"driver": DRIVER, "pool": "node-1", "device": device, "shareID": share,
                "conditions": [{"type": format!("{DRIVER}/{kind}"), "status": "True",
                    "reason": "X", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
            )
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"namespace": ns, "name": name, "uid": format!("uid-{name}")},
        "spec": {},
        "status": {"allocation": {
            "allocationTimestamp": format!("2026-01-01T00:00:{at:02}Z"),
            "devices": {"results": results}}, "devices": devices},
    }))
    .unwrap()
}

fn tenant(ns: &str) -> String {
    ns.trim_start_matches("ns-").to_string()
}

fn nodes(labels: &[(&str, &str)]) -> BTreeMap<String, BTreeMap<String, String>> {
    let labels = labels
        .iter()
        .map(|(device, t)| (bound_label(DRIVER, device), t.to_string()))
        .collect();
    BTreeMap::from([("node-1".to_string(), labels)])
}

fn answers(plan: &TenantWrites) -> Vec<(String, Vec<Answer>)> {
    (plan.claims.iter())
        .map(|c| {
            (
                c.name.clone(),
                c.shares.iter().map(|(_, a)| a.clone()).collect(),
            )
        })
        .collect()
}

const PF: &str = "pf-0000-84-00-0";
const PF2: &str = "pf-0000-a4-00-0";

#[test]
fn of_two_tenants_allocated_together_the_first_allocated_binds_the_pf() {
    let claims = [
        claim("ns-b", "late", 2, &[(PF, "s2", None)]),
        claim("ns-a", "early", 1, &[(PF, "s1", None)]),
    ];
    let plan = plan(&claims, &nodes(&[]), &tenant, DRIVER);
    let got = answers(&plan);
    assert_eq!(got[0], ("early".to_string(), vec![Answer::Bound]));
    let Answer::Conflict(why) = &got[1].1[0] else {
        panic!("{got:?}")
    };
    assert!(
        why.contains("bound to tenant a") && why.contains("tenant b cannot"),
        "{why}"
    );
    assert_eq!(
        plan.labels,
        [LabelChange {
            node: "node-1".into(),
            key: format!("{DRIVER}/bound-tenant.{PF}"),
            value: Some("a".into())
        }]
    );
}

#[test]
fn a_held_pf_takes_more_of_its_tenant_and_refuses_the_others() {
    let claims = [
        claim("ns-a", "held", 1, &[(PF, "s1", Some("tenant-bound"))]),
        claim("ns-b", "other", 2, &[(PF, "s2", None)]),
        claim("ns-a", "more", 3, &[(PF, "s3", None)]),
    ];
    let plan = plan(&claims, &nodes(&[(PF, "a")]), &tenant, DRIVER);
    let got = answers(&plan);
    assert!(matches!(got[0].1[..], [Answer::Conflict(_)]), "{got:?}");
    assert_eq!(got[1], ("more".to_string(), vec![Answer::Bound]));
    assert!(plan.labels.is_empty(), "{:?}", plan.labels);
}

#[test]
fn a_holder_outranks_a_label_that_disagrees() {
    // Someone relabelled the node: the claims holding the PF decide.
    let claims = [
        claim("ns-a", "held", 1, &[(PF, "s1", Some("tenant-bound"))]),
        claim("ns-b", "other", 2, &[(PF, "s2", None)]),
    ];
    let plan = plan(&claims, &nodes(&[(PF, "b")]), &tenant, DRIVER);
    assert!(matches!(answers(&plan)[0].1[..], [Answer::Conflict(_)]));
    assert_eq!(plan.labels[0].value.as_deref(), Some("a"));
}

#[test]
fn the_label_goes_with_the_last_share_and_refused_claims_hold_nothing() {
    let claims = [claim(
        "ns-b",
        "refused",
        2,
        &[(PF, "s2", Some("tenant-conflict"))],
    )];
    let plan = plan(&claims, &nodes(&[(PF, "a"), (PF2, "a")]), &tenant, DRIVER);
    assert!(plan.claims.is_empty());
    let removed: Vec<_> = plan
        .labels
        .iter()
        .map(|l| (l.key.clone(), l.value.clone()))
        .collect();
    assert_eq!(
        removed,
        [
            (format!("{DRIVER}/bound-tenant.{PF}"), None),
            (format!("{DRIVER}/bound-tenant.{PF2}"), None)
        ]
    );
}

#[test]
fn a_claim_with_one_share_refused_binds_none_of_its_shares() {
    let claims = [
        claim("ns-a", "held", 1, &[(PF, "s1", Some("tenant-bound"))]),
        claim("ns-b", "two", 2, &[(PF, "s2", None), (PF2, "s3", None)]),
        claim("ns-c", "next", 3, &[(PF2, "s4", None)]),
    ];
    let plan = plan(&claims, &nodes(&[(PF, "a")]), &tenant, DRIVER);
    let two = &plan.claims[0];
    assert_eq!(two.shares.len(), 1, "{two:?}");
    assert_eq!(two.shares[0].0.pf.device, PF);
    // PF2 stayed free, so the next tenant gets it.
    assert_eq!(answers(&plan)[1], ("next".to_string(), vec![Answer::Bound]));
}

#[test]
fn two_tenants_holding_one_pf_are_reported() {
    let claims = [
        claim("ns-a", "x", 1, &[(PF, "s1", Some("tenant-bound"))]),
        claim("ns-b", "y", 2, &[(PF, "s2", Some("tenant-bound"))]),
    ];
    let plan = plan(&claims, &nodes(&[]), &tenant, DRIVER);
    assert_eq!(plan.violations.len(), 1, "{plan:?}");
    assert!(plan.violations[0].contains(PF));
}

#[test]
fn claims_without_sticky_shares_are_not_answered() {
    let mut plain = claim("ns-a", "plain", 1, &[(PF, "s1", None)]);
    let results = (plain.status.as_mut().unwrap().allocation.as_mut())
        .and_then(|a| a.devices.as_mut())
        .and_then(|d| d.results.as_mut())
        .unwrap();
    results[0].binding_conditions = None;
    assert!(!in_use(std::slice::from_ref(&plain), &nodes(&[]), DRIVER));
    assert!(in_use(
        std::slice::from_ref(&plain),
        &nodes(&[(PF, "a")]),
        DRIVER
    ));
    let plan = plan(&[plain], &nodes(&[]), &tenant, DRIVER);
    assert_eq!(plan, TenantWrites::default());
}

#[test]
fn a_second_answer_restates_the_first() {
    // A conflict answered, the other share still pending: the next pass's
    // write keeps the conflict (a write names all the controller owns) and
    // binds nothing more for a claim being refused.
    let claims = [
        claim("ns-a", "held", 1, &[(PF, "s1", Some("tenant-bound"))]),
        claim(
            "ns-b",
            "two",
            2,
            &[(PF, "s2", Some("tenant-conflict")), (PF2, "s3", None)],
        ),
    ];
    let plan = plan(&claims, &nodes(&[(PF, "a")]), &tenant, DRIVER);
    let two = &plan.claims[0].shares;
    assert_eq!(two.len(), 1, "{two:?}");
    assert!(matches!(two[0].1, Answer::Conflict(_)));
    // The claim is being given back: its free share binds nothing.
    assert!(plan.labels.is_empty(), "{:?}", plan.labels);
}

#[test]
fn shares_taken_before_the_pf_was_sticky_hold_it() {
    // Tenant a's share predates the binding conditions (the gate came on
    // with an upgrade): b's claim with conditions must not get the PF.
    let mut legacy = claim("ns-a", "legacy", 1, &[(PF, "s1", None)]);
    let results = (legacy.status.as_mut().unwrap().allocation.as_mut())
        .and_then(|a| a.devices.as_mut())
        .and_then(|d| d.results.as_mut())
        .unwrap();
    results[0].binding_conditions = None;
    results[0].binding_failure_conditions = None;
    let claims = [legacy, claim("ns-b", "new", 2, &[(PF, "s2", None)])];
    let plan = plan(&claims, &nodes(&[]), &tenant, DRIVER);
    assert!(
        matches!(answers(&plan)[0].1[..], [Answer::Conflict(_)]),
        "{plan:?}"
    );
    assert_eq!(
        plan.labels[0].value.as_deref(),
        Some("a"),
        "the binding is recorded"
    );
}

#[test]
fn an_unlabelled_namespace_is_a_tenant_no_label_can_name() {
    assert_eq!(tenant_identity("x", Some("team-b")), "team-b");
    assert_eq!(tenant_identity("team-b", None), "ns.team-b");
    assert_eq!(tenant_identity("team-c", Some("Not_A_Label")), "ns.team-c");
    let long = "n".repeat(63);
    let id = tenant_identity(&long, None);
    assert!(id.len() <= 63 && id.starts_with("ns.nnnn"), "{id}");
    assert_ne!(id, tenant_identity(&"n".repeat(62), None));
}
