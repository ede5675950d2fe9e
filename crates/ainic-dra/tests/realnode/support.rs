//! The real-node clusters the tests share, and what a test does with them:
//! namespaces, pods of the workload image that print what their container
//! sees, and waiting for the scheduler and the kubelet.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};
use testkit::testbed::{Testbed, UpOptions, Version};

/// Where the chart is installed.
pub const CHART_NS: &str = "ainic-system";
/// How long a pod may take to start (image already on the node). The main
/// cluster's tests run side by side on two 2-core nodes and take its NICs
/// from each other for a while (the counters test keeps a NIC tainted for
/// up to ~100 s): a pod may wait that long for a free NIC.
pub const POD_START: Duration = Duration::from_secs(180);
/// The workload image every test pod runs (busybox: sh, env, ls, cat, ip).
pub const TOOLS: &str = "docker.io/ainic-testbed/tools:latest";

/// The main cluster: 1.37, two real nodes with the demo topology (8 GPUs,
/// 8 NICs each) and the stand-in GPU driver; node-1 in fabric partition
/// p-a, node-2 in p-b; node-1's NIC enp4s0 fenced to tenant team-a; the
/// last PF of each node shared by capacity; the nodes' GPUs paired by
/// `gpu.amd.com/pciAddr`; extended resources by DRA on node-1.
pub fn main_cluster() -> &'static Testbed {
    static BED: OnceLock<Testbed> = OnceLock::new();
    BED.get_or_init(|| {
        let bed = Testbed::up(&UpOptions {
            version: Some(Version::V1_37),
            nodes: 2,
            gpus: true,
            ..UpOptions::default()
        });
        bed.kubectl(&[
            "label",
            "node",
            "node-1",
            "ainic.amd.com/extended-resources=dra",
        ])
        .expect("label node-1");
        bed.apply(GPU_CLASS);
        bed.install_chart("ainic", CHART_NS, &main_values());
        bed
    })
}

/// The chart values of [`main_cluster`].
fn main_values() -> Value {
    json!({
        "model": {
            "gpuPairingAttribute": "gpu.amd.com/pciAddr",
            "sharedPfs": ["0000:e4:00.0"],
            // Made-up hardware sends no kernel events: re-read it often.
            "refreshInterval": 2,
            "rescanInterval": 2,
        },
        "fabric": {"config": {"nodes": {
            "node-1": {"fabric": "p-a", "nics": {"enp4s0": {"tenant": "team-a"}}},
            "node-2": {"fabric": "p-b"},
        }}},
        "tenants": {"names": ["team-a"]},
        // Counter health recovers 20 s after the errors leave the window.
        "health": {"quietPeriod": 20},
        "extendedResources": {"enabled": true},
        "netdevMode": {"enabled": true},
    })
}

/// The GPU driver's DeviceClass, as the real driver's chart installs it.
const GPU_CLASS: &str = r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.amd.com}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.amd.com'"}
"#;

/// A cluster with the classic device plugin on: 1.37, one real node.
pub fn classic_cluster() -> &'static Testbed {
    static BED: OnceLock<Testbed> = OnceLock::new();
    BED.get_or_init(|| {
        let bed = Testbed::up(&UpOptions {
            version: Some(Version::V1_37),
            nodes: 1,
            ..UpOptions::default()
        });
        bed.install_chart("ainic", CHART_NS, &json!({"classic": {"enabled": true}}));
        bed
    })
}

/// The oldest release: 1.34's control plane and kubelet, one real node.
pub fn old_cluster() -> &'static Testbed {
    static BED: OnceLock<Testbed> = OnceLock::new();
    BED.get_or_init(|| {
        let bed = Testbed::up(&UpOptions {
            version: Some(Version::V1_34),
            nodes: 1,
            ..UpOptions::default()
        });
        bed.install_chart("ainic", CHART_NS, &json!({}));
        bed
    })
}

/// Creates namespace `name` with `labels`.
pub fn namespace(bed: &Testbed, name: &str, labels: &[(&str, &str)]) {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels}});
    bed.apply(&ns.to_string());
}

/// A pod claim: the pod's claim name and where it comes from.
pub enum Claim<'a> {
    /// `resourceClaimTemplateName`.
    Template(&'a str, &'a str),
    /// `resourceClaimName`.
    Shared(&'a str, &'a str),
}

/// A ResourceClaim `name` in `ns` for one PF (class `ainic-pf`), for pods
/// that share it ([`Claim::Shared`]).
pub fn pf_claim(ns: &str, name: &str) -> String {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [
            {"name": "nic", "exactly": {"deviceClassName": "ainic-pf"}}]}}})
    .to_string()
}

