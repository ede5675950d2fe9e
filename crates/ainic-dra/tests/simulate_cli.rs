//! `ainic-dra simulate` as a user runs it: exit status 0 with the claims
//! allocated, 3 with an explanation naming the request, 2 with one line for
//! every kind of invalid input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::resource::v1::ResourceClaim;

const SLICES: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-gpu}
spec:
  driver: gpu.amd.com
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    attributes: {resource.kubernetes.io/pcieRoot: {string: pci0000:00}}
  - name: gpu-1
    attributes: {resource.kubernetes.io/pcieRoot: {string: pci0000:80}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-nic}
spec:
  driver: ainic.amd.com
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: nic-80
    attributes: {resource.kubernetes.io/pcieRoot: {string: pci0000:80}}
"#;

const CLASSES: &str = r#"
{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu"},
   "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.amd.com'"}}]}},
  {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "nic"},
   "spec": {"selectors": [{"cel": {"expression": "device.driver == 'ainic.amd.com'"}}]}}
]}
"#;

fn pair_claim(name: &str, gpu_selector: &str) -> String {
    format!(
        r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: {name}, namespace: default}}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu
        selectors: [{{cel: {{expression: "{gpu_selector}"}}}}]
    - name: nic
      exactly: {{deviceClassName: nic}}
    constraints:
    - requests: [gpu, nic]
      matchAttribute: resource.kubernetes.io/pcieRoot
"#
    )
}

struct Inputs {
    dir: tempfile::TempDir,
}

