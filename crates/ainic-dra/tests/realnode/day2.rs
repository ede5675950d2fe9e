//! Issue 31, day 2 on a real node: a rolling upgrade of the chart to a new
//! image tag and its rollback, the agent killed with SIGKILL, the kubelet
//! and containerd restarted, a reboot, and a drain — each while pods with
//! NIC claims (DRA and classic `amd.com/nic`) start and stop. No pod may
//! fail to start, and nothing may be left behind once the pods are gone.
//! Exclusive netdev mode fails closed: with containerd running without NRI
//! a netdev pod's container is refused, and starts once NRI is back.
//!
//! These tests restart the node's parts, so they have a cluster of their
//! own ([`day2_cluster`]) and run one at a time (`SERIAL`).

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testkit::testbed::{Testbed, UpOptions, Version};

use crate::classic::extended_pod;
use crate::netdev::{HostLink, assert_moved_in, netdev_template};
use crate::support::*;

/// One node, 1.37; NICs 0000:04..64 on the classic `amd.com/nic`, the
/// other four for DRA, exclusive netdev mode on; the agent's boot ID from
/// the testbed's file.
fn day2_cluster() -> &'static Testbed {
    static BED: OnceLock<Testbed> = OnceLock::new();
    static TRIED: AtomicBool = AtomicBool::new(false);
    BED.get_or_init(|| {
        // A start that panicked is not tried again by every later test.
        assert!(
            !TRIED.swap(true, Ordering::SeqCst),
            "the day-2 cluster failed to start in an earlier test"
        );
        let bed = Testbed::up(&UpOptions {
            version: Some(Version::V1_37),
            nodes: 1,
            ..UpOptions::default()
        });
        bed.install_chart("ainic", CHART_NS, &values());
        bed.apply(TEMPLATES);
        bed
    })
}

fn values() -> Value {
    json!({
        "classic": {"enabled": true, "config": {
            "resources": [{"name": "amd.com/nic", "selectors": {
                "pciIds": ["1dd8:1002"],
                "pciAddresses": ["0000:04:00.0", "0000:24:00.0", "0000:44:00.0", "0000:64:00.0"]}}],
            "dra": {"pciAddresses": ["0000:84:00.0", "0000:a4:00.0", "0000:c4:00.0", "0000:e4:00.0"]},
        }},
        "model": {"refreshInterval": 2, "rescanInterval": 2},
        "netdevMode": {"enabled": true},
    })
}

const NS: &str = "day2";

const TEMPLATES: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: day2}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: nic, namespace: day2}
spec:
  spec:
    devices:
      requests:
      - name: nic
        exactly: {deviceClassName: ainic-pf}
"#;

/// One test at a time: they restart the node under each other.
static SERIAL: Mutex<()> = Mutex::new(());

/// Starts a test: the cluster to itself, its agents settled and no pod
/// or prepared claim left by an earlier test (even a failed one).
fn begin() -> (std::sync::MutexGuard<'static, ()>, &'static Testbed) {
    let one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bed = day2_cluster();
    bed.wait_agents(CHART_NS);
    assert_nothing_left(bed);
    (one, bed)
}

/// A DRA pod (`dra-N`, a claim from the `nic` template) or a classic one
/// (`classic-N`, one `amd.com/nic`), alternating.
fn stream_pod(i: usize, dra_only: bool) -> (String, String) {
    if dra_only || i.is_multiple_of(2) {
        let name = format!("dra-{i}");
        let pod = pod(NS, &name, &[Claim::Template("nic", "nic")], json!({}));
        (name, pod)
    } else {
        let name = format!("classic-{i}");
        let pod = extended_pod(NS, &name, 1, json!({}));
        (name, pod)
    }
}

/// What a stream of pods saw: each pod's start time (create → Running as
/// this test saw it), the pods that did not start, and whether the node's
/// slices were ever seen empty.
#[derive(Default)]
struct StreamReport {
    starts: Vec<Duration>,
    failed: Vec<String>,
    slices_gone: usize,
}

