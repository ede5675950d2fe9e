//! The four use cases end to end, without a cluster: the slices
//! `ainic-dra slices` publishes for a bundled topology, a GPU driver's slice
//! for the same GPUs (pcieRoot and `gpu.amd.com/pciAddr`), the shipped
//! DeviceClasses and the claims in `examples/`, run through
//! `ainic-dra simulate`; each test checks the NICs the scheduler would pick.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::resource::v1::ResourceClaim;
use serde_json::{Value, json};

const PAIRING: &str = "gpu.amd.com/pciAddr";

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// One node's inputs: NIC slices, a GPU slice and the DeviceClasses.
struct Node {
    dir: tempfile::TempDir,
    gates: String,
    /// NIC device name → its attributes (from the published slices).
    nics: BTreeMap<String, Value>,
    /// GPU device name → its PCI address.
    gpus: BTreeMap<String, String>,
}

impl Node {
    fn new(topology: &str, gates: &str, extra: &[&str]) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let mut slices = bin();
        slices.args([
            "slices",
            "--topology",
            topology,
            "--node-name",
            "n1",
            "-o",
            "json",
            "--feature-gates",
            gates,
        ]);
        slices
            .args(["--gpu-pairing-attribute", PAIRING])
            .args(extra);
        let out = run(&mut slices);
        std::fs::write(dir.path().join("nic-slices.json"), &out.stdout).unwrap();
        let published: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        let nics = published
            .iter()
            .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
            .map(|d| {
                (
                    d["name"].as_str().unwrap().to_owned(),
                    d["attributes"].clone(),
                )
            })
            .collect();
        let gpus = gpu_slice(topology, dir.path());
        std::fs::write(
            dir.path().join("gpu-class.yaml"),
            "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: gpu.amd.com}\n\
             spec: {selectors: [{cel: {expression: \"device.driver == 'gpu.amd.com'\"}}]}\n",
        )
        .unwrap();
        Node {
            dir,
            gates: gates.to_owned(),
            nics,
            gpus,
        }
    }

    fn simulate(&self, claims: &[&Path]) -> Output {
        let mut cmd = bin();
        cmd.args([
            "simulate",
            "--node",
            "n1",
            "-o",
            "json",
            "--feature-gates",
            &self.gates,
        ]);
        cmd.arg("-f")
            .arg(self.dir.path())
            .arg("-f")
            .arg(repo("deploy/deviceclasses"));
        for c in claims {
            cmd.arg("-f").arg(c);
        }
        cmd.output().unwrap()
    }

    fn allocate(&self, claims: &[&Path]) -> Vec<ResourceClaim> {
        let out = self.simulate(claims);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn write(&self, name: &str, value: &Value) -> PathBuf {
        let path = self.dir.path().join("claims").join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, serde_json::to_vec(value).unwrap()).unwrap();
        path
    }

    fn nic_attr(&self, nic: &str, name: &str) -> Value {
        let attr = &self.nics[nic][name];
        attr.get("string")
            .or(attr.get("int"))
            .cloned()
            .unwrap_or(Value::Null)
    }
}

/// The GPU driver's slice for the topology's GPUs: `gpu-N` with pcieRoot and pciAddr.
fn gpu_slice(topology: &str, dir: &Path) -> BTreeMap<String, String> {
    let out = run(bin().args(["discover", "--topology", topology, "-o", "json"]));
    let inventory: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut names = BTreeMap::new();
    let devices: Vec<Value> = inventory["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let name = format!("gpu-{i}");
            names.insert(name.clone(), g["address"].as_str().unwrap().to_owned());
            json!({ "name": name, "attributes": {
                "resource.kubernetes.io/pcieRoot": { "string": g["location"]["root"] },
                PAIRING: { "string": g["address"] } } })
        })
        .collect();
    let slice = json!({ "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": { "name": "n1-gpu.amd.com" },
        "spec": { "driver": "gpu.amd.com", "nodeName": "n1",
                  "pool": { "name": "n1", "generation": 1, "resourceSliceCount": 1 }, "devices": devices } });
    std::fs::write(
        dir.join("gpu-slice.json"),
        serde_json::to_vec(&slice).unwrap(),
    )
    .unwrap();
    names
}

