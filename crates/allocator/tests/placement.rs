//! Pods placed one after another (`simulate` without `--node`): two
//! fabric partitions of two nodes each, jobs of two pods sharing one
//! partition claim and each pod taking a NIC of its own from a template.

use allocator::{Features, Placement, Release, Scenario, place_pods};
use serde_json::{Value, json};

const DRIVER: &str = "ainic.amd.com";
const LABEL: &str = "ainic.amd.com/fabric-partition";

fn node(name: &str, partition: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {LABEL: partition}}})
}

fn nic_slice(node: &str) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": format!("{node}-nics")},
        "spec": {"driver": DRIVER, "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "pf-0", "attributes": {"type": {"string": "pf"}}}]}})
}

/// A partition device as the fabric controller publishes it.
fn partition_slice(partition: &str) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": format!("fabric-{partition}")},
        "spec": {"driver": DRIVER,
            "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": LABEL, "operator": "In", "values": [partition]}]}]},
            "pool": {"name": format!("fabric/{partition}"), "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "partition", "allowMultipleAllocations": true,
                "attributes": {"type": {"string": "fabric-partition"}, "fabric": {"string": partition}},
                "capacity": {"nodes": {"value": "2"}}}]}})
}

fn class(name: &str, kind: &str) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": format!(
            "device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'")}}]}})
}

/// A job's shared partition claim and its pods.
fn job(name: &str, pods: usize) -> Vec<Value> {
    let mut objects = vec![
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "partition", "exactly": {
            "deviceClassName": "fabric", "capacity": {"requests": {"nodes": "2"}}}}]}}}),
    ];
    for i in 0..pods {
        objects.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{name}-{i}"), "namespace": "default"},
            "spec": {"containers": [{"name": "main"}], "resourceClaims": [
                {"name": "fabric", "resourceClaimName": name},
                {"name": "nic", "resourceClaimTemplateName": "one-nic"}]}}));
    }
    objects
}

fn cluster() -> Vec<Value> {
    let mut objects = vec![
        class("fabric", "fabric-partition"),
        class("pf", "pf"),
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-nic", "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "nic", "exactly": {"deviceClassName": "pf"}}]}}}}),
        partition_slice("pod-a"),
        partition_slice("pod-b"),
    ];
    for (n, partition) in [
        ("n1", "pod-a"),
        ("n2", "pod-a"),
        ("n3", "pod-b"),
        ("n4", "pod-b"),
    ] {
        objects.push(node(n, partition));
        objects.push(nic_slice(n));
    }
    objects
}

fn place(objects: Vec<Value>) -> Vec<Placement> {
    let scenario = Scenario::from_objects(objects).unwrap();
    place_pods(&scenario, Features::for_release(Release::V1_37)).unwrap()
}

fn node_of(p: &Placement) -> &str {
    &p.outcome
        .as_ref()
        .unwrap_or_else(|e| panic!("{}: {e}", p.pod))
        .0
}

#[test]
fn each_job_lands_wholly_in_one_partition_and_a_third_waits() {
    let mut objects = cluster();
    for name in ["job-a", "job-b", "job-c"] {
        objects.extend(job(name, 2));
    }
    let placed = place(objects);
    let nodes: Vec<&str> = placed[..4].iter().map(node_of).collect();
    assert_eq!(nodes, ["n1", "n2", "n3", "n4"]);
    // The shared claim is allocated once, at the first pod, and reused.
    let (_, a0) = placed[0].outcome.as_ref().unwrap();
    let (_, a1) = placed[1].outcome.as_ref().unwrap();
    assert_eq!(a0[0], a1[0], "job-a's claim as the first pod got it");
    let pool = |claims: &[k8s_openapi::api::resource::v1::ResourceClaim]| {
        let allocation = claims[0]
            .status
            .as_ref()
            .unwrap()
            .allocation
            .as_ref()
            .unwrap();
        allocation
            .devices
            .as_ref()
            .unwrap()
            .results
            .as_ref()
            .unwrap()[0]
            .pool
            .clone()
    };
    assert_eq!(pool(a0), "fabric/pod-a");
    assert_eq!(pool(&placed[2].outcome.as_ref().unwrap().1), "fabric/pod-b");
    for waiting in &placed[4..] {
        let reason = waiting.outcome.as_ref().unwrap_err();
        assert!(reason.starts_with("0/4 nodes are available"), "{reason}");
        assert!(
            reason.contains("node n1: ") && reason.contains("node n4: "),
            "{reason}"
        );
    }
}

