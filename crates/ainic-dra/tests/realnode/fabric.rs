//! Item 4, use cases 3 and 4 on real nodes: node-1 is fabric partition
//! p-a, node-2 is p-b. A 2-pod job sharing one `ainic-fabric` claim lands
//! wholly in one partition, each pod's container seeing a NIC of its own
//! node; node-1's enp4s0 is fenced to tenant team-a: a team-a pod gets it,
//! another namespace's claim for team-a's class is refused, and a claim of
//! the general class never reaches it.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

const JOB: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: job, namespace: fabric-job}
spec:
  devices:
    requests:
    - name: partition
      exactly:
        deviceClassName: ainic-fabric
        capacity:
          requests:
            nodes: "1"
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-nic, namespace: fabric-job}
spec:
  spec:
    devices:
      requests:
      - name: nic
        exactly: {deviceClassName: ainic-pf}
"#;

#[test]
fn a_jobs_pods_land_in_one_partition_each_with_its_nodes_nic() {
    let bed = main_cluster();
    let ns = "fabric-job";
    namespace(bed, ns, &[]);
    bed.apply(JOB);
    let claims = [
        Claim::Shared("fabric", "job"),
        Claim::Template("nic", "one-nic"),
    ];
    for name in ["rank-0", "rank-1"] {
        bed.apply(&pod(ns, name, &claims, json!({})));
    }
    let seen: Vec<Seen> = ["rank-0", "rank-1"]
        .iter()
        .map(|n| seen(bed, ns, n))
        .collect();
    assert_eq!(seen[0].node, seen[1].node, "one partition is one node here");
    let partition = if seen[0].node == "node-1" {
        "p-a"
    } else {
        "p-b"
    };
    let claim = bed
        .get_json(&["get", "resourceclaim", "-n", ns, "job"])
        .unwrap();
    let device = claim["status"]["allocation"]["devices"]["results"][0]["device"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(device.contains(partition), "{device} is not {partition}'s");
    let published = published(bed, &seen[0].node);
    for s in &seen {
        let nic = &s.env["AINIC_PCI_ADDRESSES"];
        assert!(
            published
                .values()
                .any(|d| attribute(d, "resource.kubernetes.io/pciBusID") == Some(nic)),
            "{nic} is not a NIC of {}",
            s.node
        );
    }
    assert_ne!(
        seen[0].env["AINIC_PCI_ADDRESSES"],
        seen[1].env["AINIC_PCI_ADDRESSES"]
    );
}

fn tenant_claim(ns: &str, class: &str, extra_selector: Option<&str>) -> String {
    let mut exactly = json!({"deviceClassName": class});
    if let Some(cel) = extra_selector {
        exactly["selectors"] = json!([{"cel": {"expression": cel}}]);
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "nic", "namespace": ns},
        "spec": {"spec": {"devices": {"requests": [{"name": "nic", "exactly": exactly}]}}}})
    .to_string()
}

#[test]
fn a_tenants_fenced_nic_goes_to_its_pods_only() {
    let bed = main_cluster();
    let label = ("ainic.amd.com/tenant", "team-a");
    namespace(bed, "team-a", &[label]);
    bed.apply(&tenant_claim("team-a", "ainic-pf-team-a", None));
    bed.apply(&pod(
        "team-a",
        "mine",
        &[Claim::Template("nic", "nic")],
        json!({}),
    ));
    let seen = seen(bed, "team-a", "mine");
    assert_eq!(seen.node, "node-1");
    assert_eq!(seen.env["AINIC_NETDEVS"], "enp4s0");

    namespace(bed, "team-b", &[("ainic.amd.com/tenant", "team-b")]);
    let refused = bed
        .kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&tenant_claim("team-b", "ainic-pf-team-a", None)),
        )
        .expect_err("team-b may not use team-a's class");
    assert!(refused.contains("team-a"), "{refused}");

    // The general class leaves the fenced NIC out: a claim that could only
    // be satisfied by it cannot be allocated.
    let only_fenced = r#"device.attributes["resource.kubernetes.io"].pciBusID == "0000:04:00.0""#;
    bed.apply(&tenant_claim("team-b", "ainic-pf", Some(only_fenced)));
    let node_1 = json!({"nodeSelector": {"kubernetes.io/hostname": "node-1"}});
    bed.apply(&pod(
        "team-b",
        "theirs",
        &[Claim::Template("nic", "nic")],
        node_1,
    ));
    let why = bed.eventually("the scheduler says why", Duration::from_secs(60), || {
        let events = bed
            .kubectl(&[
                "get",
                "events",
                "-n",
                "team-b",
                "--field-selector",
                "involvedObject.name=theirs,reason=FailedScheduling",
                "-o",
                "jsonpath={.items[*].message}",
            ])
            .ok()?;
        (!events.is_empty()).then_some(events)
    });
    assert!(why.contains("claim"), "{why}");
    let pod = bed
        .get_json(&["get", "pod", "-n", "team-b", "theirs"])
        .unwrap();
    assert_eq!(
        pod["spec"]["nodeName"],
        serde_json::Value::Null,
        "never placed"
    );
}