/// What the pods print, then sleep: env, the RDMA devices, the device
/// metadata files, the network interfaces; ends with `END`.
const SHOW: &str = "env | sort; echo '--- dev'; ls /dev/infiniband; echo '--- metadata'; \
    find /var/run/kubernetes.io -name '*.json' -exec cat {} \\; ; echo; \
    echo '--- links'; ip -o link; ip -o addr; ip route; echo END; sleep 3600";

/// A pod of the tools image in `ns` that uses `claims` and shows what its
/// container sees; `extra` is merged into the pod spec (e.g. `nodeName`).
pub fn pod(ns: &str, name: &str, claims: &[Claim], extra: Value) -> String {
    let mut resource_claims = vec![];
    let mut uses = vec![];
    for claim in claims {
        let (entry, claim_name) = match claim {
            Claim::Template(n, t) => (json!({"name": n, "resourceClaimTemplateName": t}), n),
            Claim::Shared(n, c) => (json!({"name": n, "resourceClaimName": c}), n),
        };
        resource_claims.push(entry);
        uses.push(json!({"name": claim_name}));
    }
    let mut spec = json!({
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "resourceClaims": resource_claims,
        "containers": [{
            "name": "show",
            "image": TOOLS,
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", SHOW],
            "resources": {"claims": uses},
        }],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns}, "spec": spec})
    .to_string()
}

/// What a pod's container printed (see [`SHOW`]), once it printed it all.
pub struct Seen {
    /// Its environment.
    pub env: BTreeMap<String, String>,
    /// Names in its `/dev/infiniband`.
    pub devices: Vec<String>,
    /// The device metadata files' contents, concatenated.
    pub metadata: String,
    /// `ip -o link; ip -o addr; ip route`.
    pub links: String,
    /// The node it runs on.
    pub node: String,
}

/// Waits for pod `name` to run and print [`SHOW`]'s output; parses it.
pub fn seen(bed: &Testbed, ns: &str, name: &str) -> Seen {
    let pod = bed.wait_pod(ns, name, "Running", POD_START);
    let node = pod["spec"]["nodeName"].as_str().unwrap_or("").to_string();
    let text = bed.eventually(
        &format!("{ns}/{name} prints what it sees"),
        POD_START,
        || {
            bed.kubectl(&["logs", "-n", ns, name])
                .ok()
                .filter(|t| t.contains("\nEND"))
        },
    );
    parse(&text, node)
}

fn parse(text: &str, node: String) -> Seen {
    let section = |from: &str, to: &str| -> String {
        let start = text.find(from).map_or(0, |i| i + from.len());
        let end = text[start..].find(to).map_or(text.len(), |i| start + i);
        text[start..end].trim().to_string()
    };
    let env_text = &text[..text.find("--- dev").unwrap_or(text.len())];
    let env = env_text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let devices = section("--- dev", "--- metadata")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    Seen {
        env,
        devices,
        metadata: section("--- metadata", "--- links"),
        links: section("--- links", "\nEND"),
        node,
    }
}

/// The events of pod `ns/name`, as kubectl prints them (or its error).
pub fn events_of(bed: &Testbed, ns: &str, name: &str) -> String {
    bed.kubectl(&[
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        &format!("involvedObject.name={name}"),
    ])
    .unwrap_or_else(|e| e)
}

/// Deletes pod `name` and waits until it is gone.
pub fn delete_pod(bed: &Testbed, ns: &str, name: &str) {
    bed.kubectl(&[
        "delete",
        "pod",
        "-n",
        ns,
        name,
        "--wait=true",
        "--timeout=90s",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
}

/// The claim specs (`ainic.amd.com-<uid>.json`) in node K's CDI dir.
pub fn claim_specs(bed: &Testbed, k: usize) -> Vec<String> {
    let mut files = bed.node_files(k, "/run/cdi");
    files.retain(|f| f.starts_with("ainic.amd.com-"));
    files
}

/// The devices published for node `node` by our driver, with their
/// attributes as JSON (`name` → device).
pub fn published(bed: &Testbed, node: &str) -> BTreeMap<String, Value> {
    let slices = bed.get_json(&["get", "resourceslices"]).expect("slices");
    let mut out = BTreeMap::new();
    for slice in slices["items"].as_array().into_iter().flatten() {
        let spec = &slice["spec"];
        if spec["driver"] != "ainic.amd.com" || spec["nodeName"] != node {
            continue;
        }
        for device in spec["devices"].as_array().into_iter().flatten() {
            out.insert(device["name"].as_str().unwrap().to_string(), device.clone());
        }
    }
    out
}

/// The string value of attribute `name` of a published device.
pub fn attribute<'a>(device: &'a Value, name: &str) -> Option<&'a str> {
    let attr = &device["attributes"][name];
    attr["string"].as_str().or_else(|| attr["version"].as_str())
}