/// Creates pods one after another until `stop`, each waited for until it
/// runs, keeping the last two and deleting older ones; `first` numbers them.
/// What a stream creates and how long a pod may take to start.
#[derive(Clone, Copy)]
struct Stream {
    /// DRA pods only (the kubelet rejects a classic pod outright while
    /// its device plugin is gone; a DRA pod waits).
    dra_only: bool,
    start_within: Duration,
}

const BOTH: Stream = Stream {
    dra_only: false,
    start_within: POD_START,
};

/// While the agent or the kubelet restarts: a pod caught by it waits for
/// the agent's restart (the kubelet's backoff) and its own sync backoff,
/// minutes rather than [`POD_START`]; classic pods are left out (the
/// kubelet rejects them while the device plugin is not registered).
const PATIENT: Stream = Stream {
    dra_only: true,
    start_within: Duration::from_secs(300),
};

fn stream(
    bed: &'static Testbed,
    first: usize,
    kind: Stream,
    stop: Arc<AtomicBool>,
) -> StreamReport {
    let mut report = StreamReport::default();
    let mut alive: Vec<String> = vec![];
    let mut i = first;
    while !stop.load(Ordering::SeqCst) {
        let (name, yaml) = stream_pod(i, kind.dra_only);
        i += 1;
        let created = Instant::now();
        bed.apply(&yaml);
        match wait_running_within(bed, &name, kind.start_within) {
            Ok(()) => report.starts.push(created.elapsed()),
            Err(why) => report.failed.push(format!("{name}: {why}")),
        }
        if published(bed, "node-1").is_empty() {
            report.slices_gone += 1;
        }
        alive.push(name);
        if alive.len() > 2 {
            let old = alive.remove(0);
            let _ = bed.kubectl(&["delete", "pod", "-n", NS, &old, "--wait=false"]);
        }
    }
    for name in alive {
        let _ = bed.kubectl(&["delete", "pod", "-n", NS, &name, "--wait=false"]);
    }
    report
}

/// Waits for pod `name` to run; why not, when it failed or took too long.
fn wait_running(bed: &Testbed, name: &str) -> Result<(), String> {
    wait_running_within(bed, name, POD_START)
}

