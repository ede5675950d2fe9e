//! Item 1: the chart's DaemonSet runs the agent from its image in a real
//! container; the real kubelet's plugin watcher registers it (1.37 and
//! 1.34) and calls NodePrepareResources and NodeUnprepareResources itself.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

#[test]
fn the_daemonset_agent_registers_with_the_real_kubelet_and_publishes() {
    let bed = main_cluster();
    let pods = bed
        .get_json(&[
            "get",
            "pods",
            "-n",
            CHART_NS,
            "-l",
            "app.kubernetes.io/name=ainic-dra",
        ])
        .unwrap();
    let agents: Vec<_> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap()
                .contains("node-agent")
        })
        .collect();
    assert_eq!(agents.len(), 2, "one agent per real node");
    for agent in &agents {
        let status = &agent["status"]["containerStatuses"][0];
        assert_eq!(status["ready"], true, "{status}");
        assert!(
            status["image"]
                .as_str()
                .unwrap()
                .contains("ghcr.io/amd/ainic-dra"),
            "{status}"
        );
    }
    for k in [1, 2] {
        let log = bed.eventually("the kubelet registers ainic.amd.com", POD_START, || {
            let log = bed.kubelet_log(k);
            log.lines()
                .any(|l| {
                    l.contains("Connection changed")
                        && l.contains("driverName=\"ainic.amd.com\"")
                        && l.contains("connected=true")
                })
                .then_some(log)
        });
        assert!(!log.contains("RST_STREAM"), "node-{k}: {log}");
        // Ready says the agent read its Node and config, not that it
        // published: it serves the kubelet first and publishes beside.
        let node = format!("node-{k}");
        let what = format!("{node} publishing its 8 PFs");
        bed.eventually(&what, POD_START, || {
            (published(bed, &node).len() == 8).then_some(())
        });
    }
}

#[test]
fn a_1_34_kubelet_registers_the_agent_and_prepares_a_claim() {
    let bed = old_cluster();
    let ns = "reg-134";
    namespace(bed, ns, &[]);
    let log = bed.eventually("kubelet 1.34 registers ainic.amd.com", POD_START, || {
        let log = bed.kubelet_log(1);
        log.contains("driverName=\"ainic.amd.com\"").then_some(log)
    });
    assert!(!log.contains("RST_STREAM"), "{log}");
    bed.apply(
        &json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"namespace": ns, "name": "nic"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "nic", "exactly": {"deviceClassName": "ainic-pf"}}]}}},
        })
        .to_string(),
    );
    bed.apply(&pod(
        ns,
        "user",
        &[Claim::Template("nic", "nic")],
        json!({}),
    ));
    let seen = seen(bed, ns, "user");
    let device = &seen.env["AINIC_DEVICES"];
    assert!(device.starts_with("pf-"), "{device}");
    assert_eq!(seen.devices.len(), 2, "{:?}", seen.devices);
    assert_eq!(
        claim_specs(bed, 1).len(),
        1,
        "prepared by the kubelet's call"
    );
    delete_pod(bed, ns, "user");
    bed.eventually(
        "the kubelet unprepares the claim",
        Duration::from_secs(60),
        || claim_specs(bed, 1).is_empty().then_some(()),
    );
}
