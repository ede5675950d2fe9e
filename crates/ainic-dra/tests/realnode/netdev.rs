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

/// A host netdev standing in for a NIC's (a veth); removed when dropped.
pub struct HostLink(&'static str);

impl HostLink {
    pub fn new(name: &'static str) -> HostLink {
        let peer = format!("{name}-peer");
        remove(name, &peer);
        let status = Command::new("ip")
            .args(["link", "add", name, "type", "veth", "peer", "name", &peer])
            .status()
            .expect("ip link add");
        assert!(status.success(), "cannot create the veth {name}");
        HostLink(name)
    }

    /// Whether the netdev is in the host's network namespace.
    pub fn on_host(&self) -> bool {
        Command::new("ip")
            .args(["link", "show", self.0])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    }
}

impl Drop for HostLink {
    fn drop(&mut self) {
        remove(self.0, &format!("{}-peer", self.0));
    }
}

/// Deletes the veth pair by either end: the peer stays on the host when
/// the netdev itself is in a pod's namespace (or one a reboot orphaned).
fn remove(name: &str, peer: &str) {
    for end in [name, peer] {
        let _ = Command::new("ip")
            .args(["link", "del", end])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// A claim template in namespace `ns` for the NIC at `pci` in exclusive
/// netdev mode: in the pod as `net1`, MTU 4000, 10.88.0.2/24 and a route.
pub fn netdev_template(ns: &str, name: &str, pci: &str) -> String {
    let settings = json!({"apiVersion": "ainic.amd.com/v1alpha1", "kind": "NicConfig",
        "mode": "netdev", "netdev": {"interfaceName": "net1", "mtu": 4000,
        "addresses": ["10.88.0.2/24"],
        "routes": [{"destination": "10.99.0.0/16", "gateway": "10.88.0.1"}]}});
    let selector = format!("device.attributes[\"resource.kubernetes.io\"].pciBusID == \"{pci}\"");
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": {"devices": {
            "requests": [{"name": "nic", "exactly": {"deviceClassName": "ainic-pf",
                "selectors": [{"cel": {"expression": selector}}]}}],
            "config": [{"requests": ["nic"], "opaque": {"driver": "ainic.amd.com", "parameters": settings}}],
        }}}})
    .to_string()
}

/// Asserts that the pod saw the netdev as [`netdev_template`] asks.
pub fn assert_moved_in(seen: &Seen) {
    assert!(seen.links.contains("net1"), "{}", seen.links);
    assert!(seen.links.contains("mtu 4000"), "{}", seen.links);
    assert!(seen.links.contains("10.88.0.2/24"), "{}", seen.links);
    assert!(
        seen.links.contains("10.99.0.0/16 via 10.88.0.1"),
        "{}",
        seen.links
    );
}

#[test]
fn nri_moves_the_claims_netdev_into_the_pod_and_home_again() {
    let bed = main_cluster();
    let link = HostLink::new(NETDEV);
    let ns = "netdev";
    namespace(bed, ns, &[]);
    bed.apply(&netdev_template(ns, "moved", "0000:c4:00.0"));
    let node_1 = json!({"nodeSelector": {"kubernetes.io/hostname": "node-1"}});
    bed.apply(&pod(
        ns,
        "moved",
        &[Claim::Template("nic", "moved")],
        node_1,
    ));
    assert_moved_in(&seen(bed, ns, "moved"));
    assert!(!link.on_host(), "the netdev left the host");
    delete_pod(bed, ns, "moved");
    bed.eventually(
        "the netdev is home under its own name",
        Duration::from_secs(60),
        || link.on_host().then_some(()),
    );
}
