//! Counter health in the published slices: the taints of unhealthy and
//! degraded PFs and their VFs, by release and gate, and that the API rules
//! accept them.

use dra_model::health::{Level, Verdict, Verdicts};
use dra_model::validate::{check_pool_for, check_slice_for};
use dra_model::{
    FeatureGate, FeatureGates, ModelConfig, ModelOptions, Release, SliceSet, build_slices, sample,
};
use k8s_openapi::api::resource::v1::DeviceTaint;

fn verdict(level: Level, counter: &str) -> Verdicts {
    Verdicts::from([(
        sample::pf_address(0),
        Verdict {
            level,
            counter: counter.into(),
        },
    )])
}

/// Two PFs with two VFs each, PF 0 judged `health`, for `gates`.
fn build(gates: FeatureGates, health: Verdicts) -> SliceSet {
    let mut o = ModelOptions::new("node-a");
    o.gates = gates;
    let release = o.gates.release();
    let config = ModelConfig::new(o).unwrap().with_health(health);
    let set = build_slices(&sample::inventory(2, 2), &config);
    let violations = check_pool_for(&set.slices, release);
    assert!(violations.is_empty(), "{violations:#?}");
    set
}

fn taints(set: &SliceSet, device: &str) -> Vec<(String, String, String)> {
    let d = set.device(device).unwrap_or_else(|| panic!("no {device}"));
    (d.taints.iter().flatten())
        .map(|t| {
            (
                t.key.clone(),
                t.value.clone().unwrap_or_default(),
                t.effect.clone(),
            )
        })
        .collect()
}

fn with_taints(release: Release) -> FeatureGates {
    FeatureGates::for_release(release).with(FeatureGate::DraDeviceTaints, true)
}

#[test]
fn an_unhealthy_pf_and_its_vfs_are_tainted_no_schedule_naming_the_counter() {
    let set = build(
        with_taints(Release::NEWEST),
        verdict(Level::Unhealthy, "symbol_error"),
    );
    let wanted = vec![(
        "ainic.amd.com/unhealthy".to_string(),
        "symbol_error".to_string(),
        "NoSchedule".to_string(),
    )];
    for device in ["pf-0000-10-00-0", "vf-0000-11-00-0", "vf-0000-11-00-1"] {
        assert_eq!(taints(&set, device), wanted, "{device}");
    }
    for device in ["pf-0000-20-00-0", "vf-0000-21-00-0"] {
        assert!(taints(&set, device).is_empty(), "{device}");
    }
    // 1.34 with the gate on: NoSchedule exists there too.
    let old = build(
        with_taints(Release::OLDEST),
        verdict(Level::Unhealthy, "link_downed"),
    );
    assert_eq!(taints(&old, "vf-0000-11-00-0")[0].1, "link_downed");
}

#[test]
fn a_degraded_pf_is_tainted_informationally_where_the_release_has_effect_none() {
    let degraded = || verdict(Level::Degraded, "carrier_changes");
    let set = build(with_taints(Release::NEWEST), degraded());
    assert_eq!(
        taints(&set, "pf-0000-10-00-0"),
        [(
            "ainic.amd.com/degraded".to_string(),
            "carrier_changes".to_string(),
            "None".to_string()
        )]
    );
    // (Before 1.36 a PF with VFs is published as its VFs.)
    let r135 = Release::of_minor(35).unwrap();
    assert_eq!(
        taints(&build(with_taints(r135), degraded()), "vf-0000-11-00-1")[0].2,
        "None"
    );
    // 1.34 has no effect None: no taint (health stream, metric and Event
    // still say it); no gate: no taint at all.
    assert!(
        taints(
            &build(with_taints(Release::OLDEST), degraded()),
            "vf-0000-11-00-1"
        )
        .is_empty()
    );
    let off = FeatureGates::for_release(Release::NEWEST).with(FeatureGate::DraDeviceTaints, false);
    assert!(
        build(off.clone(), degraded())
            .devices()
            .all(|d| d.taints.is_none())
    );
    assert!(
        build(off, verdict(Level::Unhealthy, "x"))
            .devices()
            .all(|d| d.taints.is_none())
    );
}

#[test]
fn a_link_down_outranks_the_counters() {
    let mut o = ModelOptions::new("node-a");
    o.gates = with_taints(Release::NEWEST);
    let config = ModelConfig::new(o)
        .unwrap()
        .with_health(verdict(Level::Degraded, "symbol_error"));
    let mut inv = sample::inventory(1, 0);
    inv.nics[0] = sample::pf(0, 0, false);
    let set = build_slices(&inv, &config);
    assert_eq!(taints(&set, "pf-0000-10-00-0")[0].1, "link-down");
}

#[test]
fn effect_none_is_valid_from_1_35_only() {
    let mut set = build(with_taints(Release::NEWEST), Verdicts::new());
    let slice = (set.slices.iter_mut())
        .find(|s| s.spec.devices.is_some())
        .unwrap();
    slice.spec.devices.as_mut().unwrap()[0].taints = Some(vec![DeviceTaint {
        key: "ainic.amd.com/degraded".into(),
        value: Some("symbol_error".into()),
        effect: "None".into(),
        time_added: None,
    }]);
    assert!(check_slice_for(slice, Release::of_minor(35).unwrap()).is_empty());
    let v = check_slice_for(slice, Release::OLDEST);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(v[0].path.ends_with("taints[0].effect"), "{v:#?}");
}
