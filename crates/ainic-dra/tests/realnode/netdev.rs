//! Item 9, exclusive netdev mode on a real node: containerd's NRI calls the
//! agent's NRI plugin at pod sandbox start; the claim's netdev (a veth on
//! the host standing in for node-1's NIC enp196s0, 0000:c4:00.0) appears in
//! the pod's network namespace under the claim's name with its address,
//! route and MTU, and returns home under its own name when the pod is
//! deleted. Needs root (CAP_NET_ADMIN), as the whole testbed does.

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::*;

const NETDEV: &str = "enp196s0";

/// The host's stand-in for the NIC's netdev; removed when dropped.
struct HostLink;

impl HostLink {
    fn new() -> HostLink {
        let _ = Command::new("ip").args(["link", "del", NETDEV]).status();
        let status = Command::new("ip")
            .args([
                "link",
                "add",
                NETDEV,
                "type",
                "veth",
                "peer",
                "name",
                "enp196s0-peer",
            ])
            .status()
            .expect("ip link add");
        assert!(status.success(), "cannot create the veth {NETDEV}");
        HostLink
    }

    fn on_host() -> bool {
        Command::new("ip")
            .args(["link", "show", NETDEV])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }
}

impl Drop for HostLink {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", NETDEV]).status();
    }
}

fn template() -> String {
    let settings = json!({"apiVersion": "ainic.amd.com/v1alpha1", "kind": "NicConfig",
        "mode": "netdev", "netdev": {"interfaceName": "net1", "mtu": 4000,
        "addresses": ["10.88.0.2/24"],
        "routes": [{"destination": "10.99.0.0/16", "gateway": "10.88.0.1"}]}});
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "moved", "namespace": "netdev"},
        "spec": {"spec": {"devices": {
            "requests": [{"name": "nic", "exactly": {"deviceClassName": "ainic-pf",
                "selectors": [{"cel": {"expression":
                    "device.attributes[\"resource.kubernetes.io\"].pciBusID == \"0000:c4:00.0\""}}]}}],
            "config": [{"requests": ["nic"], "opaque": {"driver": "ainic.amd.com", "parameters": settings}}],
        }}}})
    .to_string()
}

#[test]
fn nri_moves_the_claims_netdev_into_the_pod_and_home_again() {
    let bed = main_cluster();
    let _link = HostLink::new();
    let ns = "netdev";
    namespace(bed, ns, &[]);
    bed.apply(&template());
    let node_1 = json!({"nodeSelector": {"kubernetes.io/hostname": "node-1"}});
    bed.apply(&pod(
        ns,
        "moved",
        &[Claim::Template("nic", "moved")],
        node_1,
    ));
    let seen = seen(bed, ns, "moved");
    assert!(seen.links.contains("net1"), "{}", seen.links);
    assert!(seen.links.contains("mtu 4000"), "{}", seen.links);
    assert!(seen.links.contains("10.88.0.2/24"), "{}", seen.links);
    assert!(
        seen.links.contains("10.99.0.0/16 via 10.88.0.1"),
        "{}",
        seen.links
    );
    assert!(!HostLink::on_host(), "the netdev left the host");
    delete_pod(bed, ns, "moved");
    bed.eventually(
        "the netdev is home under its own name",
        Duration::from_secs(60),
        || HostLink::on_host().then_some(()),
    );
}
