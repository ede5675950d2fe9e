//! Unit tests of the pure pool planning.

use k8s_openapi::api::resource::v1::{
    Device, DeviceTaint, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

use super::*;

fn owner() -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: "n1".into(),
        uid: "uid-1".into(),
        controller: Some(true),
        ..Default::default()
    }
}

fn desired(name: Option<&str>, devices: &[&str]) -> ResourceSlice {
    ResourceSlice {
        metadata: ObjectMeta {
            name: name.map(str::to_string),
            ..Default::default()
        },
        spec: ResourceSliceSpec {
            driver: "ainic.amd.com".into(),
            node_name: Some("n1".into()),
            pool: ResourcePool {
                name: "n1".into(),
                generation: 0,
                resource_slice_count: 0,
            },
            devices: Some(
                devices
                    .iter()
                    .map(|d| Device {
                        name: d.to_string(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        },
    }
}

/// What the server would hold after publishing `slices` at `generation`.
fn stored(slices: &[ResourceSlice], generation: i64) -> Vec<ResourceSlice> {
    let count = slices.len() as i64;
    slices
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut s = s.clone();
            s.spec.pool.generation = generation;
            s.spec.pool.resource_slice_count = count;
            s.metadata.name.get_or_insert_with(|| format!("gen-{i}"));
            s.metadata.resource_version = Some(format!("{}", 10 + i));
            s.metadata.uid = Some(format!("u{i}"));
            s.metadata.owner_references = Some(vec![owner()]);
            s
        })
        .collect()
}

#[test]
fn identical_pool_needs_no_writes_even_when_uid_unknown() {
    let want = [desired(Some("a"), &["nic0"]), desired(Some("b"), &["nic1"])];
    let existing = stored(&want, 4);
    let without_uid = OwnerReference {
        uid: String::new(),
        ..owner()
    };
    assert_eq!(
        plan(&existing, &want, &without_uid),
        SliceWrites::Unchanged { generation: 4 }
    );
}

#[test]
fn empty_pool_with_nothing_desired_is_unchanged() {
    assert_eq!(
        plan(&[], &[], &owner()),
        SliceWrites::Unchanged { generation: 0 }
    );
}

#[test]
fn first_publish_creates_every_slice_at_generation_one() {
    let want = [desired(Some("a"), &["nic0"]), desired(None, &["nic1"])];
    let SliceWrites::Publish { generation, writes } = plan(&[], &want, &owner()) else {
        panic!("expected writes")
    };
    assert_eq!(generation, 1);
    assert_eq!(writes.len(), 2);
    for write in &writes {
        let Write::Create(s) = write else {
            panic!("expected create: {write:?}")
        };
        assert_eq!(
            (s.spec.pool.generation, s.spec.pool.resource_slice_count),
            (1, 2)
        );
        assert_eq!(s.metadata.owner_references.as_deref(), Some(&[owner()][..]));
    }
}

#[test]
fn one_changed_device_rewrites_all_slices_at_next_generation() {
    let old = [desired(Some("a"), &["nic0"]), desired(Some("b"), &["nic1"])];
    let existing = stored(&old, 3);
    let want = [
        desired(Some("a"), &["nic0"]),
        desired(Some("b"), &["nic1", "nic2"]),
    ];
    let SliceWrites::Publish { generation, writes } = plan(&existing, &want, &owner()) else {
        panic!()
    };
    assert_eq!(generation, 4);
    let updates: Vec<_> = writes
        .iter()
        .map(|w| match w {
            Write::Update(s) => (
                s.metadata.name.clone().unwrap(),
                s.metadata.resource_version.clone().unwrap(),
            ),
            other => panic!("expected only updates: {other:?}"),
        })
        .collect();
    assert_eq!(
        updates,
        [
            ("a".to_string(), "10".to_string()),
            ("b".to_string(), "11".to_string())
        ]
    );
}

#[test]
fn stale_and_older_generation_slices_are_deleted_after_all_writes() {
    let old = [
        desired(Some("a"), &["nic0"]),
        desired(Some("extra"), &["nic9"]),
    ];
    let mut existing = stored(&old, 7);
    let mut leftover = stored(&[desired(Some("older"), &["nic0"])], 2);
    existing.append(&mut leftover);
    let want = [desired(Some("a"), &["nic0"]), desired(Some("c"), &["nic1"])];
    let SliceWrites::Publish { generation, writes } = plan(&existing, &want, &owner()) else {
        panic!()
    };
    assert_eq!(generation, 8);
    let kinds: Vec<(&str, &str)> = writes
        .iter()
        .map(|w| match w {
            Write::Update(s) => ("update", s.metadata.name.as_deref().unwrap()),
            Write::Create(s) => ("create", s.metadata.name.as_deref().unwrap()),
            Write::Delete(s) => ("delete", s.metadata.name.as_deref().unwrap()),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("update", "a"),
            ("create", "c"),
            ("delete", "extra"),
            ("delete", "older")
        ]
    );
}

#[test]
fn unnamed_desired_slices_reuse_existing_slices_with_equal_content_first() {
    let existing = stored(&[desired(None, &["nic0"]), desired(None, &["nic1"])], 1);
    let want = [desired(None, &["nic1"]), desired(None, &["nic5"])];
    let SliceWrites::Publish { writes, .. } = plan(&existing, &want, &owner()) else {
        panic!()
    };
    let names: Vec<_> = writes
        .iter()
        .map(|w| match w {
            Write::Update(s) => s.metadata.name.clone().unwrap(),
            other => panic!("expected updates only: {other:?}"),
        })
        .collect();
    assert_eq!(names, ["gen-1", "gen-0"]);
}

#[test]
fn driver_requested_generation_wins_when_higher() {
    let mut want = desired(Some("a"), &["nic0"]);
    want.spec.pool.generation = 42;
    let SliceWrites::Publish { generation, .. } = plan(&[], &[want], &owner()) else {
        panic!()
    };
    assert_eq!(generation, 42);
}

#[test]
fn server_stamped_taint_time_is_ignored_and_kept() {
    let taint = DeviceTaint {
        key: "ainic.amd.com/unhealthy".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    let mut want = desired(Some("a"), &["nic0"]);
    want.spec.devices.as_mut().unwrap()[0].taints = Some(vec![taint]);
    let mut existing = stored(std::slice::from_ref(&want), 2);
    let stamp = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    existing[0].spec.devices.as_mut().unwrap()[0]
        .taints
        .as_mut()
        .unwrap()[0]
        .time_added = Some(stamp.clone());
    assert_eq!(
        plan(&existing, std::slice::from_ref(&want), &owner()),
        SliceWrites::Unchanged { generation: 2 }
    );
    // A change elsewhere rewrites the slice but keeps the taint's original time.
    want.metadata.labels = Some([("x".to_string(), "y".to_string())].into());
    let SliceWrites::Publish { writes, .. } = plan(&existing, &[want], &owner()) else {
        panic!()
    };
    let Write::Update(s) = &writes[0] else {
        panic!()
    };
    let taints = s.spec.devices.as_ref().unwrap()[0].taints.as_ref().unwrap();
    assert_eq!(taints[0].time_added, Some(stamp));
}

#[test]
fn same_named_slice_of_another_pool_is_deleted_before_the_create() {
    // A previous driver version named its pool differently; pool names are
    // immutable, so the old slice cannot be updated into the new pool.
    let mut old = desired(Some("a"), &["nic0"]);
    old.spec.pool.name = "legacy".into();
    let existing = stored(&[old], 3);
    let want = [desired(Some("a"), &["nic0"])];
    let SliceWrites::Publish { generation, writes } = plan(&existing, &want, &owner()) else {
        panic!()
    };
    assert_eq!(generation, 4);
    assert!(
        matches!(&writes[..], [Write::Delete(d), Write::Create(c)]
        if d.spec.pool.name == "legacy" && c.spec.pool.name == "n1"),
        "{writes:?}"
    );
}

#[test]
fn labels_owners_and_slice_count_are_content_but_server_metadata_is_not() {
    let want = [desired(Some("a"), &["nic0"]), desired(Some("b"), &["nic1"])];
    let existing = stored(&want, 2);
    let mut touched = existing.clone();
    touched[0].metadata.resource_version = Some("99".into());
    touched[0].metadata.uid = Some("other".into());
    assert_eq!(contents(&touched), contents(&existing));
    let mut labelled = existing.clone();
    labelled[1].metadata.labels = Some([("k".to_string(), "v".to_string())].into());
    let mut owned = existing.clone();
    owned[0].metadata.owner_references.as_mut().unwrap()[0].kind = "Pod".into();
    let mut counted = existing.clone();
    counted[1].spec.pool.resource_slice_count = 3;
    for changed in [labelled, owned, counted] {
        assert_ne!(contents(&changed), contents(&existing));
        assert!(matches!(
            plan(&changed, &want, &owner()),
            SliceWrites::Publish { generation: 3, .. }
        ));
    }
}
