//! What the fabric controller reads and writes (issue 29, items 2 and 5),
//! on a real 1.37 API server, with the controller as the chart's service
//! account: a slice in a pool not named after its node is ignored (and
//! logged), a half-written pool is not used, a partition whose name only
//! differs in case from another's keeps its own label value and renames
//! nothing, a name that makes a value another partition holds gets a
//! Warning Event instead, and the labels are the controller's by
//! server-side apply under its own field manager. The chart's policy
//! keeps the controller's Node writes to its own label keys.
//!
//! Runs on a control plane of its own: the controller labels every Node.

use std::collections::BTreeMap;

use dra_model::partitions::{LABEL_PARTITION, label_value};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::testbed::{UpOptions, Version, client_from, cluster, wait};

use crate::admission::refusal;
use crate::support::{DRIVER, NAMESPACE, RELEASE, own_bed, start_controller, tail};

/// Slice `index` of `count` of pool `pool` at `generation`, for `node`,
/// with one NIC in fabric partition `fabric`.
fn slice(
    node: &str,
    pool: &str,
    fabric: &str,
    (index, count, generation): (usize, i64, i64),
) -> ResourceSlice {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{pool}-{node}-{index}")},
        "spec": {"driver": DRIVER, "nodeName": node,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            "devices": [{"name": format!("nic{index}"), "attributes": {
                format!("{DRIVER}/fabric"): {"string": fabric},
                "resource.kubernetes.io/pciBusID": {"string": format!("0000:0{index}:00.0")}}}]},
    }))
    .unwrap()
}

/// The controller's partition pools, with their node counts.
async fn partitions(slices: &Api<ResourceSlice>) -> BTreeMap<String, i64> {
    let list = slices.list(&ListParams::default()).await.unwrap().items;
    (list.into_iter())
        .filter(|s| s.spec.pool.name.starts_with("fabric/"))
        .map(|s| {
            let device = &s.spec.devices.unwrap()[0];
            let count = device.attributes.as_ref().unwrap()[&format!("{DRIVER}/nodeCount")].int;
            (s.spec.pool.name, count.unwrap())
        })
        .collect()
}

async fn wait_partitions(slices: &Api<ResourceSlice>, want: &[(&str, i64)], log: &std::path::Path) {
    let want: BTreeMap<String, i64> = (want.iter())
        .map(|(p, n)| (format!("fabric/{p}"), *n))
        .collect();
    wait::until("the partition slices", wait::DEADLINE, || async {
        let got = partitions(slices).await;
        let log = std::fs::read_to_string(log).unwrap_or_default();
        (got == want)
            .then_some(())
            .ok_or(format!("{got:?}; log:\n{}", tail(&log, 10)))
    })
    .await;
}

fn label<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

