//! The validator catches each upstream rule on its own: start from a valid
//! slice, break one thing, expect a violation at the right path.

use dra_model::validate::{Violation, check_pool, check_pool_for, check_slice};
use dra_model::{
    FeatureGate, FeatureGates, ModelConfig, ModelOptions, Release, build_slices, sample,
};
use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, DeviceAttribute, DeviceTaint, ResourceSlice,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

fn valid_pool(gates: FeatureGates) -> Vec<ResourceSlice> {
    let mut o = ModelOptions::new("node-a");
    o.gates = gates;
    o.shared_pfs = vec!["enp16s0".into()];
    let release = o.gates.release();
    let slices = build_slices(&sample::inventory(2, 2), &ModelConfig::new(o).unwrap()).slices;
    assert!(check_pool_for(&slices, release).is_empty());
    slices
}

fn valid_slice() -> ResourceSlice {
    valid_pool(FeatureGates::new()).remove(0)
}

fn broken(f: impl FnOnce(&mut ResourceSlice)) -> Vec<Violation> {
    let mut s = valid_slice();
    f(&mut s);
    check_slice(&s)
}

fn expect(violations: &[Violation], path_part: &str) {
    assert!(
        violations.iter().any(|v| v.path.contains(path_part)),
        "no violation at {path_part}: {violations:#?}"
    );
}

fn attr(s: &str) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(s.into()),
        ..Default::default()
    }
}

#[test]
fn device_count_limit() {
    let v = broken(|s| {
        let d = s.spec.devices.as_ref().unwrap()[0].clone();
        s.spec.devices = Some(
            (0..129)
                .map(|i| {
                    let mut d = d.clone();
                    d.name = format!("d{i}");
                    d
                })
                .collect(),
        );
    });
    expect(&v, "spec.devices");
    // 65 devices are fine without taints, too many with one.
    let mut s = valid_slice();
    let d = s.spec.devices.as_ref().unwrap()[0].clone();
    s.spec.devices = Some(
        (0..65)
            .map(|i| {
                let mut d = d.clone();
                d.name = format!("d{i}");
                d
            })
            .collect(),
    );
    assert!(check_slice(&s).is_empty());
    s.spec.devices.as_mut().unwrap()[0].taints = Some(vec![DeviceTaint {
        key: "a.b/c".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    }]);
    expect(&check_slice(&s), "spec.devices");
}

#[test]
fn attribute_rules() {
    let first = |s: &mut ResourceSlice| s.spec.devices.as_mut().unwrap().remove(0);
    let with = |f: fn(&mut k8s_openapi::api::resource::v1::Device)| {
        broken(|s| {
            let mut d = first(s);
            f(&mut d);
            s.spec.devices.as_mut().unwrap().insert(0, d);
        })
    };
    expect(
        &with(|d| {
            d.attributes
                .as_mut()
                .unwrap()
                .insert("x.io/long".into(), attr(&"x".repeat(65)));
        }),
        "x.io/long",
    );
    expect(
        &with(|d| {
            d.attributes
                .as_mut()
                .unwrap()
                .insert("x.io/bad-name".into(), attr("v"));
        }),
        "x.io/bad-name",
    );
    expect(
        &with(|d| {
            d.attributes.as_mut().unwrap().insert(
                "x.io/two".into(),
                DeviceAttribute {
                    int: Some(1),
                    bool: Some(true),
                    ..Default::default()
                },
            );
        }),
        "x.io/two",
    );
    expect(
        &with(|d| {
            d.attributes.as_mut().unwrap().insert(
                "x.io/ver".into(),
                DeviceAttribute {
                    version: Some("v1".into()),
                    ..Default::default()
                },
            );
        }),
        "x.io/ver",
    );
    expect(
        &with(|d| {
            for i in 0..32 {
                d.attributes
                    .as_mut()
                    .unwrap()
                    .insert(format!("x.io/a{i}"), attr("v"));
            }
        }),
        "spec.devices[0]",
    );
    expect(&with(|d| d.name = "PF_0".into()), "spec.devices[0].name");
}

#[test]
fn capacity_rules() {
    let v = broken(|s| {
        let cap = s.spec.devices.as_mut().unwrap()[0]
            .capacity
            .as_mut()
            .unwrap()
            .values_mut()
            .next()
            .unwrap();
        cap.request_policy = Some(CapacityRequestPolicy {
            default: Some(Quantity("1".into())),
            ..Default::default()
        });
    });
    expect(&v, "requestPolicy");
    let v = broken(|s| {
        let cap = s.spec.devices.as_mut().unwrap()[0]
            .capacity
            .as_mut()
            .unwrap()
            .values_mut()
            .next()
            .unwrap();
        cap.value = Quantity("lots".into());
    });
    expect(&v, "capacity[");
}

