//! Which slices a node sees: nodeName, nodeSelector against Node labels,
//! allNodes, per-device selection; pool generations, incomplete and
//! invalid pools — after upstream's `GatherPools`.

mod common;

use allocator::{AllocateError, Features, InputError, NodeFacts, PoolIssue, PoolProblem, Release};
use common::*;
use serde_json::json;

fn labelled(name: &str, rack: &str) -> NodeFacts {
    let mut node = NodeFacts::named(name);
    node.labels.insert("rack".into(), rack.into());
    node
}

fn one(class: &str) -> k8s_openapi::api::resource::v1::ResourceClaim {
    claim("c", json!([exactly("d", class, 1)]), json!([]))
}

#[test]
fn other_nodes_slices_are_not_used() {
    let slices = [slice(
        "n2-s",
        "n2",
        "d.example.com",
        json!([device("other", json!({}))]),
    )];
    let err = failure(allocate(
        &slices,
        &[class("d", "d.example.com")],
        &[],
        "n1",
        &[one("d")],
    ));
    assert!(err.contains("0 devices match class d"), "{err}");
    assert!(
        err.contains("no ResourceSlice offers devices to node n1"),
        "{err}"
    );
}

#[test]
fn node_selector_slices_match_node_labels_and_carry_into_the_result() {
    let selector = json!({ "nodeSelector": { "nodeSelectorTerms": [{ "matchExpressions": [{ "key": "rack", "operator": "In", "values": ["r1"] }] }] } });
    let slices = [slice_with(
        "fabric",
        "fabric.example.com",
        "fabric",
        selector,
        json!([device("partition-0", json!({}))]),
    )];
    let classes = [class("f", "fabric.example.com")];
    let out = allocate_with(
        Features::default(),
        &slices,
        &classes,
        &[],
        &labelled("n1", "r1"),
        &[one("f")],
    )
    .unwrap();
    let term = &out[0].node_selector.as_ref().unwrap().node_selector_terms[0];
    assert_eq!(term.match_expressions.as_ref().unwrap()[0].key, "rack");
    failure(allocate_with(
        Features::default(),
        &slices,
        &classes,
        &[],
        &labelled("n1", "r2"),
        &[one("f")],
    ));
}

#[test]
fn all_nodes_slices_give_results_without_node_selector() {
    let slices = [slice_with(
        "net",
        "net.example.com",
        "global",
        json!({ "allNodes": true }),
        json!([device("vlan-7", json!({}))]),
    )];
    let out = allocate(
        &slices,
        &[class("n", "net.example.com")],
        &[],
        "anywhere",
        &[one("n")],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["vlan-7"]);
    assert!(out[0].node_selector.is_none());
}

#[test]
fn only_the_newest_generation_of_a_pool_is_used() {
    let mut old = slice(
        "old",
        "n1",
        "d.example.com",
        json!([device("old-dev", json!({}))]),
    );
    let mut new = slice(
        "new",
        "n1",
        "d.example.com",
        json!([device("new-dev", json!({}))]),
    );
    old.spec.pool.generation = 1;
    new.spec.pool.generation = 2;
    let out = allocate(
        &[old, new],
        &[class("d", "d.example.com")],
        &[],
        "n1",
        &[one("d")],
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["new-dev"]);
}

#[test]
fn incomplete_pools_serve_exact_counts_but_block_all_mode() {
    let mut s = slice(
        "part-1",
        "n1",
        "d.example.com",
        json!([device("d0", json!({}))]),
    );
    s.spec.pool.resource_slice_count = 2;
    let classes = [class("d", "d.example.com")];
    // Kubernetes 1.34: the slices present are used for ExactCount.
    let out = allocate(std::slice::from_ref(&s), &classes, &[], "n1", &[one("d")]).unwrap();
    assert_eq!(names(&out[0]), ["d0"]);
    let all = claim(
        "c",
        json!([{ "name": "d", "exactly": { "deviceClassName": "d", "allocationMode": "All" } }]),
        json!([]),
    );
    // Upstream aborts (invalid input) rather than failing the node.
    let err = allocate(
        std::slice::from_ref(&s),
        &classes,
        &[],
        "n1",
        std::slice::from_ref(&all),
    );
    let err = err.unwrap_err().to_string();
    assert!(err.contains("being updated"), "{err}");
    // From 1.35 the search passes over an incomplete pool.
    let f = Features::for_release(Release::V1_37);
    let node = NodeFacts::named("n1");
    let out = allocate_with(
        f,
        std::slice::from_ref(&s),
        &classes,
        &[],
        &node,
        &[one("d")],
    );
    assert!(failure(out).contains("being updated"));
    let err = allocate_with(f, &[s], &classes, &[], &node, &[all]).unwrap_err();
    assert!(err.to_string().contains("being updated"), "{err}");
}

