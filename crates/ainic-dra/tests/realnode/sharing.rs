//! Item 3, use case 2: several pods share one NIC. A shared ResourceClaim
//! is prepared once and unprepared only after its last pod is gone; with
//! consumable capacity (on by default in 1.37) pods with claims of their
//! own get shares of one PF.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

#[test]
fn pods_of_a_shared_claim_see_one_nic_until_the_last_one_is_gone() {
    let bed = main_cluster();
    let ns = "sharing";
    namespace(bed, ns, &[]);
    bed.apply(&pf_claim(ns, "one-nic"));
    let names = ["user-0", "user-1", "user-2"];
    for name in names {
        bed.apply(&pod(
            ns,
            name,
            &[Claim::Shared("nic", "one-nic")],
            json!({}),
        ));
    }
    let seen: Vec<Seen> = names.iter().map(|n| seen(bed, ns, n)).collect();
    let nic = seen[0].env["AINIC_PCI_ADDRESSES"].clone();
    for s in &seen {
        assert_eq!(s.env["AINIC_PCI_ADDRESSES"], nic);
        assert_eq!(s.node, seen[0].node, "a claim's pods share its node");
        assert_eq!(s.devices, seen[0].devices);
    }
    let k: usize = seen[0].node.trim_start_matches("node-").parse().unwrap();
    let uid = bed
        .get_json(&["get", "resourceclaim", "-n", ns, "one-nic"])
        .unwrap()["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let spec = format!("ainic.amd.com-{uid}.json");
    assert!(claim_specs(bed, k).contains(&spec));
    for name in &names[..2] {
        delete_pod(bed, ns, name);
    }
    assert!(
        claim_specs(bed, k).contains(&spec),
        "still prepared while user-2 runs"
    );
    delete_pod(bed, ns, names[2]);
    bed.eventually(
        "unprepared after the last pod",
        Duration::from_secs(60),
        || (!claim_specs(bed, k).contains(&spec)).then_some(()),
    );
}

const SHARE_TEMPLATE: &str = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: share-100g, namespace: shares}
spec:
  spec:
    devices:
      requests:
      - name: nic
        exactly:
          deviceClassName: ainic-shared
          capacity:
            requests:
              ainic.amd.com/bandwidth: 100G
"#;

#[test]
fn pods_with_claims_of_their_own_get_shares_of_one_pf_by_capacity() {
    let bed = main_cluster();
    let ns = "shares";
    namespace(bed, ns, &[]);
    bed.apply(SHARE_TEMPLATE);
    let on_node_2 = json!({"nodeSelector": {"kubernetes.io/hostname": "node-2"}});
    let names = ["share-0", "share-1"];
    for name in names {
        bed.apply(&pod(
            ns,
            name,
            &[Claim::Template("nic", "share-100g")],
            on_node_2.clone(),
        ));
    }
    for name in names {
        let seen = seen(bed, ns, name);
        assert_eq!(seen.env["AINIC_PCI_ADDRESSES"], "0000:e4:00.0", "{name}");
    }
    let claims = bed.get_json(&["get", "resourceclaims", "-n", ns]).unwrap();
    let mut share_ids = vec![];
    for claim in claims["items"].as_array().unwrap() {
        let result = &claim["status"]["allocation"]["devices"]["results"][0];
        assert_eq!(
            result["consumedCapacity"]["ainic.amd.com/bandwidth"], "100G",
            "{claim}"
        );
        share_ids.push(result["shareID"].as_str().unwrap().to_string());
    }
    share_ids.dedup();
    assert_eq!(share_ids.len(), 2, "each claim its own share");
}