/// A claim allocated in the input pins its pods to its nodes, and a pod's
/// nodeSelector is heeded.
#[test]
fn an_allocated_claim_and_a_node_selector_narrow_the_nodes() {
    let mut objects = cluster();
    let mut held = job("job-a", 1);
    held[0]["status"] = json!({"allocation": {
        "devices": {"results": [{"request": "partition", "driver": DRIVER,
            "pool": "fabric/pod-b", "device": "partition", "shareID": "00000000-0000-0000-0000-000000000001",
            "consumedCapacity": {"nodes": "2"}}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": LABEL, "operator": "In", "values": ["pod-b"]}]}]}}});
    objects.extend(held);
    // job-b's pod may use only pod-b's nodes, whose partition job-a fills.
    let mut pinned = job("job-b", 1);
    pinned[1]["spec"]["nodeSelector"] = json!({LABEL: "pod-b"});
    objects.extend(pinned);
    let placed = place(objects);
    assert_eq!(node_of(&placed[0]), "n3");
    let reason = placed[1].outcome.as_ref().unwrap_err();
    assert!(
        reason.starts_with(
            "0/4 nodes are available (2 excluded by the pod's nodeName or nodeSelector); node n3: "
        ),
        "{reason}"
    );
}

/// Found by review: a cordoned node and a taint the pod does not tolerate
/// keep pods off; a search the allocator aborts on leaves only that pod
/// pending; a pod whose status names its generated claim uses that claim.
#[test]
fn cordons_taints_aborts_and_generated_claims_are_heeded() {
    let mut objects = cluster();
    for node in objects.iter_mut().filter(|o| o["kind"] == "Node") {
        match node["metadata"]["name"].as_str() {
            Some("n1") => node["spec"] = json!({"unschedulable": true}),
            Some("n2") => {
                node["spec"] = json!({"taints": [{"key": "maintenance", "effect": "NoSchedule"}]})
            }
            _ => {}
        }
    }
    // job-a: both pods skip n1 and n2, so they go to pod-b's nodes.
    objects.extend(job("job-a", 2));
    // job-bad asks a negative number of nodes: 1.37 aborts the search.
    let mut bad = job("job-bad", 1);
    bad[0]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["nodes"] =
        json!("-1");
    objects.extend(bad);
    // job-t tolerates the taint; its pod's NIC claim was generated already.
    let mut tolerant = job("job-t", 1);
    tolerant[1]["spec"]["tolerations"] = json!([{"key": "maintenance", "operator": "Exists"}]);
    tolerant[1]["status"] = json!({"resourceClaimStatuses": [
        {"name": "nic", "resourceClaimName": "job-t-0-nic-x7k2p"}]});
    objects.extend(tolerant);
    objects.push(json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "job-t-0-nic-x7k2p", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "pf"}}]}}}));
    let placed = place(objects);
    assert_eq!(node_of(&placed[0]), "n3");
    let reason = placed[2].outcome.as_ref().unwrap_err();
    assert!(
        reason.contains("scheduling failed on node n3") && reason.contains("negative"),
        "{reason}"
    );
    let (node, claims) = placed[3].outcome.as_ref().unwrap();
    assert_eq!(node, "n2", "tolerates the taint; pod-a has room");
    assert_eq!(
        claims[1].metadata.name.as_deref(),
        Some("job-t-0-nic-x7k2p")
    );
    let cordoned = placed[1].outcome.as_ref().map(|(n, _)| n.as_str());
    assert_eq!(cordoned, Ok("n4"), "n3's NIC went to job-a-0");
}

