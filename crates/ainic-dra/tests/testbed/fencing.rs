//! Tenant fencing fails closed on the real API server (issue 29 item 1):
//! an agent with the chart's service account and a node-bound token,
//! restarted with one bad entry among good ones in its fabric config,
//! withdraws its slices rather than publish its fenced NICs unfenced, says
//! so with a Warning Event on its Node (through the chart's real RBAC), and
//! publishes them fenced again once the file is fixed, without a restart.
//! A watch of the real API server records every slice version meanwhile:
//! none has a device without its tenant. On 1.34 and 1.37.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::{Device, ResourceSlice};
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use testkit::testbed::{Testbed, Version, wait};

use crate::support::{DRIVER, NodeAgent, install_chart, pool_slices, tail};

/// Every NIC of the node is team-a's, the first team-b's.
fn good(node: &str, first: &str) -> String {
    format!(
        "nodes:\n  {node}:\n    tenant: team-a\n    nics:\n      \"0000:04:00.0\": {{tenant: {first}}}\n"
    )
}

/// [`good`] and one bad entry for another node.
fn bad_entry(node: &str) -> String {
    good(node, "team-b") + "  other-node:\n    tenant: Team_C\n"
}

fn write(path: &Path, text: &str) {
    let next = path.with_extension("next");
    std::fs::write(&next, text).unwrap();
    std::fs::rename(&next, path).unwrap();
}

/// Every slice version of `driver` the API server sends a watch from now
/// on (replayed from the last version seen when the watch ends).
async fn record_slices(client: &kube::Client) -> Arc<Mutex<Vec<ResourceSlice>>> {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let params = WatchParams::default().fields(&format!("spec.driver={DRIVER}"));
    let listed = api.list(&ListParams::default()).await.unwrap();
    let mut version = listed.metadata.resource_version.unwrap_or_default();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut stream = api.watch(&params, &version).await.unwrap().boxed();
    let out = seen.clone();
    tokio::spawn(async move {
        loop {
            while let Some(event) = stream.next().await {
                let slice = match event {
                    Ok(WatchEvent::Added(s) | WatchEvent::Modified(s)) => s,
                    Ok(WatchEvent::Deleted(s)) => {
                        version = s.metadata.resource_version.clone().unwrap_or(version);
                        continue;
                    }
                    _ => continue,
                };
                version = slice.metadata.resource_version.clone().unwrap_or(version);
                out.lock().unwrap().push(slice);
            }
            match api.watch(&params, &version).await {
                Ok(next) => stream = next.boxed(),
                Err(_) => return,
            }
        }
    });
    seen
}

/// The tenant of each device of `node`'s pool now, by device name.
async fn tenants(client: &kube::Client, node: &str) -> Vec<(String, String)> {
    let slices = pool_slices(client, DRIVER, node).await;
    let mut out: Vec<(String, String)> = (slices.iter())
        .flat_map(|s| s.spec.devices.iter().flatten())
        .map(|d| (d.name.clone(), tenant_of(d).unwrap_or_default()))
        .collect();
    out.sort();
    out
}

/// The tenant `device` is published for, if any.
fn tenant_of(device: &Device) -> Option<String> {
    (device.attributes.as_ref())
        .and_then(|a| a.get(&format!("{DRIVER}/tenant")))
        .and_then(|t| t.string.clone())
}

fn fenced(first: &str) -> Vec<(String, String)> {
    let buses = ["04", "24", "44", "64", "84", "a4", "c4", "e4"];
    let mut want: Vec<(String, String)> = (buses.iter())
        .map(|bus| (format!("pf-0000-{bus}-00-0"), "team-a".to_string()))
        .collect();
    want[0].1 = first.to_string();
    want
}

async fn published_as(client: &kube::Client, agent: &NodeAgent, want: &[(String, String)]) {
    let what = format!("node {} publishing {want:?}", agent.node);
    wait::until(&what, wait::DEADLINE, || async {
        agent.assert_running();
        let now = tenants(client, &agent.node).await;
        match now == want {
            true => Ok(()),
            false => Err(format!("{now:?}; log:\n{}", tail(&agent.log(), 10))),
        }
    })
    .await
}

async fn fails_closed(version: Version, node: &str) {
    let bed = Testbed::shared(version);
    install_chart(bed).await;
    let client = bed.client().await;
    let recorded = record_slices(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("fabric.yaml");
    let path = config.to_str().unwrap();
    let flags = [
        "--fabric-config",
        path,
        "--fabric-config-poll-interval",
        "1",
    ];

    write(&config, &good(node, "team-b"));
    let labels = BTreeMap::new();
    let mut agent = NodeAgent::start(bed, node, "mi300x-8gpu-8nic", &labels, &flags).await;
    published_as(&client, &agent, &fenced("team-b")).await;

    // Restarted with one bad entry among good ones: withdrawn.
    write(&config, &bad_entry(node));
    agent.spawn(&flags);
    published_as(&client, &agent, &[]).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let warning = wait::until("the Warning Event on the Node", wait::DEADLINE, || async {
        let all = events
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let found = all.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("FabricConfigInvalid")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node)
        });
        found.ok_or_else(|| format!("none yet; log:\n{}", tail(&agent.log(), 10)))
    })
    .await;
    let note = warning.note.unwrap_or_default();
    assert!(
        note.contains("other-node.tenant") && note.contains("line 7"),
        "{note}"
    );

    // Fixed while running: published fenced again, no restart.
    write(&config, &good(node, "team-c"));
    published_as(&client, &agent, &fenced("team-c")).await;

    // The list above may see the last version before the watch does.
    let versions = wait::until("the watch seeing team-c", wait::DEADLINE, || async {
        let versions = recorded.lock().unwrap().clone();
        let seen = (versions.iter())
            .filter(|s| s.spec.pool.name == node)
            .flat_map(|s| s.spec.devices.iter().flatten())
            .any(|d| tenant_of(d).as_deref() == Some("team-c"));
        match seen {
            true => Ok(versions),
            false => Err(format!("{} versions, none of team-c", versions.len())),
        }
    })
    .await;
    let ours: Vec<&ResourceSlice> = versions
        .iter()
        .filter(|s| s.spec.pool.name == node)
        .collect();
    assert!(ours.len() >= 2, "the watch saw {} versions", ours.len());
    for slice in ours {
        for device in slice.spec.devices.iter().flatten() {
            assert!(
                tenant_of(device).is_some(),
                "slice {:?} (generation {}) published {} without a tenant",
                slice.metadata.name,
                slice.spec.pool.generation,
                device.name
            );
        }
    }
}

#[tokio::test]
async fn a_bad_fabric_config_never_unfences_a_nic_on_1_37() {
    fails_closed(Version::V1_37, "fence-137").await;
}

#[tokio::test]
async fn a_bad_fabric_config_never_unfences_a_nic_on_1_34() {
    fails_closed(Version::V1_34, "fence-134").await;
}