#[test]
fn pools_with_duplicate_device_names_are_invalid() {
    let a = slice(
        "a",
        "n1",
        "d.example.com",
        json!([device("same", json!({}))]),
    );
    let mut b = slice(
        "b",
        "n1",
        "d.example.com",
        json!([device("same", json!({}))]),
    );
    let mut a2 = a.clone();
    a2.spec.pool.resource_slice_count = 2;
    b.spec.pool.resource_slice_count = 2;
    let classes = [class("d", "d.example.com")];
    // 1.34: reaching the invalid pool aborts the allocation.
    let err = allocate(&[a2.clone(), b.clone()], &classes, &[], "n1", &[one("d")]);
    let err = err.unwrap_err().to_string();
    assert!(err.contains("duplicate device name same"), "{err}");
    // 1.35 and later: the pool is passed over and the node fails.
    let f = Features::for_release(Release::V1_37);
    let node = NodeFacts::named("n1");
    let out = allocate_with(f, &[a2, b], &classes, &[], &node, &[one("d")]);
    assert!(failure(out).contains("invalid resource pools were encountered"));
}

#[test]
fn per_device_node_selection_needs_partitionable_devices() {
    let devices = json!([
        { "name": "far", "nodeName": "n2" },
        { "name": "near", "nodeName": "n1" },
        { "name": "everywhere", "allNodes": true }
    ]);
    let slices = [slice_with(
        "pd",
        "d.example.com",
        "pd",
        json!({ "perDeviceNodeSelection": true }),
        devices,
    )];
    let classes = [class("d", "d.example.com")];
    let mut gates = Features::default();
    gates.set("DRAPartitionableDevices", true);
    let two = claim("c", json!([exactly("d", "d", 2)]), json!([]));
    let out = allocate_with(
        gates,
        &slices,
        &classes,
        &[],
        &NodeFacts::named("n1"),
        std::slice::from_ref(&two),
    )
    .unwrap();
    assert_eq!(names(&out[0]), ["near", "everywhere"]);
    failure(allocate(&slices, &classes, &[], "n1", &[one("d")]));
}

/// Issue 36: the error class and words for a pool that cannot be used, per
/// release. An invalid pool (a device name twice) is a hard error in 1.34
/// when the search meets it, in upstream's words `pool <name> is invalid:
/// <reason>`; from 1.35 the search passes over it and, when nothing else
/// fits, the node fails with `invalid resource pools were encountered`.
/// An incomplete pool serves its slices in 1.34 and is passed over in
/// silence from 1.35. Both come back typed, for `simulate` and `why`.
#[test]
fn invalid_and_incomplete_pools_have_each_releases_error_class_and_words() {
    let dup = |name: &str| {
        let mut s = slice(
            name,
            "n1",
            "d.example.com",
            json!([device("same", json!({}))]),
        );
        s.spec.pool.resource_slice_count = 2;
        s
    };
    let classes = [class("d", "d.example.com")];
    let node = NodeFacts::named("n1");
    let run = |release, slices: &[_]| {
        allocate_with(
            Features::for_release(release),
            slices,
            &classes,
            &[],
            &node,
            &[one("d")],
        )
    };
    let invalid = PoolIssue {
        driver: "d.example.com".into(),
        pool: "n1".into(),
        problem: PoolProblem::Invalid("duplicate device name same".into()),
    };
    match run(Release::V1_34, &[dup("a"), dup("b")]) {
        Err(AllocateError::Input(e @ InputError::InvalidPool { .. })) => {
            assert_eq!(
                e.to_string(),
                "pool n1 is invalid: duplicate device name same"
            );
        }
        other => panic!("1.34: expected the invalid pool as a hard error, got {other:?}"),
    }
    for release in [Release::V1_35, Release::V1_36, Release::V1_37] {
        match run(release, &[dup("a"), dup("b")]) {
            Err(AllocateError::Unsatisfiable(f)) => {
                assert!(
                    f.explanation
                        .starts_with("invalid resource pools were encountered"),
                    "{release}: {}",
                    f.explanation
                );
                assert!(
                    f.explanation.contains(
                        "resource pool d.example.com/n1 is invalid: duplicate device name same"
                    ),
                    "{release}: {}",
                    f.explanation
                );
                assert_eq!(f.pools, std::slice::from_ref(&invalid), "{release}");
            }
            other => panic!("{release}: expected a failure on this node, got {other:?}"),
        }
    }
    // Incomplete: one slice of two.
    let part = [dup("a")];
    assert_eq!(names(&run(Release::V1_34, &part).unwrap()[0]), ["same"]);
    for release in [Release::V1_35, Release::V1_36, Release::V1_37] {
        let f = match run(release, &part) {
            Err(AllocateError::Unsatisfiable(f)) => f,
            other => panic!("{release}: expected no allocation, got {other:?}"),
        };
        assert_eq!(
            f.pools,
            [PoolIssue {
                driver: "d.example.com".into(),
                pool: "n1".into(),
                problem: PoolProblem::Incomplete,
            }],
            "{release}"
        );
        assert!(
            f.explanation
                .contains("resource pool d.example.com/n1 is currently being updated"),
            "{release}: {}",
            f.explanation
        );
    }
}
