//! Issue 33, item 3: NIC health from hardware counters on a real node.
//! node-2's made-up sysfs carries every port counter; the test makes them
//! move. A carrier that changed twice makes the NIC degraded: the real API
//! server of 1.37 stores its informational taint (effect `None`), a
//! NicDegraded Event says so and the pod still sees Healthy. Symbol errors
//! that keep climbing make it unhealthy: a `NoSchedule` taint naming the
//! counter, Unhealthy in the pod's `allocatedResourcesStatus` (the real
//! kubelet's health stream) and a Warning Event on the Node saying which
//! counter crossed what. Freed while unhealthy, the NIC is not given to a
//! new pod: the real scheduler leaves it pending. When the errors stop,
//! the taint goes after the window and the chart's quiet period, the
//! pending pod runs on a Healthy NIC, and a Normal Event says so.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;

const NIC: &str = "0000:c4:00.0";
const NETDEV: &str = "enp196s0";
const IBDEV: &str = "ionic_6";
const DEVICE: &str = "pf-0000-c4-00-0";
const NS: &str = "counters";

fn template() -> String {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
    "metadata": {"name": "counted-nic", "namespace": NS},
    "spec": {"spec": {"devices": {"requests": [{"name": "nic", "exactly": {
        "deviceClassName": "ainic-pf",
        "selectors": [{"cel": {"expression": format!(
            "device.attributes[\"resource.kubernetes.io\"].pciBusID == \"{NIC}\"")}}],
    }}]}}}})
    .to_string()
}

