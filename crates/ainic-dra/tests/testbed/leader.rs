//! The fabric controller's leader election on the real API server: a
//! second replica waits on the Lease while the first leads, takes over at
//! once when the leader stops (SIGTERM gives the Lease up) and, after a
//! leader killed outright, once its Lease expired; the new leader is the
//! one that publishes (a deleted partition slice comes back).
//!
//! Runs on a control plane of its own: the controller labels every Node.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::Api;
use kube::api::DeleteParams;
use testkit::testbed::{UpOptions, Version, wait};

use crate::support::{
    DRIVER, NAMESPACE, NodeAgent, expected_slices, own_bed, published, start_controller_as,
};

const SLICE_POOL: &str = "fabric/fab-l";

async fn holder(leases: &Api<Lease>) -> Option<String> {
    let lease = leases.get_opt("ainic-dra-controller").await.unwrap()?;
    lease.spec?.holder_identity
}

async fn wait_holder(leases: &Api<Lease>, who: &str, within: Duration) {
    wait::until(&format!("{who} holds the Lease"), within, || async {
        match holder(leases).await {
            Some(h) if h == who => Ok(()),
            other => Err(format!("holder {other:?}")),
        }
    })
    .await;
}

/// The name of the partition slice, once it is published.
async fn partition_slice(slices: &Api<ResourceSlice>) -> String {
    wait::until("the partition slice", wait::DEADLINE, || async {
        let list = slices.list(&Default::default()).await.unwrap();
        (list.items.into_iter())
            .find(|s| s.spec.pool.name == SLICE_POOL && s.spec.driver == DRIVER)
            .and_then(|s| s.metadata.name)
            .ok_or("not yet".to_string())
    })
    .await
}

/// The leader publishes: the partition slice, once deleted, comes back.
async fn republishes(slices: &Api<ResourceSlice>) {
    let name = partition_slice(slices).await;
    slices
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    partition_slice(slices).await;
}

#[tokio::test]
async fn a_second_replica_waits_then_takes_over_from_a_stopped_or_killed_leader() {
    let bed = own_bed(UpOptions {
        version: Some(Version::V1_37),
        ..UpOptions::default()
    })
    .await;
    let client = bed.client().await;
    let labels = BTreeMap::from([(format!("{DRIVER}/fabric"), "fab-l".to_string())]);
    let count = expected_slices("mi300x-8gpu-8nic", "n", &[]).len();
    let mut agents = Vec::new();
    for node in ["lead-1", "lead-2"] {
        agents.push(NodeAgent::start(bed, node, "mi300x-8gpu-8nic", &labels, &[]).await);
    }
    for agent in &agents {
        published(&client, agent, count).await;
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let log = |name: &str| bed.dir().join(format!("controller-{name}.log"));

    let mut a = start_controller_as(bed, &log("a"), "replica-a").await;
    partition_slice(&slices).await;
    wait_holder(&leases, "replica-a", wait::DEADLINE).await;
    let b = start_controller_as(bed, &log("b"), "replica-b").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(holder(&leases).await.as_deref(), Some("replica-a"));

    // A stopped leader gives the Lease up: the waiting replica takes over
    // well before the Lease (15 s) would have expired, and publishes.
    a.terminate();
    wait_holder(&leases, "replica-b", Duration::from_secs(10)).await;
    republishes(&slices).await;

    // A leader killed outright keeps the Lease until it expires; then the
    // waiting replica takes it.
    let _c = start_controller_as(bed, &log("c"), "replica-c").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(b);
    assert_eq!(holder(&leases).await.as_deref(), Some("replica-b"));
    let started = std::time::Instant::now();
    wait_holder(&leases, "replica-c", Duration::from_secs(40)).await;
    eprintln!("takeover after a kill: {:?}", started.elapsed());
    republishes(&slices).await;
}
