//! Property tests over random slices and claims: the allocator never
//! panics, and every allocation it returns satisfies every class selector,
//! request selector, count and constraint, and never hands out a device
//! twice or one that an allocated claim holds.

mod common;

use std::collections::{BTreeMap, HashSet};

use allocator::cel::Selector;
use allocator::{
    AllocateError, Allocator, AttributeValue, DeviceInfo, Features, NodeFacts, Release,
};
use common::*;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use proptest::prelude::*;
use serde_json::{Value, json};

const DRIVERS: [&str; 2] = ["a.example.com", "b.example.com"];

#[derive(Debug, Clone)]
struct Dev {
    level: Option<i64>,
    color: Option<&'static str>,
}

fn dev() -> impl Strategy<Value = Dev> {
    (
        proptest::option::weighted(0.8, 0i64..3),
        proptest::option::weighted(0.8, prop_oneof![Just("red"), Just("blue")]),
    )
        .prop_map(|(level, color)| Dev { level, color })
}

#[derive(Debug, Clone)]
struct Req {
    driver: usize,
    count: i64,
    all: bool,
    min_level: Option<i64>,
}

fn req() -> impl Strategy<Value = Req> {
    (
        0usize..2,
        1i64..3,
        proptest::bool::weighted(0.1),
        proptest::option::of(0i64..3),
    )
        .prop_map(|(driver, count, all, min_level)| Req {
            driver,
            count,
            all,
            min_level,
        })
}

#[derive(Debug, Clone)]
struct Con {
    distinct: bool,
    color: bool,
    scope: Option<usize>,
}

fn con() -> impl Strategy<Value = Con> {
    (
        any::<bool>(),
        any::<bool>(),
        proptest::option::of(0usize..3),
    )
        .prop_map(|(distinct, color, scope)| Con {
            distinct,
            color,
            scope,
        })
}

fn slices(pools: &[Vec<Dev>]) -> Vec<ResourceSlice> {
    pools
        .iter()
        .enumerate()
        .map(|(p, devs)| {
            let driver = DRIVERS[p % 2];
            let devices: Vec<Value> = devs
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let mut attrs = serde_json::Map::new();
                    if let Some(l) = d.level {
                        attrs.insert("level".into(), json!(l));
                    }
                    if let Some(c) = d.color {
                        attrs.insert("example.com/color".into(), json!(c));
                    }
                    device(&format!("p{p}-d{i}"), Value::Object(attrs))
                })
                .collect();
            slice_with(
                &format!("s{p}"),
                driver,
                &format!("pool-{p}"),
                json!({ "nodeName": "n1" }),
                json!(devices),
            )
        })
        .collect()
}

fn claims(reqs: &[Vec<Req>], cons: &[Vec<Con>]) -> Vec<ResourceClaim> {
    reqs.iter()
        .zip(cons)
        .enumerate()
        .map(|(c, (rs, cs))| {
            let requests: Vec<Value> = rs
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let driver = DRIVERS[r.driver];
                    let mut exactly = json!({ "deviceClassName": driver, "count": r.count });
                    if r.all {
                        exactly = json!({ "deviceClassName": driver, "allocationMode": "All" });
                    }
                    if let Some(min) = r.min_level {
                        exactly["selectors"] = json!([{ "cel": { "expression": format!("device.attributes['{driver}'].level >= {min}") } }]);
                    }
                    json!({ "name": format!("r{i}"), "exactly": exactly })
                })
                .collect();
            let constraints: Vec<Value> = cs
                .iter()
                .map(|k| {
                    let attribute = if k.color { "example.com/color" } else { "a.example.com/level" };
                    let kind = if k.distinct { "distinctAttribute" } else { "matchAttribute" };
                    let mut v = json!({ kind: attribute });
                    if let Some(s) = k.scope.filter(|&s| s < rs.len()) {
                        v["requests"] = json!([format!("r{s}")]);
                    }
                    v
                })
                .collect();
            claim(&format!("c{c}"), json!(requests), json!(constraints))
        })
        .collect()
}

