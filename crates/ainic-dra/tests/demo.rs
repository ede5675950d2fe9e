//! `ainic-dra demo`, run as a user would (the README's first command):
//! it must finish cleanly, tell every use case, and with `--keep` leave
//! files that prove what it said — the specs the agents wrote, the claims
//! the scheduler allocated, the slices they came from.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn demo(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .arg("demo")
        .args(args)
        .env_remove("AINIC_DRA_LOG")
        .output()
        .unwrap()
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// `(pool, device)` → attributes, over every slice.
fn attributes(slices: &[Value]) -> BTreeMap<(String, String), Value> {
    let mut out = BTreeMap::new();
    for slice in slices {
        let pool = slice["spec"]["pool"]["name"].as_str().unwrap().to_string();
        for device in slice["spec"]["devices"].as_array().unwrap() {
            let name = device["name"].as_str().unwrap().to_string();
            out.insert((pool.clone(), name), device["attributes"].clone());
        }
    }
    out
}

fn string_attr(attrs: &Value, name: &str) -> String {
    attrs[name]["string"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn demo_runs_every_use_case_and_leaves_the_evidence() {
    let tmp = tempfile::tempdir().unwrap();
    let keep = tmp.path().join("kept");
    let out = demo(&["--keep", keep.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains('\x1b'), "colour on a pipe");
    for line in [
        "job-0 -> node-a pf-0000-04-00-0 (fabric pod-a, rail 0)",
        "job-1 -> node-b pf-0000-04-00-0 (fabric pod-a, rail 0)",
        "job-2 stays Pending",
        "job-a-0 -> node-a pf-0000-84-00-0 (partition pod-a)",
        "job-a-1 -> node-a pf-0000-a4-00-0 (partition pod-a)",
        "job-b-0 stays Pending: 0/3 nodes are available",
        "node node-c: claim demo/job-b: request partition:",
        "node-c: claim demo/job-2: request nic:",
        "env: NCCL_IB_HCA==ionic_1",
        "env: AINIC_SHARE_ID=",
        "node-a: 10 claims unprepared, CDI dir empty",
        "3 agents stopped on SIGTERM",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }

    // The claims the scheduler allocated pair each GPU with the NIC that
    // names it as nearest, at PIX distance.
    let slices = documents(&keep.join("slices.yaml"));
    let attrs = attributes(&slices);
    let claims = documents(&keep.join("claims.yaml"));
    let trainers: Vec<&Value> = claims
        .iter()
        .filter(|c| {
            c["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("trainer-")
        })
        .collect();
    assert_eq!(trainers.len(), 2);
    for claim in trainers {
        let results = claim["status"]["allocation"]["devices"]["results"]
            .as_array()
            .unwrap();
        let pick = |request: &str| {
            let r = results.iter().find(|r| r["request"] == request).unwrap();
            (
                r["pool"].as_str().unwrap().to_string(),
                r["device"].as_str().unwrap().to_string(),
            )
        };
        let gpu = &attrs[&pick("gpu")];
        let nic = &attrs[&pick("nic")];
        assert_eq!(
            string_attr(nic, "ainic.amd.com/nearestGPU"),
            string_attr(gpu, "gpu.amd.com/pciAddr")
        );
        assert_eq!(string_attr(nic, "ainic.amd.com/gpuAffinity"), "PIX");
    }
    // job-2 was never allocated: it is not stored.
    assert!(!claims.iter().any(|c| c["metadata"]["name"] == "job-2"));

    // The CDI specs the agents wrote, one per prepared claim and one per
    // request's device metadata, and none left.
    let prepared = keep.join("cdi-prepared/node-a");
    let specs: Vec<_> = std::fs::read_dir(&prepared)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    // job-a's partition claim is prepared with no device and gets none.
    assert_eq!(specs.len(), 18);
    let mut kinds = std::collections::BTreeMap::new();
    for spec in &specs {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(spec).unwrap()).unwrap();
        *kinds
            .entry(v["kind"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
        assert!(v["cdiVersion"].as_str().unwrap().starts_with("0."));
    }
    assert_eq!(
        kinds,
        [
            ("ainic.amd.com/metadata".to_string(), 9),
            ("amd.com/ainic".to_string(), 9)
        ]
        .into()
    );
    for node in ["node-a", "node-b", "node-c"] {
        let left = std::fs::read_dir(keep.join(node).join("cdi"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(left, 0, "{node} has CDI specs left");
        assert!(keep.join(node).join("sys/bus/pci/devices").is_dir());
        let log = std::fs::read_to_string(keep.join(node).join("agent.log")).unwrap();
        assert!(log.contains("DRA plugin serving"), "{node} log:\n{log}");
    }
}

#[test]
fn keep_refuses_a_directory_with_files() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("precious"), "data").unwrap();
    let out = demo(&["--keep", tmp.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is not empty"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(tmp.path().join("precious").exists());
}
