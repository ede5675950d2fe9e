//! Item 2, use case 1: one claim for a GPU (the stand-in `gpu.amd.com`
//! driver) and the NIC on its PCIe switch; the real scheduler pairs them,
//! the real kubelet prepares both drivers' parts, and the container sees
//! exactly the paired NIC.

use serde_json::json;

use crate::support::*;

const TEMPLATE: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: gpu-and-its-nic, namespace: pairing}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.amd.com}
      - name: nic
        exactly:
          deviceClassName: ainic-pf
          selectors:
          - cel: {expression: 'device.attributes["ainic.amd.com"].gpuAffinity == "PIX"'}
      constraints:
      - requests: [gpu, nic]
        matchAttribute: gpu.amd.com/pciAddr
"#;

#[test]
fn a_gpu_and_the_nic_on_its_switch_reach_the_container_together() {
    let bed = main_cluster();
    let ns = "pairing";
    namespace(bed, ns, &[]);
    bed.apply(TEMPLATE);
    let claims = [Claim::Template("pair", "gpu-and-its-nic")];
    for name in ["trainer-0", "trainer-1"] {
        bed.apply(&pod(ns, name, &claims, json!({})));
    }
    for name in ["trainer-0", "trainer-1"] {
        let seen = seen(bed, ns, name);
        let gpu = seen
            .env
            .get("AMD_GPU_PCI_ADDRESSES")
            .expect("the GPU driver's env");
        let nic = seen.env.get("AINIC_PCI_ADDRESSES").expect("our env");
        let devices = published(bed, &seen.node);
        let ours = devices
            .values()
            .find(|d| attribute(d, "resource.kubernetes.io/pciBusID") == Some(nic))
            .unwrap_or_else(|| panic!("{nic} is not published by {}", seen.node));
        assert_eq!(
            attribute(ours, "gpu.amd.com/pciAddr"),
            Some(gpu.as_str()),
            "{name}: NIC {nic} is not the one on GPU {gpu}'s switch"
        );
        assert_eq!(attribute(ours, "ainic.amd.com/gpuAffinity"), Some("PIX"));
        // Exactly the paired NIC's RDMA device, and the shared rdma_cm.
        let rdma = attribute(ours, "ainic.amd.com/rdmaDevice").unwrap();
        assert_eq!(
            seen.env.get("NCCL_IB_HCA").map(String::as_str),
            Some(&*format!("={rdma}"))
        );
        assert_eq!(seen.devices.len(), 2, "{name}: {:?}", seen.devices);
        assert!(seen.devices.contains(&"rdma_cm".to_string()));
    }
}
