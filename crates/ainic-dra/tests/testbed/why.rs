//! Issue 33 item 2 on the real scheduler: pods the real kube-scheduler
//! leaves pending for eight different reasons (a class that does not
//! exist, more NICs than a node has, a selector no NIC meets, NICs held by
//! another pod's claim, a class no node publishes, a claim allocated on
//! another node, a cordoned node, a tainted node) and one it never tries
//! (a claim that does not exist). For each, `kubectl ainic why` — the
//! binary as the kubectl plugin `kubectl-ainic`, run by the real kubectl
//! with the kubeconfig in `$KUBECONFIG` — predicts the scheduler's
//! `PodScheduled` message word for word, says it agrees, and names the
//! cause. `ainic-dra why` prints the same as a table.
//!
//! Runs on a control plane of its own: the scheduler's message counts
//! every node, and other tests add theirs.

use std::collections::BTreeMap;
use std::process::Command;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::testbed::{Testbed, UpOptions, Version, cluster, wait};

use crate::support::{NodeAgent, own_bed, s};

const NAMESPACE: &str = "why";
const TOPOLOGY: &str = "mi300x-8gpu-8nic";
/// The nodes with agents (8 exclusive PFs each).
const NODES: [&str; 2] = ["why-1", "why-2"];
const CORDONED: &str = "why-cordoned";
const TAINTED: &str = "why-tainted";
const TAINT: &str = "example.com/maintenance";
/// The taint a cordoned node stands for (NodeUnschedulable honours its toleration).
const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// A claim of `count` PFs of `class` (`All` for every one), with `selector`.
fn claim(name: &str, class: &str, count: Option<u32>, selector: Option<&str>) -> ResourceClaim {
    let mut exactly = json!({"deviceClassName": class});
    match count {
        Some(n) => exactly["count"] = json!(n),
        None => exactly["allocationMode"] = json!("All"),
    }
    if let Some(cel) = selector {
        exactly["selectors"] = json!([{"cel": {"expression": cel}}]);
    }
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "nic", "exactly": exactly}]}}}))
    .unwrap()
}

/// A pod using claim `claim`, only on `node` if given, tolerating `tolerate`.
fn pod(name: &str, claim: &str, node: Option<&str>, tolerate: &[&str]) -> Pod {
    let selector = match node {
        Some(n) => json!({HOSTNAME: n}),
        None => json!({}),
    };
    let tolerations: Vec<Value> = (tolerate.iter())
        .map(|k| json!({"key": k, "operator": "Exists", "effect": "NoSchedule"}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": selector,
            "tolerations": tolerations,
            "resourceClaims": [{"name": "nic", "resourceClaimName": claim}],
            "containers": [{"name": "main", "image": "testbed.invalid/app:none",
                            "resources": {"claims": [{"name": "nic"}]}}],
        },
    }))
    .unwrap()
}

/// What a pending pod must show: its name, its claim (`None`: it uses
/// `owner`'s claim `shared`), where it may go,
/// what it tolerates, a piece of the scheduler's message, and the cause
/// `why` must name (`kind` of a node group's cause, or the stage where
/// the scheduler stops before the nodes).
struct Pending {
    pod: &'static str,
    claim: Option<ResourceClaim>,
    node: Option<&'static str>,
    tolerate: &'static [&'static str],
    says: &'static str,
    cause: &'static str,
}

fn pending() -> Vec<Pending> {
    let row = |pod, claim, node, tolerate, says, cause| Pending {
        pod,
        claim: Some(claim),
        node,
        tolerate,
        says,
        cause,
    };
    vec![
        row(
            "no-class",
            claim("no-class", "ainic-nonexistent", Some(1), None),
            None,
            &[],
            "request nic: device class ainic-nonexistent does not exist",
            "PreFilter",
        ),
        row(
            "too-many",
            claim("too-many", "ainic-pf", Some(9), None),
            None,
            &[],
            "2 cannot allocate all claims",
            "tooMany",
        ),
        row(
            "selector",
            claim(
                "selector",
                "ainic-pf",
                Some(1),
                Some("device.attributes[\"ainic.amd.com\"].type == \"vf\""),
            ),
            None,
            &[],
            "2 cannot allocate all claims",
            "selectors",
        ),
        row(
            "held",
            claim("held", "ainic-pf", Some(1), None),
            Some(NODES[0]),
            &[],
            "1 cannot allocate all claims",
            "held",
        ),
        row(
            "no-device",
            claim("no-device", "why-gpu", Some(1), None),
            None,
            &[],
            "2 cannot allocate all claims",
            "noDevice",
        ),
        Pending {
            pod: "elsewhere",
            claim: None,
            node: Some(NODES[0]),
            tolerate: &[],
            says: "1 resourceclaim not available on the node",
            cause: "",
        },
        row(
            "cordoned",
            claim("cordoned", "ainic-pf", Some(1), None),
            Some(CORDONED),
            &[TAINT],
            "1 node(s) were unschedulable, 3 node(s) didn't match Pod's node affinity/selector",
            "",
        ),
        row(
            "tainted",
            claim("tainted", "ainic-pf", Some(1), None),
            Some(TAINTED),
            &[UNSCHEDULABLE],
            "1 node(s) had untolerated taint",
            "",
        ),
    ]
}