/// `request=device` pairs of one allocated claim.
fn picks(claim: &ResourceClaim) -> BTreeMap<String, String> {
    let results = claim
        .status
        .as_ref()
        .unwrap()
        .allocation
        .as_ref()
        .unwrap()
        .devices
        .as_ref()
        .unwrap();
    results
        .results
        .as_ref()
        .unwrap()
        .iter()
        .map(|r| (r.request.clone(), r.device.clone()))
        .collect()
}

/// The spec of an example's ResourceClaimTemplate, as claims named `names`.
fn claims_from_example(node: &Node, example: &str, names: &[&str]) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(repo(&format!("examples/{example}"))).unwrap();
    let template = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| <serde_yaml_ng::Value as serde::Deserialize>::deserialize(d).unwrap())
        .find(|v| v["kind"] == "ResourceClaimTemplate")
        .expect("example has a ResourceClaimTemplate");
    let spec = serde_json::to_value(&template["spec"]["spec"]).unwrap();
    names
        .iter()
        .map(|name| {
            let claim = json!({ "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": { "name": name, "namespace": "default" }, "spec": spec });
            node.write(&format!("{name}.json"), &claim)
        })
        .collect()
}

#[test]
fn gpu_and_nic_pair_at_root_complex_precision() {
    let node = Node::new("mi300x-8gpu-8nic", "", &[]);
    let claims = node.allocate(&[&repo("examples/gpu-nic-pcieroot.yaml")]);
    let p = picks(&claims[0]);
    assert_eq!(p["gpu"], "gpu-0");
    let gpu_addr = &node.gpus["gpu-0"];
    assert_eq!(
        node.nic_attr(&p["nic"], "ainic.amd.com/nearestGPU"),
        json!(gpu_addr),
        "nic {} is not under gpu-0's root",
        p["nic"]
    );
}

#[test]
fn switch_precision_finds_the_nic_root_precision_misses() {
    // nested-switches: both GPUs and all four NICs share one root complex;
    // only NIC 0000:0a:00.0 sits on GPU1's switch.
    let node = Node::new("nested-switches", "", &[]);
    let gpu1_only = |attribute: &str| {
        json!({ "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": { "name": format!("gpu1-{}", attribute.replace(['/', '.'], "-")), "namespace": "default" },
            "spec": { "devices": {
                "requests": [
                    { "name": "gpu", "exactly": { "deviceClassName": "gpu.amd.com", "selectors": [{ "cel": {
                        "expression": format!("device.attributes['gpu.amd.com'].pciAddr == '{}'", node.gpus["gpu-1"]) } }] } },
                    { "name": "nic", "exactly": { "deviceClassName": "ainic-pf" } } ],
                "constraints": [{ "requests": ["gpu", "nic"], "matchAttribute": attribute }] } } })
    };
    let root = node.write("root.json", &gpu1_only("resource.kubernetes.io/pcieRoot"));
    let switch = node.write("switch.json", &gpu1_only(PAIRING));
    let by_root = picks(&node.allocate(&[&root])[0]);
    let by_switch = picks(&node.allocate(&[&switch])[0]);
    assert_eq!(
        by_root["nic"], "pf-0000-06-00-0",
        "root precision: first NIC under the root"
    );
    assert_eq!(
        by_switch["nic"], "pf-0000-0a-00-0",
        "switch precision: GPU1's own NIC"
    );
    // The example claim, twice (two pods): each GPU gets its PIX NIC.
    let claims = claims_from_example(&node, "gpu-nic-same-switch.yaml", &["pod-a", "pod-b"]);
    let out = node.allocate(&[&claims[0], &claims[1]]);
    for claim in &out {
        let p = picks(claim);
        assert_eq!(
            node.nic_attr(&p["nic"], "ainic.amd.com/nearestGPU"),
            json!(node.gpus[&p["gpu"]])
        );
        assert_eq!(
            node.nic_attr(&p["nic"], "ainic.amd.com/gpuAffinity"),
            json!("PIX")
        );
    }
}