/// Checks one successful allocation against everything it must satisfy.
fn check(
    allocator: &Allocator,
    claims: &[ResourceClaim],
    results: &[k8s_openapi::api::resource::v1::AllocationResult],
    held: &HashSet<String>,
) {
    let devices: BTreeMap<(String, String), &DeviceInfo> = allocator
        .devices()
        .map(|d| ((d.driver.clone(), d.name.clone()), d))
        .collect();
    let mut taken = HashSet::new();
    for (claim, result) in claims.iter().zip(results) {
        let spec = claim.spec.as_ref().unwrap().devices.as_ref().unwrap();
        let picked = result.devices.as_ref().unwrap().results.as_ref().unwrap();
        for request in spec.requests.as_ref().unwrap() {
            let exactly = request.exactly.as_ref().unwrap();
            let mine: Vec<&DeviceInfo> = picked
                .iter()
                .filter(|r| r.request == request.name)
                .map(|r| devices[&(r.driver.clone(), r.device.clone())])
                .collect();
            if exactly.allocation_mode.as_deref() != Some("All") {
                assert_eq!(
                    mine.len() as i64,
                    exactly.count.unwrap(),
                    "count of {}",
                    request.name
                );
            }
            let class =
                Selector::compile(&format!("device.driver == '{}'", exactly.device_class_name))
                    .unwrap();
            for d in &mine {
                assert_eq!(class.matches(d, false), Ok(true), "class of {}", d.name);
                for s in exactly.selectors.iter().flatten() {
                    let sel = Selector::compile(&s.cel.as_ref().unwrap().expression).unwrap();
                    assert_eq!(sel.matches(d, false), Ok(true), "selector of {}", d.name);
                }
            }
        }
        for r in picked {
            assert!(
                taken.insert(r.device.clone()),
                "{} allocated twice",
                r.device
            );
            assert!(
                !held.contains(&r.device),
                "{} is held by an allocated claim",
                r.device
            );
        }
        for constraint in spec.constraints.iter().flatten() {
            let scope = constraint.requests.clone().unwrap_or_default();
            let covered: Vec<&DeviceInfo> = picked
                .iter()
                .filter(|r| scope.is_empty() || scope.contains(&r.request))
                .map(|r| devices[&(r.driver.clone(), r.device.clone())])
                .collect();
            let attribute = constraint
                .match_attribute
                .as_ref()
                .or(constraint.distinct_attribute.as_ref())
                .unwrap();
            let (domain, name) = attribute.split_once('/').unwrap();
            let values: Vec<&AttributeValue> = covered
                .iter()
                .map(|d| {
                    d.attributes
                        .get(domain)
                        .and_then(|m| m.get(name))
                        .expect("constrained device has the attribute")
                })
                .collect();
            if constraint.match_attribute.is_some() {
                assert!(
                    values.windows(2).all(|w| w[0] == w[1]),
                    "matchAttribute {attribute}: {values:?}"
                );
            } else {
                for (i, a) in values.iter().enumerate() {
                    assert!(
                        values[i + 1..].iter().all(|b| a != b),
                        "distinctAttribute {attribute}: {values:?}"
                    );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    #[test]
    fn allocations_satisfy_everything_and_never_panic(
        pools in proptest::collection::vec(proptest::collection::vec(dev(), 2..9), 1..5),
        reqs in proptest::collection::vec(proptest::collection::vec(req(), 1..3), 1..3),
        cons in proptest::collection::vec(proptest::collection::vec(con(), 0..2), 3),
        held_count in 0usize..3,
    ) {
        let slices = slices(&pools);
        let classes = [class(DRIVERS[0], DRIVERS[0]), class(DRIVERS[1], DRIVERS[1])];
        let claims = claims(&reqs, &cons[..reqs.len()]);
        // Hold the first devices of pool 0 with an allocated claim.
        let held_devices: Vec<String> = (0..held_count.min(pools[0].len())).map(|i| format!("p0-d{i}")).collect();
        let held_claims: Vec<ResourceClaim> = if held_devices.is_empty() { vec![] } else {
            let results: Vec<Value> = held_devices.iter().map(|d| json!({ "request": "x", "driver": DRIVERS[0], "pool": "pool-0", "device": d })).collect();
            let result = serde_json::from_value(json!({ "devices": { "results": results } })).unwrap();
            vec![allocated(claim("held", json!([]), json!([])), result)]
        };
        let allocator = Allocator::new(Features::for_release(Release::V1_37), &slices, &classes, &held_claims).unwrap();
        match allocator.allocate(&NodeFacts::named("n1"), &claims) {
            Ok(results) => {
                prop_assert_eq!(results.len(), claims.len());
                check(&allocator, &claims, &results, &held_devices.into_iter().collect());
            }
            Err(AllocateError::Unsatisfiable(f)) => prop_assert!(!f.explanation.is_empty()),
            // As upstream's: selectors over attributes a device lacks
            // abort, and so does an `All` request whose matching device
            // breaks a constraint.
            Err(AllocateError::Input(allocator::InputError::Aborted { reason })) => {
                prop_assert!(
                    reason.contains("CEL runtime error") || reason.contains("a claim constraint would not be satisfied"),
                    "{}", reason
                )
            }
            Err(AllocateError::Input(e)) => prop_assert!(false, "unexpected input error {}", e),
        }
    }

    #[test]
    fn enough_free_devices_are_always_found(
        pools in proptest::collection::vec(proptest::collection::vec(dev(), 0..6), 1..4),
        reqs in proptest::collection::vec(proptest::collection::vec(req(), 1..3), 1..3),
    ) {
        let reqs: Vec<Vec<Req>> = reqs.into_iter().map(|rs| rs.into_iter().map(|r| Req { all: false, min_level: None, ..r }).collect()).collect();
        let mut supply = [0i64; 2];
        for (p, devs) in pools.iter().enumerate() {
            supply[p % 2] += devs.len() as i64;
        }
        let mut demand = [0i64; 2];
        for r in reqs.iter().flatten() {
            demand[r.driver] += r.count;
        }
        let claims = claims(&reqs, &vec![vec![]; reqs.len()]);
        let classes = [class(DRIVERS[0], DRIVERS[0]), class(DRIVERS[1], DRIVERS[1])];
        let result = Allocator::new(Features::for_release(Release::V1_37), &slices(&pools), &classes, &[]).unwrap().allocate(&NodeFacts::named("n1"), &claims);
        prop_assert_eq!(result.is_ok(), demand[0] <= supply[0] && demand[1] <= supply[1], "{:?}", result.err());
    }

    #[test]
    fn arbitrary_selector_text_never_panics(text in "[ -~]{0,60}") {
        if let Ok(selector) = Selector::compile(&text) {
            let d = Allocator::new(Features::for_release(Release::V1_37), &slices(&[vec![Dev { level: Some(1), color: Some("red") }]]), &[], &[]).unwrap();
            let device = d.devices().next().unwrap();
            let _ = selector.matches(device, true);
        }
    }

    #[test]
    fn arbitrary_quantities_never_panic(text in "[-+0-9.eEkMGTPiunm]{0,24}") {
        if let Ok(q) = allocator::quantity::Quantity::parse(&text) {
            let _ = (q.checked_add(&q), q.checked_sub(&q), q.as_i64(), q.as_f64(), q.to_string(), q.cmp(&q));
        }
    }
}
