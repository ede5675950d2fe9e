//! Claim status writes (issue 29, item 3) in the real API server, on the
//! oldest and the newest release: with node A's node-bound token of the
//! chart's service account, the agent's own write (server-side apply of
//! its `status.devices` entries under field manager `<driver>/<node>`, the
//! code path of `node::plugin::status`) is admitted; another node's device
//! status, another driver's, and any change of `allocation` or
//! `reservedFor` are refused, and so are the controller's. Before the fix
//! 1.34 admitted node B's entry, another driver's entry and a
//! deallocation (RBAC grants `patch` on `resourceclaims/status`
//! cluster-wide); 1.37's own checks (resourceclaims/binding and
//! resourceclaims/driver) refused all but node B's entry of our driver on
//! a claim allocated on node A: they look at the driver, not the pool.

use std::collections::BTreeMap;

use ainic_dra_node::checkpoint::PreparedDevice;
use ainic_dra_node::plugin::ClaimRef;
use ainic_dra_node::plugin::claims::{ClaimSource, KubeClaims};
use ainic_dra_node::plugin::status::{NetworkData, entries};
use dra_model::claim::status_apply_body as apply_body;
use k8s_openapi::api::resource::v1::{AllocatedDeviceStatus, ResourceClaim};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::testbed::{Testbed, Version, client_from, cluster};

use crate::support::{ACCOUNT, DRIVER, NAMESPACE, RELEASE, install_chart};

const NOW: &str = "2026-12-01T00:00:00Z";

/// A new claim for one NIC, not allocated.
async fn new_claim(admin: &kube::Client, name: &str) -> ResourceClaim {
    let claims: Api<ResourceClaim> = Api::namespaced(admin.clone(), NAMESPACE);
    let claim: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [
            {"name": "nic", "exactly": {"deviceClassName": "ainic-pf"}}]}},
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap()
}

/// A claim allocated on node `a`: a device of `a`'s pool, one of `b`'s
/// pool (as a forged or network-attached result would be) and one of
/// another driver, reserved for a pod, with that driver's status entry.
async fn allocated_claim(admin: &kube::Client, name: &str, a: &str, b: &str) -> ResourceClaim {
    let claims: Api<ResourceClaim> = Api::namespaced(admin.clone(), NAMESPACE);
    let created = new_claim(admin, name).await;
    let result = |driver: &str, pool: &str, device: &str| json!({"request": "nic", "driver": driver, "pool": pool, "device": device});
    let status = json!({"status": {
        "allocation": {
            "devices": {"results": [
                result(DRIVER, a, "pf-a"), result(DRIVER, b, "pf-b"),
                result("gpu.amd.com", a, "gpu-0")]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [a]}]}]},
        },
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "00000000-0000-0000-0000-00000000000a"}],
        "devices": [{"driver": "gpu.amd.com", "pool": a, "device": "gpu-0",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared",
                "message": "", "lastTransitionTime": NOW}]}],
    }});
    claims
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("cannot allocate claim {name}: {e}"));
    created
}

/// The agent's own status entry for `device` of `pool`.
fn entry(pool: &str, device: &str) -> AllocatedDeviceStatus {
    let prepared = PreparedDevice {
        requests: vec!["nic".into()],
        pool: pool.into(),
        device: device.into(),
        share_id: None,
        admin_access: false,
        cdi_ids: vec![format!("amd.com/ainic=u-{device}")],
        identity: None,
        netdev: None,
    };
    let now = NOW.parse().expect("a timestamp");
    entries(DRIVER, pool, &[(prepared, NetworkData::default())], now).remove(0)
}

/// Applies `entries` as the agent does; the refusal's message, if any.
async fn apply(
    agent: &KubeClaims,
    claim: &ResourceClaim,
    node: &str,
    entries: Vec<AllocatedDeviceStatus>,
) -> Option<String> {
    let claim_ref = ClaimRef {
        namespace: NAMESPACE.into(),
        uid: claim.metadata.uid.clone().unwrap(),
        name: claim.metadata.name.clone().unwrap(),
    };
    let manager = format!("{DRIVER}/{node}");
    let body = apply_body(&claim_ref, &entries);
    let done = agent
        .apply_status(NAMESPACE, &claim_ref.name, &manager, body)
        .await;
    done.err().map(|e| e.to_string())
}

/// A merge patch of the claim's status by `client`; the refusal, if any.
async fn patch(client: &kube::Client, name: &str, status: Value) -> Option<String> {
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let done = claims
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await;
    crate::admission::refusal(done)
}

fn refused(what: &str, message: Option<String>, why: &[&str]) {
    let message = message.unwrap_or_else(|| panic!("{what} was admitted"));
    assert!(why.iter().any(|w| message.contains(w)), "{what}: {message}");
}