/// A PodGroup's pods: the group's claim made from a template (when a pod's
/// entry equals the group's), one per pod otherwise.
fn group_job(name: &str, pod_entry_template: &str) -> Vec<Value> {
    let mut objects = vec![
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "partition-for-2", "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "partition", "exactly": {
                "deviceClassName": "fabric", "capacity": {"requests": {"nodes": "2"}}}}]}}}}),
        json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": [
                {"name": "fabric", "resourceClaimTemplateName": "partition-for-2"}]}}),
    ];
    for i in 0..2 {
        objects.push(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{name}-{i}"), "namespace": "default"},
            "spec": {"containers": [{"name": "main"}], "schedulingGroup": {"podGroupName": name},
                "resourceClaims": [
                {"name": "fabric", "resourceClaimTemplateName": pod_entry_template},
                {"name": "nic", "resourceClaimTemplateName": "one-nic"}]}}));
    }
    objects
}

#[test]
fn a_pod_groups_template_claim_is_one_claim_for_all_its_pods() {
    let mut objects = cluster();
    objects.extend(group_job("job-g", "partition-for-2"));
    let placed = place(objects);
    let (_, g0) = placed[0].outcome.as_ref().unwrap();
    let (_, g1) = placed[1].outcome.as_ref().unwrap();
    assert_eq!(g0[0].metadata.name.as_deref(), Some("job-g-fabric"));
    assert_eq!(g0[0], g1[0], "the group's claim, allocated once");
    assert_eq!(
        (node_of(&placed[0]), node_of(&placed[1])),
        ("n1", "n2"),
        "both in pod-a"
    );
    assert_ne!(g0[1].metadata.name, g1[1].metadata.name, "a NIC claim each");
}

#[test]
fn a_pod_entry_unlike_its_groups_gets_a_claim_of_its_own() {
    // The resource-claim controller makes a per-pod claim when the pod's
    // entry differs from the group's: each pod then takes a partition.
    let mut objects = cluster();
    let mut job = group_job("job-g", "other-template");
    job.push(
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "other-template", "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "partition", "exactly": {
            "deviceClassName": "fabric", "capacity": {"requests": {"nodes": "2"}}}}]}}}}),
    );
    objects.extend(job);
    let placed = place(objects);
    let names: Vec<_> = (placed.iter())
        .map(|p| {
            p.outcome.as_ref().unwrap().1[0]
                .metadata
                .name
                .clone()
                .unwrap()
        })
        .collect();
    assert_eq!(names, ["job-g-0-fabric", "job-g-1-fabric"]);
    assert_eq!((node_of(&placed[0]), node_of(&placed[1])), ("n1", "n3"));
}

#[test]
fn a_pod_named_like_a_groups_claim_gets_a_claim_of_its_own() {
    // Pod "job"'s entry "g-fabric" gets a claim called job-g-fabric, as
    // the group's is: it must not take the group's partition claim.
    let mut objects = cluster();
    objects.extend(group_job("job-g", "partition-for-2"));
    objects.push(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "job", "namespace": "default"},
        "spec": {"containers": [{"name": "main"}], "resourceClaims": [
            {"name": "g-fabric", "resourceClaimTemplateName": "partition-for-2"}]}}));
    let placed = place(objects);
    let (_, own) = placed[2].outcome.as_ref().unwrap();
    let group_claim = &placed[0].outcome.as_ref().unwrap().1[0];
    assert_eq!(own[0].metadata.name, group_claim.metadata.name, "same name");
    assert_ne!(
        own[0].metadata.uid, group_claim.metadata.uid,
        "not the same claim"
    );
    assert_eq!(node_of(&placed[2]), "n3", "a partition of its own");
}