#[test]
fn request_policy_bounds() {
    let gates = FeatureGates::new().with(FeatureGate::DraConsumableCapacity, true);
    let mut pool = valid_pool(gates);
    let shared = pool[0]
        .spec
        .devices
        .as_mut()
        .unwrap()
        .iter_mut()
        .find(|d| d.allow_multiple_allocations == Some(true))
        .unwrap();
    let policy = shared
        .capacity
        .as_mut()
        .unwrap()
        .get_mut("ainic.amd.com/bandwidth")
        .unwrap()
        .request_policy
        .as_mut()
        .unwrap();
    policy.valid_range.as_mut().unwrap().max = Some(Quantity("800G".into()));
    policy.default = Some(Quantity("0".into()));
    let v = check_slice(&pool[0]);
    expect(&v, "validRange.max");
    expect(&v, "requestPolicy.default");
}

#[test]
fn node_selection_and_pool_fields() {
    expect(&broken(|s| s.spec.all_nodes = Some(true)), "spec");
    expect(&broken(|s| s.spec.node_name = None), "spec");
    expect(
        &broken(|s| s.spec.per_device_node_selection = Some(false)),
        "spec.perDeviceNodeSelection",
    );
    expect(
        &broken(|s| s.spec.pool.resource_slice_count = 0),
        "resourceSliceCount",
    );
    expect(&broken(|s| s.spec.pool.generation = -1), "generation");
    expect(&broken(|s| s.spec.pool.name = "Node A".into()), "pool.name");
    expect(&broken(|s| s.spec.driver = "AINIC".into()), "spec.driver");
    expect(
        &broken(|s| s.metadata.name = Some("x_y".into())),
        "metadata.name",
    );
    expect(
        &broken(|s| s.spec.devices.as_mut().unwrap()[0].node_name = Some("n".into())),
        "spec.devices[0]",
    );
}

#[test]
fn taint_rules() {
    let v = broken(|s| {
        s.spec.devices.as_mut().unwrap()[0].taints = Some(vec![DeviceTaint {
            key: "bad key".into(),
            value: Some("-x".into()),
            effect: "Sometimes".into(),
            time_added: None,
        }]);
    });
    expect(&v, "taints[0].key");
    expect(&v, "taints[0].value");
    expect(&v, "taints[0].effect");
}

#[test]
fn counters_and_pool_rules() {
    let gates =
        FeatureGates::for_release(Release::NEWEST).with(FeatureGate::DraConsumableCapacity, false);
    let pool = valid_pool(gates);
    // A slice with both counters and devices.
    let mut both = pool[1].clone();
    both.spec.shared_counters = pool[0].spec.shared_counters.clone();
    expect(&check_slice(&both), "spec");
    // Dropping the counter slice leaves dangling references and a wrong count.
    let v = check_pool(&pool[1..]);
    assert!(
        v.iter().any(|v| v.message.contains("unknown counter set")),
        "{v:#?}"
    );
    assert!(
        v.iter().any(|v| v.message.contains("resourceSliceCount")),
        "{v:#?}"
    );
    // Mixed generations.
    let mut mixed = pool.clone();
    mixed[0].spec.pool.generation = 3;
    assert!(
        check_pool(&mixed)
            .iter()
            .any(|v| v.message.contains("generation"))
    );
    // The same device twice.
    let mut dup = pool.clone();
    let d = dup[1].spec.devices.as_ref().unwrap()[0].clone();
    dup[1].spec.devices.as_mut().unwrap().push(d);
    assert!(!check_pool(&dup).is_empty());
}

#[test]
fn counters_beside_devices_are_the_1_34_rule_and_wrong_for_later_releases() {
    let gates = FeatureGates::new().with(FeatureGate::DraPartitionableDevices, true);
    let pool = valid_pool(gates.clone());
    let family = &pool[0];
    assert!(family.spec.shared_counters.is_some() && family.spec.devices.is_some());
    assert!(check_pool_for(&pool, Release::OLDEST).is_empty());
    expect(&check_slice(family), "spec");
    // 1.34 looks for a device's counter set in its own slice only.
    let mut moved = pool.clone();
    let sets = moved[0].spec.shared_counters.take();
    moved.push(moved[0].clone());
    moved[1].spec.devices = None;
    moved[1].spec.shared_counters = sets;
    moved[1].metadata.name = Some("node-a-counters".into());
    let count = moved.len() as i64;
    for s in &mut moved {
        s.spec.pool.resource_slice_count = count;
    }
    assert!(check_pool(&moved).is_empty(), "{:#?}", check_pool(&moved));
    let v = check_pool_for(&moved, Release::OLDEST);
    assert!(
        v.iter().any(|v| v.message.contains("unknown counter set")),
        "{v:#?}"
    );
}
