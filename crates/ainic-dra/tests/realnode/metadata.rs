//! Item 5: inside the container, the claim's env and the KEP-5304 device
//! metadata file; on the claim, the device status the agent wrote.

use serde_json::{Value, json};

use crate::support::*;

const TEMPLATE: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: nic, namespace: metadata}
spec:
  spec:
    devices:
      requests:
      - name: fast
        exactly: {deviceClassName: ainic-pf}
"#;

#[test]
fn the_container_has_the_claims_env_and_metadata_and_the_claim_its_device_status() {
    let bed = main_cluster();
    let ns = "metadata";
    namespace(bed, ns, &[]);
    bed.apply(TEMPLATE);
    bed.apply(&pod(
        ns,
        "reader",
        &[Claim::Template("nic", "nic")],
        json!({}),
    ));
    let seen = seen(bed, ns, "reader");
    let device = seen.env["AINIC_DEVICES"].clone();
    let netdev = seen.env["AINIC_NETDEVS"].clone();
    let pci = seen.env["AINIC_PCI_ADDRESSES"].clone();
    assert!(seen.env["NCCL_IB_HCA"].starts_with('='), "{:?}", seen.env);

    let metadata: Value = serde_json::Deserializer::from_str(&seen.metadata)
        .into_iter()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("no metadata file: {}", seen.metadata));
    let text = metadata.to_string();
    for expected in [device.as_str(), pci.as_str(), "ainic.amd.com", "fast"] {
        assert!(text.contains(expected), "metadata lacks {expected}: {text}");
    }

    let pod = bed.get_json(&["get", "pod", "-n", ns, "reader"]).unwrap();
    let claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        .as_str()
        .unwrap()
        .to_string();
    // The agent writes the status after it answers the kubelet.
    let what = format!("the device status of {device}");
    let status = bed.eventually(&what, POD_START, || {
        let claim = bed
            .get_json(&["get", "resourceclaim", "-n", ns, &claim_name])
            .unwrap();
        claim["status"]["devices"]
            .as_array()
            .and_then(|d| d.iter().find(|d| d["device"] == device.as_str()))
            .cloned()
    });
    assert_eq!(status["driver"], "ainic.amd.com");
    assert_eq!(status["pool"], seen.node.as_str());
    assert_eq!(
        status["networkData"]["interfaceName"],
        netdev.as_str(),
        "{status}"
    );
}