async fn only_own_device_status(bed: &'static Testbed, a: &str, b: &str) {
    install_chart(bed).await;
    let admin = bed.client().await;
    for node in [a, b] {
        cluster::fake_node(&admin, node, &BTreeMap::new()).await;
    }
    let token = cluster::node_bound_token(&admin, NAMESPACE, ACCOUNT, a).await;
    let agent = client_from(&bed.write_kubeconfig(&format!("{a}-status"), a, &token)).await;
    let claims = KubeClaims::new(agent.clone());
    let name = format!("{a}-claim");
    let claim = allocated_claim(&admin, &name, a, b).await;

    // Its own device: admitted and stored beside the other driver's entry.
    assert_eq!(
        apply(&claims, &claim, a, vec![entry(a, "pf-a")]).await,
        None
    );
    let api: Api<ResourceClaim> = Api::namespaced(admin.clone(), NAMESPACE);
    let stored = api.get(&name).await.unwrap();
    let devices = stored.status.unwrap().devices.unwrap();
    let keys: Vec<(&str, &str)> = devices
        .iter()
        .map(|d| (d.driver.as_str(), d.device.as_str()))
        .collect();
    assert!(
        keys.contains(&(DRIVER, "pf-a")) && keys.contains(&("gpu.amd.com", "gpu-0")),
        "{keys:?}"
    );

    // Node B's device of the same claim: the policy's (1.36 checks the
    // driver, not the pool).
    let pool_b = format!(
        "may only write status.devices entries of driver {DRIVER} in its own pool {a}, not {DRIVER} pool {b} device pf-b"
    );
    let other_pool = apply(&claims, &claim, a, vec![entry(a, "pf-a"), entry(b, "pf-b")]).await;
    refused("node B's device status", other_pool, &[&pool_b]);
    // Another driver's entry, removed by a merge patch.
    let gpu = [
        "not gpu.amd.com pool",
        r#"resource="resourceclaims/driver""#,
    ];
    refused(
        "another driver's status",
        patch(&agent, &name, json!({"devices": [entry(a, "pf-a")]})).await,
        &gpu,
    );
    // Allocation and reservedFor (an allocation cannot change once set,
    // but it can be dropped, or set on a claim not yet allocated).
    let binding = r#"resource="resourceclaims/binding""#;
    let allocation = ["may not change status.allocation", binding];
    let reservation = ["may not change status.reservedFor", binding];
    let dropped = patch(
        &agent,
        &name,
        json!({"allocation": null, "reservedFor": null}),
    )
    .await;
    refused("a deallocation", dropped, &allocation);
    let pods = json!([{"resource": "pods", "name": "p", "uid": "00000000-0000-0000-0000-00000000000a"},
                      {"resource": "pods", "name": "q", "uid": "00000000-0000-0000-0000-00000000000b"}]);
    let reserved = patch(&agent, &name, json!({"reservedFor": pods})).await;
    refused("a reservation", reserved, &reservation);
    let pending = format!("{a}-pending");
    new_claim(&admin, &pending).await;
    let own_allocation = json!({"devices": {"results": [
        {"request": "nic", "driver": DRIVER, "pool": a, "device": "pf-a"}]}});
    let allocated = patch(&agent, &pending, json!({"allocation": own_allocation})).await;
    refused("an allocation", allocated, &allocation);

    // The controller (sticky tenants give it status patches) neither.
    let account = format!("{RELEASE}-controller");
    let token = cluster::account_token(&admin, NAMESPACE, &account).await;
    let controller =
        client_from(&bed.write_kubeconfig(&format!("{a}-controller"), &account, &token)).await;
    let reserved = patch(&controller, &name, json!({"reservedFor": pods})).await;
    refused("the controller's reservation", reserved, &reservation);

    // Unprepare: its entries go, the other driver's stay.
    assert_eq!(apply(&claims, &claim, a, Vec::new()).await, None);
    let left = api
        .get(&name)
        .await
        .unwrap()
        .status
        .unwrap()
        .devices
        .unwrap_or_default();
    assert_eq!(
        left.iter().map(|d| d.driver.as_str()).collect::<Vec<_>>(),
        ["gpu.amd.com"]
    );
}

#[tokio::test]
async fn an_agent_writes_only_its_own_device_status_on_1_34() {
    only_own_device_status(Testbed::shared(Version::V1_34), "cst-a", "cst-b").await;
}

#[tokio::test]
async fn an_agent_writes_only_its_own_device_status_on_1_37() {
    only_own_device_status(Testbed::shared(Version::V1_37), "cst-a", "cst-b").await;
}