/// The health the kubelet reports for our device in pod `name`'s status.
fn reported(bed: &testkit::testbed::Testbed, name: &str) -> Option<String> {
    let pod = bed.get_json(&["get", "pod", "-n", NS, name]).ok()?;
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

/// Pod `name`'s `PodScheduled` condition: (status, message).
fn scheduled(bed: &testkit::testbed::Testbed, name: &str) -> Option<(String, String)> {
    let pod = bed.get_json(&["get", "pod", "-n", NS, name]).ok()?;
    let conditions = pod["status"]["conditions"].as_array()?;
    let c = conditions.iter().find(|c| c["type"] == "PodScheduled")?;
    let field = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((field("status"), field("message")))
}

/// `(key, value, effect)` of the device's taints.
fn taints(bed: &testkit::testbed::Testbed) -> Vec<(String, String, String)> {
    let device = published(bed, "node-2").remove(DEVICE).unwrap_or_default();
    let field = |t: &Value, k: &str| t[k].as_str().unwrap_or_default().to_string();
    (device["taints"].as_array().into_iter().flatten())
        .map(|t| (field(t, "key"), field(t, "value"), field(t, "effect")))
        .collect()
}

/// The messages of node-2's Events with `reason`.
fn events(bed: &testkit::testbed::Testbed, reason: &str) -> Vec<String> {
    let selector = format!("reason={reason},involvedObject.name=node-2");
    let list = bed
        .get_json(&[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            &selector,
        ])
        .unwrap_or_default();
    (list["items"].as_array().into_iter().flatten())
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

/// Prints what an operator would look at: the Node's health Events, the
/// device's taints, the health in the pods' status (for the transcript of
/// the closing note; `--nocapture` shows it).
fn transcript(bed: &testkit::testbed::Testbed, when: &str) {
    let list = bed
        .get_json(&[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            "involvedObject.name=node-2",
        ])
        .unwrap_or_default();
    let field = |e: &Value, k: &str| e[k].as_str().unwrap_or_default().to_string();
    let events: Vec<String> = (list["items"].as_array().into_iter().flatten())
        .filter(|e| field(e, "reason").starts_with("Nic"))
        .map(|e| {
            let (kind, reason) = (field(e, "type"), field(e, "reason"));
            format!("{kind:<8} {reason:<13} {}", field(e, "message"))
        })
        .collect();
    let status = bed.kubectl(&[
        "get",
        "pods",
        "-n",
        NS,
        "-o",
        "custom-columns=POD:.metadata.name,PHASE:.status.phase,\
         HEALTH:.status.containerStatuses[0].allocatedResourcesStatus[0].resources[0].health",
    ]);
    eprintln!(
        "--- {when}\nEvents of node-2:\n{}\ntaints of {DEVICE}: {:?}\n$ kubectl get pods -n {NS}\n{}",
        events.join("\n"),
        taints(bed),
        status.unwrap_or_else(|e| e),
    );
}

fn taint(key: &str, value: &str, effect: &str) -> Vec<(String, String, String)> {
    vec![(format!("ainic.amd.com/{key}"), value.into(), effect.into())]
}

/// No ResourceClaim left in the namespace (the controller deletes a
/// pod's generated claim once the pod is gone, which frees its device).
fn no_claims(bed: &testkit::testbed::Testbed) -> Option<()> {
    let list = bed.get_json(&["get", "resourceclaims", "-n", NS]).ok()?;
    list["items"].as_array()?.is_empty().then_some(())
}

#[test]
fn counters_that_climb_reach_the_pod_status_the_taint_and_an_event_and_clear() {
    let bed = main_cluster();
    namespace(bed, NS, &[]);
    bed.apply(&template());
    let node_2 = json!({"nodeSelector": {"kubernetes.io/hostname": "node-2"}});
    let counted = |name: &str| {
        pod(
            NS,
            name,
            &[Claim::Template("nic", "counted-nic")],
            node_2.clone(),
        )
    };
    bed.apply(&counted("first"));
    assert_eq!(seen(bed, NS, "first").env["AINIC_PCI_ADDRESSES"], NIC);
    let wait = Duration::from_secs(90);
    bed.eventually("Healthy reported", wait, || {
        (reported(bed, "first").as_deref() == Some("Healthy")).then_some(())
    });
    let sys = |path: &str| bed.node_path(2, &format!("/opt/ainic-testbed/sys/{path}"));

    // Two carrier changes (one flap) in the window: degraded.
    let carrier = sys(&format!("class/net/{NETDEV}/carrier_changes"));
    let changes: u64 = std::fs::read_to_string(&carrier)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    std::fs::write(&carrier, format!("{}\n", changes + 2)).unwrap();
    bed.eventually("the informational taint stored", wait, || {
        (taints(bed) == taint("degraded", "carrier_changes", "None")).then_some(())
    });
    let degraded = bed.eventually("a NicDegraded Event", wait, || {
        events(bed, "NicDegraded").into_iter().next()
    });
    assert!(degraded.contains("carrier_changes of"), "{degraded}");
    assert_eq!(
        reported(bed, "first").as_deref(),
        Some("Healthy"),
        "degraded is Healthy to the kubelet"
    );

    // Symbol errors, 1,000 more every 2 s, until the test has seen enough.
    let symbols = sys(&format!(
        "class/infiniband/{IBDEV}/ports/1/counters/symbol_error"
    ));
    let climbing = Arc::new(AtomicBool::new(true));
    let errors = {
        let climbing = climbing.clone();
        std::thread::spawn(move || {
            let mut count = 0u64;
            while climbing.load(Ordering::Relaxed) {
                count += 1000;
                std::fs::write(&symbols, format!("{count}\n")).unwrap();
                std::thread::sleep(Duration::from_secs(2));
            }
        })
    };
    let errors_from = Instant::now();
    bed.eventually("the NoSchedule taint", wait, || {
        (taints(bed) == taint("unhealthy", "symbol_error", "NoSchedule")).then_some(())
    });
    let tainted_after = errors_from.elapsed();
    bed.eventually("Unhealthy in the pod's status", wait, || {
        (reported(bed, "first").as_deref() == Some("Unhealthy")).then_some(())
    });
    let reported_after = errors_from.elapsed();
    let warned = bed.eventually("a Warning Event", wait, || {
        events(bed, "NicUnhealthy").into_iter().next()
    });
    assert!(
        warned.contains(&format!(
            "NIC {DEVICE} ({NIC}, {NETDEV}) is unhealthy: symbol_error of {IBDEV}/1 at "
        )),
        "{warned}"
    );

    transcript(bed, "unhealthy");

    // The NIC freed while unhealthy: a new pod that wants it is not placed.
    delete_pod(bed, NS, "first");
    bed.eventually("the first pod's claim gone", wait, || no_claims(bed));
    bed.apply(&counted("second"));
    let unschedulable = || {
        scheduled(bed, "second").filter(|(status, message)| {
            status == "False" && message.contains("cannot allocate all claims")
        })
    };
    bed.eventually("the new pod unschedulable", wait, unschedulable);
    std::thread::sleep(Duration::from_secs(10));
    assert!(unschedulable().is_some(), "{:?}", scheduled(bed, "second"));
    assert_eq!(
        taints(bed),
        taint("unhealthy", "symbol_error", "NoSchedule")
    );
    climbing.store(false, Ordering::Relaxed);
    errors.join().unwrap();
    let quiet_from = Instant::now();

    // The errors leave the 60 s window, then the quiet period (20 s here):
    // the taint goes, the waiting pod is placed and runs on a Healthy NIC.
    let recovery = Duration::from_secs(180);
    bed.eventually("the taint lifted", recovery, || {
        taints(bed).is_empty().then_some(())
    });
    let lifted_after = quiet_from.elapsed();
    assert_eq!(seen(bed, NS, "second").env["AINIC_PCI_ADDRESSES"], NIC);
    bed.eventually("Healthy in the new pod's status", wait, || {
        (reported(bed, "second").as_deref() == Some("Healthy")).then_some(())
    });
    let recovered = bed.eventually("a Normal Event", wait, || {
        events(bed, "NicRecovered").into_iter().next()
    });
    assert!(recovered.contains("is healthy again"), "{recovered}");
    assert_eq!(events(bed, "NicUnhealthy").len(), 1, "no flapping");
    transcript(bed, "recovered");
    eprintln!(
        "counters: tainted {tainted_after:?} and Unhealthy in the pod's status \
         {reported_after:?} after the first symbol errors (refresh every 2 s); \
         untainted {lifted_after:?} after they stopped (window 60 s + quiet 20 s)"
    );
}
