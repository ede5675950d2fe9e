//! Pool and driver ownership (issue 29, item 2) in the real API server, on
//! the oldest and the newest release: with node A's node-bound token of
//! the chart's service account, the agent writes slices of our driver in
//! its own pool for its own node and nothing else. Each refusal says why.
//! Before the fix the policy checked `spec.nodeName` only: a slice for
//! pool B or for driver `gpu.amd.com` with `nodeName: A` was admitted, and
//! the refusals of `allNodes` and `nodeSelector` said only "spec.nodeName".

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use testkit::testbed::{Testbed, Version, client_from, cluster};

use crate::admission::refusal;
use crate::support::{ACCOUNT, DRIVER, NAMESPACE, install_chart};

/// A slice named `name` with `spec`.
fn slice(name: &str, spec: Value) -> ResourceSlice {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// The spec an agent of `node` publishes: our driver, its pool, its node.
fn own_spec(node: &str) -> Value {
    json!({"driver": DRIVER, "nodeName": node,
           "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}})
}

/// Node `a`'s agent against the chart's policy on `bed`; `b` is another
/// node. Returns how many forgeries were refused.
async fn forgeries_are_refused(bed: &'static Testbed, a: &str, b: &str) -> usize {
    install_chart(bed).await;
    let admin = bed.client().await;
    for node in [a, b] {
        cluster::fake_node(&admin, node, &BTreeMap::new()).await;
    }
    let token = cluster::node_bound_token(&admin, NAMESPACE, ACCOUNT, a).await;
    let agent = client_from(&bed.write_kubeconfig(a, a, &token)).await;
    let slices: Api<ResourceSlice> = Api::all(agent);
    let admin_slices: Api<ResourceSlice> = Api::all(admin);
    let pp = PostParams::default();

    let mut forged: Vec<(&str, Value, String)> = Vec::new();
    let mut pool_b = own_spec(a);
    pool_b["pool"]["name"] = json!(b);
    forged.push((
        "pool-b",
        pool_b,
        format!("may only write ResourceSlices of its own pool {a}, not pool {b}"),
    ));
    let mut gpu = own_spec(a);
    gpu["driver"] = json!("gpu.amd.com");
    forged.push((
        "gpu",
        gpu,
        format!("may only write ResourceSlices of driver {DRIVER}, not gpu.amd.com"),
    ));
    let mut node_b = own_spec(a);
    node_b["nodeName"] = json!(b);
    forged.push((
        "node-b",
        node_b,
        format!("may only write ResourceSlices with spec.nodeName {a}"),
    ));
    let mut all = own_spec(a);
    all.as_object_mut().unwrap().remove("nodeName");
    all["allNodes"] = json!(true);
    forged.push((
        "all",
        all,
        "may not offer devices to all nodes (spec.allNodes)".into(),
    ));
    let mut selector = own_spec(a);
    selector.as_object_mut().unwrap().remove("nodeName");
    selector["nodeSelector"] = json!({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [b]}]}]});
    forged.push((
        "selector",
        selector,
        "may not offer devices to other nodes (spec.nodeSelector)".into(),
    ));
    if bed.version() >= Version::V1_37 {
        // Partitionable devices are on from 1.36 only; earlier servers
        // drop the field and refuse the slice as having no node at all.
        let mut per_device = own_spec(a);
        per_device.as_object_mut().unwrap().remove("nodeName");
        per_device["perDeviceNodeSelection"] = json!(true);
        per_device["devices"] = json!([{"name": "d0", "nodeName": b}]);
        forged.push((
            "per-device",
            per_device,
            "may not choose nodes per device (spec.perDeviceNodeSelection)".into(),
        ));
    }
    for (what, spec, why) in &forged {
        let name = format!("{a}-{what}");
        let refused = refusal(slices.create(&pp, &slice(&name, spec.clone())).await)
            .unwrap_or_else(|| {
                panic!(
                    "{}: the slice {what} of node {a} was admitted",
                    bed.git_version()
                )
            });
        assert!(refused.contains(why), "{what}: {refused}");
        assert!(
            refused.contains(&format!("the node agent of node {a}")),
            "{refused}"
        );
    }

    // Its own slice: created, changed and deleted.
    let own = format!("{a}-own");
    assert_eq!(
        refusal(slices.create(&pp, &slice(&own, own_spec(a))).await),
        None
    );
    // (Read as the admin: the agent lists and watches, it never gets.)
    let mut stored = admin_slices.get(&own).await.unwrap();
    stored.spec.pool.generation = 2;
    assert_eq!(refusal(slices.replace(&own, &pp, &stored).await), None);
    assert_eq!(
        refusal(slices.delete(&own, &DeleteParams::default()).await),
        None
    );

    // Another driver's slice on its own node (old object): neither
    // changed nor deleted by the agent.
    let mut theirs = own_spec(a);
    theirs["driver"] = json!("gpu.amd.com");
    let theirs_name = format!("{a}-theirs");
    admin_slices
        .create(&pp, &slice(&theirs_name, theirs))
        .await
        .unwrap();
    let mut stored = admin_slices.get(&theirs_name).await.unwrap();
    stored.spec.pool.generation = 2;
    let changed = refusal(slices.replace(&theirs_name, &pp, &stored).await)
        .expect("another driver's slice is not the agent's to change");
    assert!(changed.contains("not gpu.amd.com"), "{changed}");
    let deleted = refusal(slices.delete(&theirs_name, &DeleteParams::default()).await)
        .expect("another driver's slice is not the agent's to delete");
    assert!(deleted.contains("not gpu.amd.com"), "{deleted}");
    admin_slices
        .delete(&theirs_name, &DeleteParams::default())
        .await
        .unwrap();
    forged.len()
}

#[tokio::test]
async fn an_agent_writes_only_its_own_pool_of_our_driver_on_1_34() {
    let bed = Testbed::shared(Version::V1_34);
    assert_eq!(forgeries_are_refused(bed, "own-a", "own-b").await, 5);
}

#[tokio::test]
async fn an_agent_writes_only_its_own_pool_of_our_driver_on_1_37() {
    let bed = Testbed::shared(Version::V1_37);
    assert_eq!(forgeries_are_refused(bed, "own-a", "own-b").await, 6);
}