/// The four nodes, the classes and the two pods that hold devices: `hog`
/// takes every PF of why-1, `owner` one of why-2 by claim `shared`.
async fn set_up(bed: &'static Testbed) -> Vec<NodeAgent> {
    let client = bed.client().await;
    cluster::namespace(&client, NAMESPACE).await;
    let mut agents = Vec::new();
    for node in NODES {
        agents.push(NodeAgent::start(bed, node, TOPOLOGY, &BTreeMap::new(), &[]).await);
    }
    for agent in &agents {
        let expected = crate::support::expected_slices(TOPOLOGY, &agent.node, &[]);
        crate::support::published(&client, agent, expected.len()).await;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let params = PatchParams::default();
    cluster::fake_node(&client, CORDONED, &BTreeMap::new()).await;
    let cordon = json!({"spec": {"unschedulable": true}});
    nodes
        .patch(CORDONED, &params, &Patch::Merge(&cordon))
        .await
        .unwrap();
    cluster::fake_node(&client, TAINTED, &BTreeMap::new()).await;
    let taint =
        json!({"spec": {"taints": [{"key": TAINT, "value": "true", "effect": "NoSchedule"}]}});
    nodes
        .patch(TAINTED, &params, &Patch::Merge(&taint))
        .await
        .unwrap();
    let gpu: DeviceClass = serde_json::from_value(json!({"metadata": {"name": "why-gpu"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.amd.com'"}}]}}))
    .unwrap();
    let classes: Api<DeviceClass> = Api::all(client.clone());
    classes.create(&PostParams::default(), &gpu).await.unwrap();

    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let post = PostParams::default();
    for (name, claim_of, node) in [
        ("hog", claim("hog", "ainic-pf", None, None), NODES[0]),
        (
            "owner",
            claim("shared", "ainic-pf", Some(1), None),
            NODES[1],
        ),
    ] {
        let claim_name = claim_of.metadata.name.clone().unwrap();
        claims.create(&post, &claim_of).await.unwrap();
        pods.create(&post, &pod(name, &claim_name, Some(node), &[]))
            .await
            .unwrap();
        wait::until(&format!("pod {name} bound"), wait::DEADLINE, || async {
            let p = pods.get(name).await.map_err(|e| e.to_string())?;
            match p.spec.and_then(|s| s.node_name) {
                Some(n) if n == node => Ok(()),
                other => Err(format!("{other:?}: {:?}", p.status)),
            }
        })
        .await;
    }
    agents
}

/// The scheduler's `PodScheduled=False` reason and message, once written.
async fn scheduler_says(pods: &Api<Pod>, name: &str) -> Result<(String, String), String> {
    let pod = pods.get(name).await.map_err(|e| e.to_string())?;
    let conditions = pod.status.and_then(|s| s.conditions).unwrap_or_default();
    (conditions.into_iter())
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| (c.reason.unwrap_or_default(), c.message.unwrap_or_default()))
        .ok_or_else(|| "no PodScheduled=False condition yet".into())
}

/// `kubectl ainic why POD -n why <extra>`: the real kubectl finding our
/// binary on the PATH as `kubectl-ainic`, the kubeconfig in `$KUBECONFIG`.
fn kubectl_ainic(bed: &Testbed, plugins: &std::path::Path, pod: &str, extra: &[&str]) -> String {
    let kubectl = testkit::testbed::binaries("kube-1.37").join("kubectl");
    let path = format!(
        "{}:{}",
        s(plugins),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(kubectl)
        .args(["ainic", "why", pod, "-n", NAMESPACE])
        .args(extra)
        .env("PATH", path)
        .env("KUBECONFIG", bed.kubeconfig())
        .output()
        .expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl ainic why {pod} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The kinds of the causes of `report`'s node groups, and the stage it
/// stops at before them.
fn causes(report: &Value) -> Vec<String> {
    let mut out: Vec<String> = (report["groups"].as_array().into_iter().flatten())
        .filter_map(|g| g["cause"]["kind"].as_str().map(String::from))
        .collect();
    out.extend(report["blocked"]["stage"].as_str().map(String::from));
    out
}

#[tokio::test]
async fn why_explains_pods_the_real_scheduler_left_pending_in_its_words() {
    let bed = own_bed(UpOptions {
        version: Some(Version::V1_37),
        ..UpOptions::default()
    })
    .await;
    let _agents = set_up(bed).await;
    let client = bed.client().await;
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let post = PostParams::default();
    let rows = pending();
    for row in &rows {
        let uses = match &row.claim {
            Some(c) => claims
                .create(&post, c)
                .await
                .unwrap()
                .metadata
                .name
                .unwrap(),
            None => "shared".to_string(),
        };
        pods.create(&post, &pod(row.pod, &uses, row.node, row.tolerate))
            .await
            .unwrap();
    }
    // Never tried: its claim does not exist (DynamicResources' PreEnqueue).
    pods.create(&post, &pod("missing-claim", "nowhere", None, &[]))
        .await
        .unwrap();

    let plugins = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_ainic-dra"),
        plugins.path().join("kubectl-ainic"),
    )
    .unwrap();
    let mut reasons = std::collections::BTreeSet::new();
    for row in &rows {
        let (reason, message) = wait::until(
            &format!("pod {} left pending by the scheduler", row.pod),
            wait::DEADLINE,
            || scheduler_says(&pods, row.pod),
        )
        .await;
        assert_eq!(reason, "Unschedulable", "{}: {message}", row.pod);
        assert!(
            message.contains(row.says),
            "{}: the scheduler says {message:?}",
            row.pod
        );
        // The scheduler retries on every change of the cluster: `why` and
        // the condition it reads agree once the scheduler has seen it all.
        let report = wait::until(
            &format!("kubectl ainic why {} agreeing", row.pod),
            wait::DEADLINE,
            || async {
                let text = kubectl_ainic(bed, plugins.path(), row.pod, &["-o", "json"]);
                let report: Value = serde_json::from_str(&text).unwrap();
                if report["agrees"] == true {
                    Ok(report)
                } else {
                    Err(text)
                }
            },
        )
        .await;
        let says = report["scheduler"]["message"].as_str().unwrap();
        let predicted = report["predicted"].as_str().unwrap();
        assert!(
            says.starts_with(predicted),
            "{}: {predicted:?} vs {says:?}",
            row.pod
        );
        if !row.cause.is_empty() {
            assert!(
                causes(&report).iter().any(|c| c == row.cause),
                "{}: why names {:?}, not {}: {report:#}",
                row.pod,
                causes(&report),
                row.cause
            );
        }
        if row.pod == "held" {
            let held = &report["groups"][0]["cause"]["claims"];
            assert_eq!(held, &json!(["why/hog"]), "{report:#}");
        }
        reasons.insert(predicted.to_string());
    }
    assert!(reasons.len() >= 6, "{reasons:#?}");

    // The pod the scheduler never tries: no condition, and `why` says so.
    let text = kubectl_ainic(bed, plugins.path(), "missing-claim", &["-o", "yaml"]);
    let report: Value = serde_yaml_ng::from_str(&text).unwrap();
    assert!(report.get("scheduler").is_none(), "{text}");
    assert_eq!(report["agrees"], true, "{text}");
    assert_eq!(report["blocked"]["stage"], "PreEnqueue", "{text}");
    assert_eq!(
        report["blocked"]["reason"], "could not find ResourceClaim \"why/nowhere\"",
        "{text}"
    );

    // For a person: the table, from the binary under its own name.
    let out = Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .args(["why", "held", "-n", NAMESPACE, "--kubeconfig"])
        .arg(bed.kubeconfig())
        .output()
        .unwrap();
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{table}");
    assert!(table.contains("(agrees with the scheduler)"), "{table}");
    assert!(table.contains("why/hog"), "{table}");
    eprintln!(
        "{} pods pending for {} different scheduler messages, each explained as the scheduler says; \
`ainic-dra why held`:\n{table}",
        rows.len(),
        reasons.len()
    );
}