#[tokio::test]
async fn the_controller_trusts_only_whole_node_pools_and_writes_only_its_labels() {
    let bed = own_bed(UpOptions {
        version: Some(Version::V1_37),
        no_scheduler: true,
        ..UpOptions::default()
    })
    .await;
    let admin = bed.client().await;
    let team = BTreeMap::from([("team".to_string(), "t1".to_string())]);
    for node in ["ct-1", "ct-2", "ct-3", "ct-4", "ct-5"] {
        cluster::fake_node(&admin, node, &team).await;
    }
    let slices: Api<ResourceSlice> = Api::all(admin.clone());
    let nodes: Api<Node> = Api::all(admin.clone());
    let pp = PostParams::default();
    let upper = label_value("CT-A");
    for s in [
        slice("ct-1", "ct-1", "ct-a", (0, 1, 1)),
        slice("ct-2", "ct-2", "CT-A", (0, 1, 1)),
        // Half written: one of two slices.
        slice("ct-3", "ct-3", "ct-b", (0, 2, 1)),
        slice("ct-4", "ct-4", "ct-c", (0, 1, 1)),
        // For node ct-1 in ct-4's pool, a generation above it.
        slice("ct-1", "ct-4", "ct-evil", (0, 1, 9)),
    ] {
        slices.create(&pp, &s).await.unwrap();
    }
    let log = bed.dir().join("trust-controller.log");
    let _controller = start_controller(bed, &log).await;
    wait_partitions(&slices, &[("ct-a", 1), (&upper, 1), ("ct-c", 1)], &log).await;
    let ignored = "slice ct-4-ct-1-0 is for node ct-1 but in pool ct-4";
    assert!(std::fs::read_to_string(&log).unwrap().contains(ignored));

    // Labels: by apply, the controller's manager owning its key alone;
    // other labels untouched; the half-written node left alone.
    let n1 = nodes.get("ct-1").await.unwrap();
    assert_eq!(label(&n1, LABEL_PARTITION), Some("ct-a"));
    assert_eq!(label(&n1, "team"), Some("t1"));
    let owned: Vec<(String, String, Value)> = (n1.metadata.managed_fields.unwrap().into_iter())
        .filter(|m| m.manager.as_deref() == Some("ainic.amd.com/fabric-labels"))
        .map(|m| {
            (
                m.operation.unwrap_or_default(),
                m.subresource.unwrap_or_default(),
                m.fields_v1.unwrap().0,
            )
        })
        .collect();
    let fields = json!({"f:metadata": {"f:labels": {format!("f:{LABEL_PARTITION}"): {}}}});
    assert_eq!(owned, [("Apply".to_string(), String::new(), fields)]);
    assert_eq!(
        label(&nodes.get("ct-2").await.unwrap(), LABEL_PARTITION),
        Some(upper.as_str())
    );
    assert_eq!(
        label(&nodes.get("ct-3").await.unwrap(), LABEL_PARTITION),
        None
    );
    assert_eq!(
        label(&nodes.get("ct-4").await.unwrap(), LABEL_PARTITION),
        Some("ct-c")
    );

    // The rest of ct-3's pool arrives: now it is used.
    slices
        .create(&pp, &slice("ct-3", "ct-3", "ct-b", (1, 2, 1)))
        .await
        .unwrap();
    wait_partitions(
        &slices,
        &[("ct-a", 1), (&upper, 1), ("ct-b", 1), ("ct-c", 1)],
        &log,
    )
    .await;

    // A name spelt as the value CT-A holds: an Event, not a rename.
    slices
        .create(&pp, &slice("ct-5", "ct-5", &upper, (0, 1, 1)))
        .await
        .unwrap();
    let events: Api<Event> = Api::namespaced(admin.clone(), "default");
    let note = wait::until("the collision event on ct-5", wait::DEADLINE, || async {
        let list = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        (list.items.into_iter())
            .find(|e| {
                e.reason.as_deref() == Some("FabricLabelCollision")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("ct-5")
            })
            .and_then(|e| e.note)
            .ok_or("no event yet".to_string())
    })
    .await;
    assert!(note.contains("\"CT-A\" keeps it"), "{note}");
    assert_eq!(
        label(&nodes.get("ct-2").await.unwrap(), LABEL_PARTITION),
        Some(upper.as_str())
    );
    assert_eq!(
        label(&nodes.get("ct-5").await.unwrap(), LABEL_PARTITION),
        None
    );
    assert_eq!(partitions(&slices).await.len(), 4);

    // The controller's own token: its labels yes, anything else no.
    let account = format!("{RELEASE}-controller");
    let token = cluster::account_token(&admin, NAMESPACE, &account).await;
    let controller = client_from(&bed.write_kubeconfig("trust-controller", &account, &token)).await;
    let as_controller: Api<Node> = Api::all(controller);
    let bound = format!("{DRIVER}/bound-tenant.nic0");
    assert_eq!(
        merge(
            &as_controller,
            json!({"metadata": {"labels": {&bound: "t1"}}})
        )
        .await,
        None
    );
    assert_eq!(
        merge(
            &as_controller,
            json!({"metadata": {"labels": {&bound: null}}})
        )
        .await,
        None
    );
    let relabel = merge(
        &as_controller,
        json!({"metadata": {"labels": {"team": "t2"}}}),
    )
    .await;
    assert!(
        relabel
            .as_deref()
            .is_some_and(|m| m.contains("own labels of a Node") && m.ends_with("not team")),
        "{relabel:?}"
    );
    let cordon = merge(&as_controller, json!({"spec": {"unschedulable": true}})).await;
    assert!(
        cordon
            .as_deref()
            .is_some_and(|m| m.contains("not its spec")),
        "{cordon:?}"
    );
}

/// A merge patch of node ct-1 by `nodes`' user; the refusal, if any.
async fn merge(nodes: &Api<Node>, patch: Value) -> Option<String> {
    refusal(
        nodes
            .patch("ct-1", &PatchParams::default(), &Patch::Merge(&patch))
            .await,
    )
}
