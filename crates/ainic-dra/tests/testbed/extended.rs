//! Extended resources through DRA, judged by the real 1.37 scheduler: with
//! the chart's extended-resource DeviceClasses installed, an unchanged pod
//! asking for `amd.com/nic: 1` on a node labelled
//! `ainic.amd.com/extended-resources=dra` gets one of our PFs allocated in
//! the claim the scheduler makes for it, and the agent prepares that claim.
//! A node without the label publishes no `extendedResource` attribute, so
//! the same pod cannot get a DRA device there.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;
use testkit::kubelet::{ClaimRef, KubeletSim};
use testkit::testbed::{Testbed, Version, cluster, helm, wait};

use crate::support::{DRIVER, NodeAgent, chart_dir, expected_slices, install_chart, published};

const NAMESPACE: &str = "extended";
const GROUP_LABEL: &str = "testbed.ainic.amd.com/group";

/// The chart's extended-resource classes, rendered with them enabled.
fn extended_classes(bed: &Testbed) -> Vec<DeviceClass> {
    let values = json!({"extendedResources": {"enabled": true}});
    helm::template(
        &chart_dir(),
        "ainic-dra",
        "ainic-dra",
        &values,
        bed.git_version(),
    )
    .unwrap()
    .into_iter()
    .filter(|r| r.object["spec"]["extendedResourceName"].is_string())
    .map(|r| serde_json::from_value(r.object).unwrap())
    .collect()
}

fn pod_asking_for_a_nic(name: &str, group: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {GROUP_LABEL: group},
            "containers": [{"name": "main", "image": "testbed.invalid/app:none",
                            "resources": {"requests": {"amd.com/nic": "1"},
                                          "limits": {"amd.com/nic": "1"}}}],
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn an_unchanged_pod_asking_for_amd_com_nic_gets_a_dra_device_on_a_dra_node() {
    let bed = Testbed::shared(Version::V1_37);
    install_chart(bed).await;
    let client = bed.client().await;
    cluster::namespace(&client, NAMESPACE).await;
    let classes: Api<DeviceClass> = Api::all(client.clone());
    let extended = extended_classes(bed);
    assert_eq!(extended.len(), 2);
    for class in &extended {
        classes.create(&PostParams::default(), class).await.unwrap();
    }
    let mut agents = Vec::new();
    for (node, switch) in [("ext-dra", Some("dra")), ("ext-classic", None)] {
        let mut labels = BTreeMap::from([(GROUP_LABEL.to_string(), node.to_string())]);
        if let Some(value) = switch {
            labels.insert(format!("{DRIVER}/extended-resources"), value.into());
        }
        let agent = NodeAgent::start(bed, node, "mi300x-8gpu-8nic", &labels, &[]).await;
        let expected = expected_slices("mi300x-8gpu-8nic", node, &[]);
        let slices = published(&client, &agent, expected.len()).await;
        let marked = slices
            .iter()
            .flat_map(|s| s.spec.devices.clone().unwrap_or_default())
            .filter(|d| {
                let attrs = d.attributes.clone().unwrap_or_default();
                attrs.contains_key(&format!("{DRIVER}/extendedResource"))
            })
            .count();
        assert_eq!(marked, if switch.is_some() { 8 } else { 0 }, "{node}");
        agents.push(agent);
    }

    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    pods.create(
        &PostParams::default(),
        &pod_asking_for_a_nic("on-dra", "ext-dra"),
    )
    .await
    .unwrap();
    let claim_name = wait::until("pod on-dra scheduled", wait::DEADLINE, || async {
        let pod = pods.get("on-dra").await.map_err(|e| e.to_string())?;
        let bound = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let claim = pod
            .status
            .as_ref()
            .and_then(|s| s.extended_resource_claim_status.as_ref())
            .map(|c| c.resource_claim_name.clone());
        match (bound, claim) {
            (Some(node), Some(claim)) => {
                assert_eq!(node, "ext-dra");
                Ok(claim)
            }
            other => Err(format!("not yet: {other:?}")),
        }
    })
    .await;
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let claim = claims.get(&claim_name).await.unwrap();
    let results = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.clone())
        .unwrap_or_default();
    assert_eq!(results.len(), 1, "{claim:?}");
    assert_eq!(
        (results[0].driver.as_str(), results[0].pool.as_str()),
        (DRIVER, "ext-dra")
    );
    assert!(results[0].device.starts_with("pf-"), "{results:?}");

    let plugin = KubeletSim::register_driver(&agents[0].dirs.registry, DRIVER)
        .await
        .unwrap();
    let r = ClaimRef::new(
        NAMESPACE,
        &claim_name,
        claim.metadata.uid.as_deref().unwrap(),
    );
    let answer = plugin.prepare_v1(std::slice::from_ref(&r)).await.unwrap();
    assert_eq!(answer.claims[&r.uid].error, "");
    assert_eq!(
        answer.claims[&r.uid].devices[0].device_name,
        results[0].device
    );
    plugin.unprepare_v1(std::slice::from_ref(&r)).await.unwrap();

    // The node left to the classic path has no DRA device for the name
    // (and no device plugin here): the pod stays pending.
    pods.create(
        &PostParams::default(),
        &pod_asking_for_a_nic("on-classic", "ext-classic"),
    )
    .await
    .unwrap();
    let reason = wait::until("pod on-classic refused", wait::DEADLINE, || async {
        let pod = pods.get("on-classic").await.map_err(|e| e.to_string())?;
        let condition = pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False");
        condition
            .and_then(|c| c.message)
            .ok_or_else(|| "no verdict yet".to_string())
    })
    .await;
    assert!(reason.contains("cannot allocate all claims"), "{reason}");
    for class in &extended {
        let name = class.metadata.name.as_deref().unwrap();
        classes.delete(name, &Default::default()).await.unwrap();
    }
}