#[test]
fn eight_gpus_and_eight_nics_all_paired_in_one_claim() {
    let node = Node::new("mi300x-8gpu-8nic", "", &[]);
    let mut requests = Vec::new();
    let mut constraints = Vec::new();
    for i in 0..8 {
        requests.push(
            json!({ "name": format!("gpu{i}"), "exactly": { "deviceClassName": "gpu.amd.com" } }),
        );
        requests.push(
            json!({ "name": format!("nic{i}"), "exactly": { "deviceClassName": "ainic-pf" } }),
        );
        constraints.push(json!({ "requests": [format!("gpu{i}"), format!("nic{i}")], "matchAttribute": PAIRING }));
    }
    let claim = json!({ "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": { "name": "all-eight", "namespace": "default" },
        "spec": { "devices": { "requests": requests, "constraints": constraints } } });
    let path = node.write("all-eight.json", &claim);
    let p = picks(&node.allocate(&[&path])[0]);
    assert_eq!(p.len(), 16);
    for i in 0..8 {
        let (gpu, nic) = (&p[&format!("gpu{i}")], &p[&format!("nic{i}")]);
        assert_eq!(
            node.nic_attr(nic, "ainic.amd.com/nearestGPU"),
            json!(node.gpus[gpu]),
            "pair {i}"
        );
        assert_eq!(
            node.nic_attr(nic, "ainic.amd.com/gpuAffinity"),
            json!("PIX"),
            "pair {i}"
        );
    }
}

#[test]
fn one_nic_is_shared_by_several_claims_by_bandwidth() {
    let node = Node::new(
        "mi300x-8gpu-8nic",
        "DRAConsumableCapacity=true",
        &["--shared-pfs", "*"],
    );
    let names = ["s1", "s2", "s3", "s4", "s5"];
    let claims = claims_from_example(&node, "shared-nic.yaml", &names);
    let refs: Vec<&Path> = claims.iter().map(PathBuf::as_path).collect();
    let out = node.allocate(&refs);
    let results: Vec<_> = out
        .iter()
        .map(|c| {
            c.status
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
                .unwrap()[0]
                .clone()
        })
        .collect();
    // 4 x 100G fill the first 400G PF; the fifth share goes to the next PF.
    for r in &results[..4] {
        assert_eq!(r.device, "pf-0000-04-00-0");
        assert!(r.share_id.is_some());
        assert_eq!(
            r.consumed_capacity.as_ref().unwrap()["ainic.amd.com/bandwidth"].0,
            "100G"
        );
    }
    assert_eq!(results[4].device, "pf-0000-24-00-0");
    // With the gate off the request is rejected as invalid input.
    let plain = Node::new("mi300x-8gpu-8nic", "DRAConsumableCapacity=false", &[]);
    assert_eq!(plain.simulate(&[&claims[0]]).status.code(), Some(2));
}

#[test]
fn fabric_partition_and_rail_select_the_nic() {
    let node = Node::new(
        "mi300x-8gpu-8nic",
        "",
        &["--node-labels", "ainic.amd.com/fabric=pod-a"],
    );
    let claims = claims_from_example(&node, "fabric-partition.yaml", &["job-0"]);
    let p = picks(&node.allocate(&[&claims[0]])[0]);
    assert_eq!(node.nic_attr(&p["nic"], "ainic.amd.com/rail"), json!(0));
    assert_eq!(
        node.nic_attr(&p["nic"], "ainic.amd.com/fabric"),
        json!("pod-a")
    );
    let other = Node::new(
        "mi300x-8gpu-8nic",
        "",
        &["--node-labels", "ainic.amd.com/fabric=pod-b"],
    );
    let out = other.simulate(&[&claims[0]]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("request nic"));
}

