//! Item 6: a NIC whose link goes down in node-2's made-up sysfs shows as
//! Unhealthy in its pod's `allocatedResourcesStatus` (the real kubelet's
//! health stream, ResourceHealthStatus is on in 1.37) and is tainted in the
//! published slice; both clear when the link is back.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

const NIC: &str = "0000:a4:00.0";
const NETDEV: &str = "enp164s0";
const DEVICE: &str = "pf-0000-a4-00-0";

fn template() -> String {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
    "metadata": {"name": "that-nic", "namespace": "health"},
    "spec": {"spec": {"devices": {"requests": [{"name": "nic", "exactly": {
        "deviceClassName": "ainic-pf",
        "selectors": [{"cel": {"expression": format!(
            "device.attributes[\"resource.kubernetes.io\"].pciBusID == \"{NIC}\"")}}],
    }}]}}}})
    .to_string()
}

/// The health the kubelet reports for our device in the pod's status.
fn reported(bed: &testkit::testbed::Testbed) -> Option<String> {
    let pod = bed
        .get_json(&["get", "pod", "-n", "health", "watched"])
        .ok()?;
    let statuses = pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"].as_array()?;
    statuses
        .iter()
        .flat_map(|s| s["resources"].as_array().into_iter().flatten())
        .find(|r| {
            r["resourceID"]
                .as_str()
                .is_some_and(|id| id.contains(DEVICE))
        })
        .and_then(|r| r["health"].as_str().map(str::to_string))
}

fn tainted(bed: &testkit::testbed::Testbed) -> bool {
    published(bed, "node-2")
        .get(DEVICE)
        .and_then(|d| d["taints"].as_array().map(|t| !t.is_empty()))
        .unwrap_or(false)
}

#[test]
fn a_link_down_reaches_the_pod_status_and_the_slice_and_clears() {
    let bed = main_cluster();
    let ns = "health";
    namespace(bed, ns, &[]);
    bed.apply(&template());
    let node_2 = json!({"nodeSelector": {"kubernetes.io/hostname": "node-2"}});
    bed.apply(&pod(
        ns,
        "watched",
        &[Claim::Template("nic", "that-nic")],
        node_2,
    ));
    let seen = seen(bed, ns, "watched");
    assert_eq!(seen.env["AINIC_PCI_ADDRESSES"], NIC);
    let wait = Duration::from_secs(90);
    bed.eventually("Healthy reported", wait, || {
        (reported(bed).as_deref() == Some("Healthy")).then_some(())
    });
    let operstate = bed.node_path(
        2,
        &format!("/opt/ainic-testbed/sys/class/net/{NETDEV}/operstate"),
    );
    std::fs::write(&operstate, "down\n").unwrap();
    bed.eventually("Unhealthy in the pod's status", wait, || {
        (reported(bed).as_deref() == Some("Unhealthy")).then_some(())
    });
    bed.eventually("the device tainted", wait, || tainted(bed).then_some(()));
    std::fs::write(&operstate, "up\n").unwrap();
    bed.eventually("Healthy again", wait, || {
        (reported(bed).as_deref() == Some("Healthy")).then_some(())
    });
    bed.eventually("the taint lifted", wait, || (!tainted(bed)).then_some(()));
}