fn wait_running_within(bed: &Testbed, name: &str, within: Duration) -> Result<(), String> {
    let start = Instant::now();
    while start.elapsed() < within {
        let pod = bed
            .get_json(&["get", "pod", "-n", NS, name])
            .unwrap_or_default();
        match pod["status"]["phase"].as_str() {
            Some("Running") => return Ok(()),
            Some("Failed") => return Err(format!("failed: {}", pod["status"])),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    Err(format!(
        "not Running within {within:?}: {}",
        events_of(bed, NS, name)
    ))
}

/// Runs a stream of pods while `during` runs, and a little after.
fn stream_during(
    bed: &'static Testbed,
    first: usize,
    kind: Stream,
    during: impl FnOnce(),
) -> StreamReport {
    let stop = Arc::new(AtomicBool::new(false));
    let streaming = {
        let stop = stop.clone();
        std::thread::spawn(move || stream(bed, first, kind, stop))
    };
    during();
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::SeqCst);
    streaming.join().expect("the stream of pods")
}

fn percentile(starts: &[Duration], p: f64) -> Duration {
    let mut sorted = starts.to_vec();
    sorted.sort();
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(at).copied().unwrap_or_default()
}

fn print_starts(what: &str, report: &StreamReport) {
    eprintln!(
        "{what}: {} pods started, p50 {:?}, p99 {:?}",
        report.starts.len(),
        percentile(&report.starts, 0.5),
        percentile(&report.starts, 0.99),
    );
}

fn assert_clean(report: &StreamReport, what: &str) {
    assert!(
        report.failed.is_empty(),
        "{what}: pods did not start: {:#?}",
        report.failed
    );
    assert_eq!(
        report.slices_gone, 0,
        "{what}: the node's slices were gone {} times",
        report.slices_gone
    );
    assert!(!report.starts.is_empty(), "{what}: no pod started at all");
}

/// The agent pods' names.
fn agents(bed: &Testbed) -> Vec<String> {
    let pods = bed
        .get_json(&[
            "get",
            "pod",
            "-n",
            CHART_NS,
            "-l",
            "app.kubernetes.io/component=node-agent",
        ])
        .expect("agent pods");
    pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The claim UIDs the node's checkpoint holds.
fn checkpointed(bed: &Testbed) -> Vec<String> {
    let dir = bed.node_path(1, "/var/lib/ainic-dra");
    let state = ainic_dra_node::checkpoint::read(&dir)
        .unwrap_or_else(|e| panic!("cannot read the checkpoint in {}: {e}", dir.display()));
    state.claims.keys().cloned().collect()
}

/// Deletes every pod of the namespace and waits until the node holds no
/// prepared claim: no claim spec, no checkpoint entry.
fn assert_nothing_left(bed: &Testbed) {
    bed.kubectl(&[
        "delete",
        "pod",
        "-n",
        NS,
        "--all",
        "--wait=true",
        "--timeout=120s",
    ])
    .expect("delete the pods");
    bed.eventually(
        "no claim spec and no checkpointed claim left",
        Duration::from_secs(120),
        || (claim_specs(bed, 1).is_empty() && checkpointed(bed).is_empty()).then_some(()),
    );
}

/// The image tag the chart installs (the workspace version).
fn tag() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// Tags the agent's image as `new` inside node 1, as a registry would
/// serve a new release.
fn tag_image(bed: &Testbed, new: &str) {
    let from = format!("ghcr.io/amd/ainic-dra:{}", tag());
    let to = format!("ghcr.io/amd/ainic-dra:{new}");
    let out = bed.ctr(1, &["images", "tag", "--force", &from, &to]);
    assert!(
        out.status.success(),
        "ctr images tag: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A pod that holds a DRA claim throughout a test, to see that a claim
/// prepared before is unprepared after.
fn keeper(bed: &Testbed, name: &str) -> String {
    bed.apply(&pod(NS, name, &[Claim::Template("nic", "nic")], json!({})));
    wait_running(bed, name).expect("the keeper pod runs");
    let uid = bed.get_json(&["get", "resourceclaim", "-n", NS, &format!("{name}-nic")]);
    let uid = uid
        .ok()
        .and_then(|c| c["metadata"]["uid"].as_str().map(str::to_string));
    uid.unwrap_or_else(|| claim_of(bed, name))
}

/// The UID of the claim generated for pod `name`.
fn claim_of(bed: &Testbed, name: &str) -> String {
    let pod = bed.get_json(&["get", "pod", "-n", NS, name]).expect("pod");
    let claim = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        .as_str()
        .expect("a generated claim")
        .to_string();
    let claim = bed
        .get_json(&["get", "resourceclaim", "-n", NS, &claim])
        .expect("claim");
    claim["metadata"]["uid"].as_str().expect("uid").to_string()
}

#[test]
fn a_rolling_upgrade_and_its_rollback_fail_no_pod() {
    let (_one, bed) = begin();
    let at_rest = stream_during(bed, 0, BOTH, || std::thread::sleep(Duration::from_secs(20)));
    print_starts("at rest", &at_rest);
    assert_clean(&at_rest, "at rest");
    let keeper_uid = keeper(bed, "keeper-upgrade");
    let before = agents(bed);
    tag_image(bed, "0.1.1-next");
    let upgrade = stream_during(bed, 1000, BOTH, || {
        let mut next = values();
        next["image"] = json!({"tag": "0.1.1-next"});
        bed.upgrade_chart("ainic", CHART_NS, &next);
        bed.wait_agents(CHART_NS);
    });
    print_starts("upgrade", &upgrade);
    assert_clean(&upgrade, "upgrade");
    let after = agents(bed);
    assert_eq!(after.len(), 1, "one agent after the rollout: {after:?}");
    assert!(
        !before.contains(&after[0]),
        "the agent was replaced: {before:?} → {after:?}"
    );
    let rollback = stream_during(bed, 2000, BOTH, || {
        bed.helm(&["rollback", "ainic", "1", "--namespace", CHART_NS])
            .unwrap_or_else(|e| panic!("{e}"));
        bed.wait_agents(CHART_NS);
    });
    print_starts("rollback", &rollback);
    assert_clean(&rollback, "rollback");
    assert!(
        checkpointed(bed).contains(&keeper_uid),
        "the keeper's claim is still prepared"
    );
    delete_pod(bed, NS, "keeper-upgrade");
    bed.eventually(
        "the claim prepared two agents ago is unprepared",
        Duration::from_secs(60),
        || (!checkpointed(bed).contains(&keeper_uid)).then_some(()),
    );
    assert_nothing_left(bed);
}

/// The pid of the agent's process (its container's init), found from
/// inside the node with crictl.
fn agent_pid(bed: &Testbed) -> Option<String> {
    let out = bed.crictl(
        1,
        &["ps", "--name", "node-agent", "--state", "Running", "-q"],
    );
    let id = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()?
        .trim()
        .to_string();
    let out = bed.crictl(
        1,
        &[
            "inspect",
            "--output",
            "go-template",
            "--template",
            "{{.info.pid}}",
            &id,
        ],
    );
    let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!pid.is_empty() && pid != "0").then_some(pid)
}

#[test]
fn the_agent_killed_at_any_moment_leaves_no_pod_stuck_and_nothing_behind() {
    let (_one, bed) = begin();
    let mut kills = 0;
    let report = stream_during(bed, 3000, PATIENT, || {
        // Three kills, each once the agent is back and Ready: the kubelet
        // restarts a killed container after a backoff that doubles (10,
        // 20, 40 s), which pods started meanwhile wait out.
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(1500));
            let pid = bed.eventually("the agent runs", Duration::from_secs(120), || {
                agent_pid(bed)
            });
            let status = Command::new("kill")
                .args(["-9", &pid])
                .status()
                .expect("kill");
            kills += usize::from(status.success());
            std::thread::sleep(Duration::from_secs(2));
            bed.wait_agents(CHART_NS);
        }
    });
    print_starts("agent killed", &report);
    assert_eq!(kills, 3, "every kill landed");
    assert!(
        report.failed.is_empty(),
        "pods did not start: {:#?}",
        report.failed
    );
    assert_nothing_left(bed);
}

#[test]
fn running_pods_keep_their_devices_across_kubelet_and_containerd_restarts() {
    let (_one, bed) = begin();
    // The keeper's claim stands alone, so that pods can join it after each
    // restart: a restarted kubelet restores its claims as not prepared and
    // asks the agent again when a pod joins one, and the agent must answer
    // with the devices it prepared, not fail or prepare anew. (One claim:
    // the node's four DRA PFs are the keeper's and the stream's.)
    bed.apply(&pf_claim(NS, "held"));
    let held = [Claim::Shared("nic", "held")];
    bed.apply(&pod(NS, "keeper-restarts", &held, json!({})));
    wait_running(bed, "keeper-restarts").expect("the keeper pod runs");
    let uid = bed
        .get_json(&["get", "resourceclaim", "-n", NS, "held"])
        .expect("the held claim")["metadata"]["uid"]
        .as_str()
        .expect("uid")
        .to_string();
    let before = seen(bed, NS, "keeper-restarts");
    for part in ["kubelet", "containerd"] {
        let report = stream_during(
            bed,
            if part == "kubelet" { 4000 } else { 5000 },
            PATIENT,
            || bed.restart(1, part),
        );
        print_starts(&format!("{part} restart"), &report);
        assert!(
            report.failed.is_empty(),
            "{part} restart: pods did not start: {:#?}",
            report.failed
        );
        let kept = bed
            .get_json(&["get", "pod", "-n", NS, "keeper-restarts"])
            .expect("keeper");
        assert_eq!(
            kept["status"]["phase"], "Running",
            "after the {part} restart"
        );
        assert_eq!(
            kept["status"]["containerStatuses"][0]["restartCount"], 0,
            "after the {part} restart"
        );
        assert!(
            claim_specs(bed, 1).contains(&format!("ainic.amd.com-{uid}.json")),
            "{part}: spec kept"
        );
        assert!(
            checkpointed(bed).contains(&uid),
            "{part}: claim still prepared"
        );
        let joiner = format!("held-after-{part}");
        bed.apply(&pod(NS, &joiner, &held, json!({})));
        let joined = seen(bed, NS, &joiner);
        assert_eq!(
            (joined.devices, &joined.env["AINIC_PCI_ADDRESSES"]),
            (before.devices.clone(), &before.env["AINIC_PCI_ADDRESSES"]),
            "{part}: a pod joining a claim prepared before the restart"
        );
    }
    let exec = bed
        .kubectl(&[
            "exec",
            "-n",
            NS,
            "keeper-restarts",
            "--",
            "ls",
            "/dev/infiniband",
        ])
        .expect("exec in the keeper");
    let now: Vec<String> = exec.split_whitespace().map(str::to_string).collect();
    assert_eq!(
        now, before.devices,
        "the keeper's devices after both restarts"
    );
    assert_nothing_left(bed);
    bed.kubectl(&["delete", "resourceclaim", "-n", NS, "held", "--wait=true"])
        .expect("delete the held claim");
}

/// The device numbers (`major:minor`, hex as stat prints them) of the RDMA
/// devices pod `name` sees.
fn device_numbers(bed: &Testbed, name: &str) -> Vec<String> {
    let out = bed
        .kubectl(&[
            "exec",
            "-n",
            NS,
            name,
            "--",
            "sh",
            "-c",
            "stat -c '%n %t:%T' /dev/infiniband/*",
        ])
        .unwrap_or_else(|e| e);
    out.lines().map(str::to_string).collect()
}

/// The device numbers node 1's own `/dev/infiniband` has for `names`.
fn node_numbers(bed: &Testbed, seen: &[String]) -> Vec<String> {
    let out = bed.in_node(
        1,
        &[
            "sh",
            "-c",
            "cd /opt/ainic-testbed/dev/infiniband && stat -c '%n %t:%T' *",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let wanted: Vec<&str> = seen
        .iter()
        .filter_map(|l| l.split(' ').next())
        .map(|p| p.trim_start_matches("/dev/infiniband/"))
        .collect();
    text.lines()
        .filter(|l| wanted.contains(&l.split(' ').next().unwrap_or("")))
        .map(|l| format!("/dev/infiniband/{l}"))
        .collect()
}

/// When pod `name`'s container last started, if it runs.
fn started_at(bed: &Testbed, name: &str) -> Option<String> {
    let pod = bed.get_json(&["get", "pod", "-n", NS, name]).ok()?;
    let running = &pod["status"]["containerStatuses"][0]["state"]["running"];
    running["startedAt"].as_str().map(str::to_string)
}

#[test]
fn after_a_reboot_pods_come_back_with_todays_devices_and_deleted_claims_are_swept() {
    let (_one, bed) = begin();
    let always = json!({"restartPolicy": "Always"});
    bed.apply(&pod(
        NS,
        "survivor",
        &[Claim::Template("nic", "nic")],
        always.clone(),
    ));
    bed.apply(&pod(NS, "leaver", &[Claim::Template("nic", "nic")], always));
    wait_running(bed, "survivor").expect("survivor runs");
    wait_running(bed, "leaver").expect("leaver runs");
    let before = device_numbers(bed, "survivor");
    let started = started_at(bed, "survivor");
    let leaver = claim_of(bed, "leaver");
    bed.restart(1, "down");
    // Deleted while the node is down: its claim is deallocated and gone
    // before the agent is back.
    let _ = bed.kubectl(&[
        "delete",
        "pod",
        "-n",
        NS,
        "leaver",
        "--grace-period=0",
        "--force",
    ]);
    bed.eventually(
        "the leaver's claim is gone",
        Duration::from_secs(60),
        || {
            let claims = bed.get_json(&["get", "resourceclaims", "-n", NS]).ok()?;
            (!claims.to_string().contains(&leaver)).then_some(())
        },
    );
    bed.restart(1, "up");
    bed.eventually(
        "survivor starts again after the reboot",
        Duration::from_secs(180),
        || {
            let now = started_at(bed, "survivor");
            (now.is_some() && now != started).then_some(())
        },
    );
    let after = bed.eventually(
        "survivor shows its devices",
        Duration::from_secs(60),
        || {
            let numbers = device_numbers(bed, "survivor");
            let all =
                !numbers.is_empty() && numbers.iter().all(|l| l.starts_with("/dev/infiniband/"));
            all.then_some(numbers)
        },
    );
    assert_ne!(after, before, "the reboot renumbered the devices");
    assert_eq!(
        after,
        node_numbers(bed, &after),
        "the pod sees today's device numbers"
    );
    bed.eventually(
        "the claim deleted while the node was down is swept",
        Duration::from_secs(90),
        || (!checkpointed(bed).contains(&leaver)).then_some(()),
    );
    assert_nothing_left(bed);
}

#[test]
fn a_drain_unprepares_every_claim_of_the_node() {
    let (_one, bed) = begin();
    for name in ["drained-0", "drained-1"] {
        keeper(bed, name);
    }
    assert_eq!(checkpointed(bed).len(), 2);
    bed.kubectl(&[
        "drain",
        "node-1",
        "--ignore-daemonsets",
        "--force",
        "--timeout=120s",
    ])
    .unwrap_or_else(|e| panic!("drain: {e}"));
    let left = bed.eventually(
        "no prepared claim after the drain",
        Duration::from_secs(60),
        || {
            let left = checkpointed(bed);
            (left.is_empty() && claim_specs(bed, 1).is_empty()).then_some(left)
        },
    );
    bed.kubectl(&["uncordon", "node-1"]).expect("uncordon");
    assert!(left.is_empty());
}

/// The names in `list` (kubectl's JSON) that mention the driver.
fn ours(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o.to_string().contains("ainic"))
        .map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn uninstall_leaves_nothing_behind_and_a_reinstall_works() {
    let (_one, bed) = begin();
    bed.helm(&[
        "uninstall",
        "ainic",
        "--namespace",
        CHART_NS,
        "--wait",
        "--timeout",
        "180s",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    for kind in [
        "resourceslices",
        "deviceclasses",
        "validatingadmissionpolicies",
        "clusterroles",
    ] {
        let left = ours(&bed.get_json(&["get", kind]).expect(kind));
        assert!(left.is_empty(), "{kind} left after uninstall: {left:?}");
    }
    let start = Instant::now();
    let left = loop {
        let left = files_left(bed);
        if left.is_empty() || start.elapsed() > Duration::from_secs(60) {
            break left;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        left.is_empty(),
        "files left after uninstall: {left:?}\nthe agent's last log:\n{}",
        agent_log_on_node(bed)
    );
    bed.install_chart("ainic", CHART_NS, &values());
    keeper(bed, "after-reinstall");
    assert_nothing_left(bed);
}

/// Our files on node 1 (CDI, state, plugin, metadata and registry directories).
fn files_left(bed: &Testbed) -> Vec<String> {
    let mut left: Vec<String> = bed.node_files(1, "/run/cdi");
    left.extend(bed.node_files(1, "/var/lib/ainic-dra"));
    left.extend(bed.node_files(1, "/var/lib/kubelet/plugins/ainic.amd.com"));
    left.extend(bed.node_files(1, "/run/ainic-dra/ainic.amd.com"));
    for dir in [
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/device-plugins",
    ] {
        let ours = bed
            .node_files(1, dir)
            .into_iter()
            .filter(|f| f.contains("ainic"));
        left.extend(ours);
    }
    left
}

/// The end of the newest node agent container log kept on node 1 (the
/// pod is gone from the API by then).
fn agent_log_on_node(bed: &Testbed) -> String {
    let out = bed.in_node(
        1,
        &[
            "sh",
            "-c",
            "tail -n 30 $(ls -t /var/log/pods/*node-agent*/*/* | head -1)",
        ],
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Node 1's NIC 0000:a4:00.0 and its netdev (not the one the main
/// cluster's netdev test moves: both clusters share the host's links).
const NETDEV_NIC: &str = "0000:a4:00.0";
const NETDEV: &str = "enp164s0";

/// A pod `name` with a claim on [`NETDEV_NIC`] in exclusive netdev mode.
fn netdev_pod(bed: &Testbed, name: &str, extra: Value) {
    bed.apply(&netdev_template(NS, "netdev", NETDEV_NIC));
    bed.apply(&pod(NS, name, &[Claim::Template("nic", "netdev")], extra));
}

/// The first message of pod `name` (its container's states, else its
/// events) that names `what`; fails after [`POD_START`] showing both.
fn refusal(bed: &Testbed, name: &str, what: &str) -> String {
    let start = Instant::now();
    loop {
        let pod = bed
            .get_json(&["get", "pod", "-n", NS, name])
            .unwrap_or_default();
        let status = &pod["status"]["containerStatuses"][0];
        let states = [
            &status["state"]["waiting"],
            &status["state"]["terminated"],
            &status["lastState"]["terminated"],
        ];
        let events = events_of(bed, NS, name);
        let found = (states.into_iter())
            .filter_map(|s| s["message"].as_str())
            .chain(events.lines())
            .find(|m| m.contains(what));
        if let Some(found) = found {
            return found.to_string();
        }
        assert!(
            start.elapsed() < POD_START,
            "no message naming {what:?} for pod {name} within {POD_START:?}: {}\n{events}",
            pod["status"],
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_netdev_claim_is_not_prepared_while_containerd_runs_without_nri_and_is_once_it_is_back() {
    let (_one, bed) = begin();
    let link = HostLink::new(NETDEV);
    bed.restart(1, "containerd-without-nri");
    netdev_pod(bed, "unattached", json!({}));
    let refused = refusal(bed, "unattached", "exclusive netdev mode");
    eprintln!("refused without NRI: {refused}");
    let pod = bed
        .get_json(&["get", "pod", "-n", NS, "unattached"])
        .expect("pod");
    let claim = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        .as_str()
        .expect("a generated claim");
    assert!(
        refused.contains(claim) && refused.contains("is NRI enabled in the runtime?"),
        "the refusal names claim {claim} and the cause: {refused}"
    );
    assert_ne!(pod["status"]["phase"], "Running", "no netdev, no run");
    assert!(link.on_host(), "nothing moved the netdev without NRI");
    bed.restart(1, "containerd");
    // The agent's NRI plugin reconnects (its backoff reaches 30 s), then
    // the kubelet's next prepare retry goes through.
    wait_running_within(bed, "unattached", Duration::from_secs(300))
        .unwrap_or_else(|why| panic!("the pod runs once NRI is back: {why}"));
    assert_moved_in(&seen(bed, NS, "unattached"));
    assert!(!link.on_host(), "the netdev is in the pod");
    delete_pod(bed, NS, "unattached");
    bed.eventually(
        "the netdev is home under its own name",
        Duration::from_secs(60),
        || link.on_host().then_some(()),
    );
    assert_nothing_left(bed);
}
