//! Item 8: the classic device plugin on a real node: it registers with the
//! real kubelet's device manager, the Node's capacity shows `amd.com/nic`,
//! and a pod asking for two gets the pair the plugin prefers (one NUMA
//! node, two PCIe switches), devices and env included.

use serde_json::{Value, json};

use crate::support::*;

/// What `ainic-dra discover` says of the node's NICs (the same topology the
/// node was made from): PCI address → (NUMA node, switch).
fn locations() -> Vec<(String, i64, String)> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ainic-dra"))
        .args(["discover", "--topology", "mi300x-8gpu-8nic", "-o", "json"])
        .output()
        .expect("run ainic-dra discover");
    let found: Value = serde_json::from_slice(&out.stdout).expect("discover prints JSON");
    found["nics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["address"].as_str().unwrap().to_string(),
                n["location"]["numaNode"].as_i64().unwrap(),
                n["location"]["switch"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

pub fn extended_pod(ns: &str, name: &str, count: u32, extra: Value) -> String {
    let mut spec = json!({
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [{
            "name": "show", "image": TOOLS, "imagePullPolicy": "Never",
            "command": ["sh", "-c", "env | sort; echo '--- dev'; ls /dev/infiniband; echo '--- metadata'; echo '--- links'; echo END; sleep 3600"],
            "resources": {"limits": {"amd.com/nic": count}},
        }],
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec})
        .to_string()
}

#[test]
fn the_device_plugin_serves_amd_com_nic_and_a_pod_gets_the_preferred_pair() {
    let bed = classic_cluster();
    let capacity = bed.eventually("node-1 shows amd.com/nic", POD_START, || {
        let node = bed.get_json(&["get", "node", "node-1"]).ok()?;
        let n = node["status"]["capacity"]["amd.com/nic"]
            .as_str()?
            .to_string();
        (n != "0").then_some(n)
    });
    assert_eq!(capacity, "8");
    let ns = "classic";
    namespace(bed, ns, &[]);
    bed.apply(&extended_pod(ns, "two", 2, json!({})));
    let seen = seen(bed, ns, "two");
    let got = seen.env["PCIDEVICE_AMD_COM_NIC"].clone();
    let picked: Vec<&str> = got.split(',').collect();
    assert_eq!(picked.len(), 2, "{got}");
    let all = locations();
    let at = |addr: &str| all.iter().find(|n| n.0 == addr).cloned().unwrap();
    let (a, b) = (at(picked[0]), at(picked[1]));
    assert_eq!(a.1, b.1, "one NUMA node: {got}");
    assert_ne!(a.2, b.2, "two PCIe switches: {got}");
    assert_eq!(
        seen.devices
            .iter()
            .filter(|d| d.starts_with("uverbs"))
            .count(),
        2,
        "{:?}",
        seen.devices
    );
}
