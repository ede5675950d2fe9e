//! Item 7: extended resources through DRA (1.37): an unchanged pod asking
//! `amd.com/nic: 1` runs with one of our NICs on node-1, which is switched to
//! the DRA path; the same pod on a classic node runs through the device
//! plugin.

use serde_json::json;

use crate::classic::extended_pod;
use crate::support::*;

#[test]
fn an_unchanged_pod_gets_its_nic_through_dra_on_a_dra_node() {
    let bed = main_cluster();
    let ns = "extended";
    namespace(bed, ns, &[]);
    bed.apply(&extended_pod(ns, "unchanged", 1, json!({})));
    let seen = seen(bed, ns, "unchanged");
    assert_eq!(seen.node, "node-1", "only node-1 serves amd.com/nic by DRA");
    assert!(
        seen.env.contains_key("AINIC_PCI_ADDRESSES"),
        "{:?}",
        seen.env
    );
    assert!(
        !seen.env.contains_key("PCIDEVICE_AMD_COM_NIC"),
        "not the device plugin"
    );
    let pod = bed
        .get_json(&["get", "pod", "-n", ns, "unchanged"])
        .unwrap();
    assert!(
        pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"].is_string(),
        "the scheduler made a claim: {pod}"
    );
}

#[test]
fn the_same_pod_on_a_classic_node_runs_through_the_device_plugin() {
    let bed = classic_cluster();
    let ns = "extended-classic";
    namespace(bed, ns, &[]);
    bed.apply(&extended_pod(ns, "unchanged", 1, json!({})));
    let seen = seen(bed, ns, "unchanged");
    assert!(
        seen.env.contains_key("PCIDEVICE_AMD_COM_NIC"),
        "{:?}",
        seen.env
    );
    assert_eq!(
        seen.devices
            .iter()
            .filter(|d| d.starts_with("uverbs"))
            .count(),
        1
    );
}