#[test]
fn min_bandwidth_selector_uses_quantities() {
    let node = Node::new("mi300x-8gpu-8nic", "", &[]);
    let p = picks(&node.allocate(&[&repo("examples/min-bandwidth.yaml")])[0]);
    assert_eq!(p["nic"], "pf-0000-04-00-0");
    let text = std::fs::read_to_string(repo("examples/min-bandwidth.yaml"))
        .unwrap()
        .replace("\"200G\"", "\"800G\"");
    let faster = node.dir.path().join("claims").join("800g.yaml");
    std::fs::create_dir_all(faster.parent().unwrap()).unwrap();
    std::fs::write(&faster, text).unwrap();
    let out = node.simulate(&[&faster]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "no 800G NIC: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn pf_and_its_vfs_exclude_each_other_through_counters() {
    let node = Node::new("sriov-vfs", "DRAPartitionableDevices=true", &[]);
    // Two VFs of one PF and a whole PF, together: the whole PF must be one
    // whose VFs are not used.
    let out = node.allocate(&[&repo("examples/vfs.yaml")]);
    let by_name: BTreeMap<String, BTreeMap<String, String>> = out
        .iter()
        .map(|c| (c.metadata.name.clone().unwrap(), picks(c)))
        .collect();
    let vf_parent = node.nic_attr(&by_name["two-vfs-same-pf"]["vfs"], "ainic.amd.com/physfn");
    let pf = &by_name["whole-pf"]["pf"];
    let pf_addr = node.nic_attr(pf, "resource.kubernetes.io/pciBusID");
    assert_ne!(
        vf_parent, pf_addr,
        "whole PF {pf} shares a counter set with the allocated VFs"
    );
    // Once the first PF is held whole, none of its VFs can be allocated.
    let first_pf = json!({ "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": { "name": "pf-44", "namespace": "default" },
        "spec": { "devices": { "requests": [{ "name": "pf", "exactly": { "deviceClassName": "ainic-pf",
            "selectors": [{ "cel": { "expression": "device.attributes['resource.kubernetes.io'].pciBusID == '0000:44:00.0'" } }] } }] } } });
    let held = node.allocate(&[&node.write("pf-44.json", &first_pf)]);
    let held_path = node.write("held.json", &serde_json::to_value(&held).unwrap());
    let vf_of_44 = json!({ "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": { "name": "vf-44", "namespace": "default" },
        "spec": { "devices": { "requests": [{ "name": "vf", "exactly": { "deviceClassName": "ainic-vf",
            "selectors": [{ "cel": { "expression": "device.attributes['ainic.amd.com'].physfn == '0000:44:00.0'" } }] } }] } } });
    let out = node.simulate(&[&held_path, &node.write("vf-44.json", &vf_of_44)]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Four nodes of the 8-GPU/8-NIC topology in two fabric partitions (n1, n2
/// in pod-a; n3, n4 in pod-b) as `ainic-dra slices` publishes them, with
/// the fabric controller's partition slices and node labels, written to
/// `dir/cluster.json`. Returns the nodes' own slices.
fn fabric_cluster(dir: &std::path::Path) -> Vec<k8s_openapi::api::resource::v1::ResourceSlice> {
    let mut node_slices = Vec::new();
    for (node, fabric) in [
        ("n1", "pod-a"),
        ("n2", "pod-a"),
        ("n3", "pod-b"),
        ("n4", "pod-b"),
    ] {
        let out = run(bin().args([
            "slices",
            "--topology",
            "mi300x-8gpu-8nic",
            "--node-name",
            node,
            "-o",
            "json",
            "--node-labels",
            &format!("ainic.amd.com/fabric={fabric}"),
        ]));
        let slices: Vec<k8s_openapi::api::resource::v1::ResourceSlice> =
            serde_json::from_slice(&out.stdout).unwrap();
        node_slices.extend(slices);
    }
    let partitions = dra_model::partitions::partitions(&node_slices, "ainic.amd.com");
    let mut objects: Vec<Value> = node_slices.iter().map(|s| json!(s)).collect();
    for slice in dra_model::partitions::partition_slices(&partitions, "ainic.amd.com", true) {
        let mut slice = json!(slice);
        slice["apiVersion"] = json!("resource.k8s.io/v1");
        slice["kind"] = json!("ResourceSlice");
        objects.push(slice);
    }
    for (node, label) in dra_model::partitions::node_labels(&partitions) {
        objects.push(json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {dra_model::partitions::LABEL_PARTITION: label}}}));
    }
    for s in &mut objects {
        if s.get("kind").is_none() {
            s["apiVersion"] = json!("resource.k8s.io/v1");
            s["kind"] = json!("ResourceSlice");
        }
    }
    std::fs::write(
        dir.join("cluster.json"),
        serde_json::to_vec(&objects).unwrap(),
    )
    .unwrap();
    node_slices
}

/// Use case 3 across pods: 2 partitions × 2 nodes (the agents' slices,
/// the fabric controller's partition slices, nodes labelled as it labels
/// them), the example job and two copies of it. `simulate` without
/// `--node` places job A wholly in one partition, job B in the other, and
/// leaves job C pending with the reason.
#[test]
fn jobs_land_wholly_in_one_fabric_partition_each() {
    let dir = tempfile::tempdir().unwrap();
    fabric_cluster(dir.path());
    let job_a = std::fs::read_to_string(repo("examples/fabric-job/job.yaml")).unwrap();
    // The template appears once; jobs B and C are A under other names.
    let template_end = job_a
        .find("---\napiVersion: resource.k8s.io/v1\nkind: ResourceClaim\n")
        .unwrap();
    let rest = &job_a[template_end..];
    let mut jobs = job_a.clone();
    for name in ["job-b", "job-c"] {
        jobs.push_str(&rest.replace("job-a", name));
    }
    std::fs::write(dir.path().join("jobs.yaml"), jobs).unwrap();
    let out = bin()
        .args(["simulate", "-o", "json", "-f"])
        .arg(dir.path())
        .arg("-f")
        .arg(repo("deploy/deviceclasses"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let report: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let partition_of = |node: &str| if node <= "n2" { "pod-a" } else { "pod-b" };
    let placed: BTreeMap<&str, &str> = report
        .iter()
        .filter_map(|p| Some((p["pod"].as_str()?, p["node"].as_str()?)))
        .collect();
    let a = partition_of(placed["default/job-a-0"]);
    assert_eq!(partition_of(placed["default/job-a-1"]), a);
    let b = partition_of(placed["default/job-b-0"]);
    assert_eq!(partition_of(placed["default/job-b-1"]), b);
    assert_ne!(a, b, "{report:?}");
    // (Both pods of a job may share a node: each node has 8 NICs, and the
    // partition claim counts the job, not its pods.)
    for pod in ["default/job-c-0", "default/job-c-1"] {
        assert!(!placed.contains_key(pod), "{report:?}");
        assert!(
            stderr.contains(&format!("pod {pod}: 0/4 nodes are available")),
            "{stderr}"
        );
    }
    assert!(stderr.contains("2 of 6 pods stay pending"), "{stderr}");
}

/// Use case 4's "same rail as my peers" for a job: the pods share one
/// partition claim and each takes a NIC on rail 0 from a template
/// (examples/fabric-job/same-rail.yaml). Every pod's NIC is on rail 0, and
/// as each node has one NIC per rail, the two pods take both nodes of one
/// partition.
#[test]
fn a_jobs_pods_share_a_partition_and_a_rail() {
    let dir = tempfile::tempdir().unwrap();
    let node_slices = fabric_cluster(dir.path());
    let out = bin()
        .args(["simulate", "-o", "json", "-f"])
        .arg(dir.path())
        .arg("-f")
        .arg(repo("examples/fabric-job/same-rail.yaml"))
        .arg("-f")
        .arg(repo("deploy/deviceclasses"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let rail_of = |node: &str, device: &str| {
        let slice = node_slices
            .iter()
            .find(|s| s.spec.node_name.as_deref() == Some(node))
            .unwrap();
        let device = (slice.spec.devices.iter().flatten())
            .find(|d| d.name == device)
            .unwrap_or_else(|| panic!("{device} not in {node}'s slice"));
        device.attributes.as_ref().unwrap()["ainic.amd.com/rail"]
            .int
            .unwrap()
    };
    let mut nodes = Vec::new();
    for pod in &report {
        let node = pod["node"].as_str().unwrap_or_else(|| panic!("{report:?}"));
        nodes.push(node.to_string());
        let nic = (pod["claims"].as_array().unwrap().iter())
            .find(|c| c["claim"].as_str().unwrap().ends_with("-nic"))
            .unwrap();
        let device = nic["devices"][0]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap();
        assert_eq!(rail_of(node, device), 0, "{report:?}");
    }
    nodes.sort();
    assert!(nodes == ["n1", "n2"] || nodes == ["n3", "n4"], "{report:?}");
}