impl Inputs {
    fn new() -> Inputs {
        let inputs = Inputs {
            dir: tempfile::tempdir().unwrap(),
        };
        inputs.write("cluster/slices.yaml", SLICES);
        inputs.write("cluster/classes.json", CLASSES);
        inputs
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    fn cluster(&self) -> PathBuf {
        self.dir.path().join("cluster")
    }
}

fn simulate(args: &[&str], files: &[&Path]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ainic-dra"));
    cmd.arg("simulate").args(args);
    for f in files {
        cmd.arg("-f").arg(f);
    }
    cmd.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn claims_from_yaml(out: &Output) -> Vec<ResourceClaim> {
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

fn devices(claim: &ResourceClaim) -> Vec<String> {
    let results = claim
        .status
        .as_ref()
        .unwrap()
        .allocation
        .as_ref()
        .unwrap()
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap();
    results
        .iter()
        .map(|r| format!("{}={}", r.request, r.device))
        .collect()
}

#[test]
fn exit_0_prints_the_claims_with_their_allocation() {
    let inputs = Inputs::new();
    let claim = inputs.write("claim.yaml", &pair_claim("pair", "true"));
    let out = simulate(&["--node", "n1"], &[&inputs.cluster(), &claim]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let claims = claims_from_yaml(&out);
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].metadata.name.as_deref(), Some("pair"));
    assert_eq!(devices(&claims[0]), ["gpu=gpu-1", "nic=nic-80"]);
}

#[test]
fn json_output_is_a_list_of_claims() {
    let inputs = Inputs::new();
    let claim = inputs.write("claim.yaml", &pair_claim("pair", "true"));
    let out = simulate(
        &["--node", "n1", "-o", "json"],
        &[&inputs.cluster(), &claim],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let claims: Vec<ResourceClaim> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(devices(&claims[0]), ["gpu=gpu-1", "nic=nic-80"]);
}

#[test]
fn exit_3_names_the_request_and_why() {
    let inputs = Inputs::new();
    let selector = "device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'";
    let claim = inputs.write("claim.yaml", &pair_claim("pair", selector));
    let out = simulate(&["--node", "n1"], &[&inputs.cluster(), &claim]);
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stdout.is_empty());
    let err = stderr(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("request nic: 1 devices match class nic"),
        "{err}"
    );
    assert!(err.contains("0 satisfy matchAttribute resource.kubernetes.io/pcieRoot with request gpu's device 'gpu-0'"), "{err}");
}

#[test]
fn allocated_claims_hold_their_devices() {
    let inputs = Inputs::new();
    let first = inputs.write("first.yaml", &pair_claim("first", "true"));
    let out = simulate(&["--node", "n1"], &[&inputs.cluster(), &first]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let held = inputs.write("held.yaml", &String::from_utf8(out.stdout).unwrap());
    let second = inputs.write("second.yaml", &pair_claim("second", "true"));
    let out = simulate(&["--node", "n1"], &[&inputs.cluster(), &held, &second]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "the only NIC is taken: {}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("claim default/second"));
}

#[test]
fn gates_change_the_outcome() {
    let inputs = Inputs::new();
    let tainted = SLICES.replace(
        "  - name: nic-80\n",
        "  - name: nic-80\n    taints: [{key: broken, effect: NoSchedule}]\n",
    );
    inputs.write("cluster/slices.yaml", &tainted);
    let claim = inputs.write("claim.yaml", &pair_claim("pair", "true"));
    let old = ["--node", "n1", "--kubernetes-version", "1.34"];
    let out = simulate(&old, &[&inputs.cluster(), &claim]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "taints are ignored by default in 1.34: {}",
        stderr(&out)
    );
    let gated = [&old[..], &["--feature-gates", "DRADeviceTaints=true"]].concat();
    let out = simulate(&gated, &[&inputs.cluster(), &claim]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    // 1.37 (the default) honours taints without a flag, and a flag turns them off.
    let out = simulate(&["--node", "n1"], &[&inputs.cluster(), &claim]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let off = ["--node", "n1", "--feature-gates", "DRADeviceTaints=false"];
    let out = simulate(&off, &[&inputs.cluster(), &claim]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

fn taint_rule(name: &str, selector: &str, effect: &str) -> String {
    format!(
        r#"
apiVersion: resource.k8s.io/v1
kind: DeviceTaintRule
metadata: {{name: {name}}}
spec:
  deviceSelector: {selector}
  taint: {{key: maintenance, value: planned, effect: {effect}}}
"#
    )
}

#[test]
fn device_taint_rules_taint_the_devices_they_select() {
    let inputs = Inputs::new();
    let claim = inputs.write("claim.yaml", &pair_claim("pair", "true"));
    let n1 = ["--node", "n1"];
    let run = |rule: &Path| simulate(&n1, &[&inputs.cluster(), &claim, rule]);

    let nic = inputs.write(
        "nic.yaml",
        &taint_rule(
            "nic",
            "{driver: ainic.amd.com, pool: n1, device: nic-80}",
            "NoSchedule",
        ),
    );
    let out = run(&nic);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("nic"), "{}", stderr(&out));

    // Effect None (1.35+) only informs; a selector for another pool or
    // none at all matches nothing.
    for (file, selector, effect) in [
        ("none.yaml", "{driver: ainic.amd.com}", "None"),
        (
            "other.yaml",
            "{driver: ainic.amd.com, pool: n2}",
            "NoSchedule",
        ),
        ("empty.yaml", "null", "NoSchedule"),
    ] {
        let rule = inputs.write(file, &taint_rule("r", selector, effect));
        let out = run(&rule);
        assert_eq!(out.status.code(), Some(0), "{file}: {}", stderr(&out));
    }
    // Without the gate the scheduler applies no rule.
    let off = ["--node", "n1", "--feature-gates", "DRADeviceTaints=false"];
    let out = simulate(&off, &[&inputs.cluster(), &claim, &nic]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn kubernetes_version_is_checked_and_nothing_pending_allocates_nothing() {
    let inputs = Inputs::new();
    let out = simulate(
        &["--node", "n1", "--kubernetes-version", "1.33"],
        &[&inputs.cluster()],
    );
    assert_invalid(&out, "unsupported Kubernetes version \"1.33\"");
    // As upstream: no claim to allocate is no work, and success.
    let out = simulate(&["--node", "n1", "-o", "json"], &[&inputs.cluster()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), "[]");
}

fn assert_invalid(out: &Output, needle: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", stderr(out));
    let err = stderr(out);
    assert!(err.contains(needle), "expected {needle:?} in {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
}

#[test]
fn exit_2_for_every_kind_of_invalid_input() {
    let inputs = Inputs::new();
    let good = inputs.write("claim.yaml", &pair_claim("pair", "true"));
    let cases: Vec<(String, &str)> = vec![
        ("kind: ResourceClaim\n  bad: [".into(), "invalid YAML"),
        (
            pair_claim("c", "true").replace("deviceClassName: nic", "deviceClassName: missing"),
            "could not retrieve device class missing: not found",
        ),
        (pair_claim("c", "device.driver =="), "does not compile"),
        (
            pair_claim("c", "true").replace("resource.k8s.io/v1", "resource.k8s.io/v1beta1"),
            "apiVersion",
        ),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n".into(),
            "unsupported kind ConfigMap",
        ),
        (
            "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: x}\nspec: {}\n"
                .into(),
            "resource slice x: spec.driver is empty",
        ),
        (
            pair_claim("c", "true").replace("[gpu, nic]", "[gpu, nic]\n    - requests: [gpu]"),
            "empty constraint (unsupported constraint type?)",
        ),
    ];
    for (text, needle) in cases {
        let bad = inputs.write("bad.yaml", &text);
        let out = simulate(&["--node", "n1"], &[&inputs.cluster(), &bad]);
        assert_invalid(&out, needle);
        assert_eq!(
            stderr(&out).trim_end().lines().count(),
            1,
            "{}",
            stderr(&out)
        );
    }
    assert_invalid(
        &simulate(&["--node", "n1"], &[&inputs.dir.path().join("nope.yaml")]),
        "cannot read",
    );
    assert_invalid(
        &simulate(
            &["--node", "n1", "--feature-gates", "DRANope=true"],
            &[&good],
        ),
        "DRANope",
    );
    let node = inputs.write(
        "node.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: other}\n",
    );
    assert_invalid(
        &simulate(&["--node", "n1"], &[&inputs.cluster(), &node, &good]),
        "node n1",
    );
    let capacity = pair_claim("c", "true").replace(
        "exactly: {deviceClassName: nic}",
        "exactly: {deviceClassName: nic, capacity: {requests: {bw: 1G}}}",
    );
    let capacity = inputs.write("cap.yaml", &capacity);
    let old = ["--node", "n1", "--kubernetes-version", "1.34"];
    assert_invalid(
        &simulate(&old, &[&inputs.cluster(), &capacity]),
        "DRAConsumableCapacity",
    );
}

#[test]
fn templates_become_claims_and_pods_are_ignored() {
    let inputs = Inputs::new();
    let claim = pair_claim("pair", "true");
    let body = claim.split("spec:\n").nth(1).unwrap().replace('\n', "\n  ");
    let template = format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: tpl}}\nspec:\n  spec:\n  {body}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec: {{containers: []}}\n"
    );
    let file = inputs.write("template.yaml", &template);
    let out = simulate(&["--node", "n1"], &[&inputs.cluster(), &file]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        claims_from_yaml(&out)[0].metadata.name.as_deref(),
        Some("tpl")
    );
}

#[test]
fn help_explains_the_exit_codes() {
    let out = Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .args(["simulate", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Exit status") && text.contains("3 = cannot be allocated"),
        "{text}"
    );
}

/// Issue 36: a pool with a device name twice is, as upstream words it, a
/// hard error in 1.34 (exit 2, `pool <name> is invalid: <reason>`) and from
/// 1.35 a failure on this node (exit 3, `invalid resource pools were
/// encountered`, then which pool and why).
#[test]
fn an_invalid_pool_is_worded_and_classed_as_each_release_does() {
    let inputs = Inputs::new();
    let slices = inputs.write(
        "dup/slices.yaml",
        r#"
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-nic-a}
spec:
  driver: ainic.amd.com
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 2}
  devices: [{name: nic-0}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-nic-b}
spec:
  driver: ainic.amd.com
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 2}
  devices: [{name: nic-0}]
"#,
    );
    let classes = inputs.write("dup/classes.json", CLASSES);
    let claim = inputs.write(
        "dup/claim.yaml",
        r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: one-nic, namespace: default}
spec: {devices: {requests: [{name: nic, exactly: {deviceClassName: nic}}]}}
"#,
    );
    let files = [slices.as_path(), classes.as_path(), claim.as_path()];
    let out = simulate(&["--node", "n1", "--kubernetes-version", "1.34"], &files);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("pool n1 is invalid: duplicate device name nic-0"),
        "{}",
        stderr(&out)
    );
    for release in ["1.35", "1.36", "1.37"] {
        let out = simulate(&["--node", "n1", "--kubernetes-version", release], &files);
        assert_eq!(out.status.code(), Some(3), "{release}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("invalid resource pools were encountered")
                && err.contains(
                    "resource pool ainic.amd.com/n1 is invalid: duplicate device name nic-0"
                ),
            "{release}: {err}"
        );
    }
}
