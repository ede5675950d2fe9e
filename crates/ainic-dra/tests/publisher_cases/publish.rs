//! The ResourceSlice publisher against the API stand-in, over HTTP with the
//! real `kube` client: first publish, no-op resync, device changes, restart
//! with stale slices, and the write order that keeps one generation as truth.

use std::collections::BTreeSet;

use super::fixtures::*;
use crate::publisher::{PublishError, WriteOp};
use dra_model::FeatureGate;
use k8s_openapi::api::resource::v1::ResourceSlice;
use testkit::apiserver::Verb;

#[tokio::test]
async fn first_publish_creates_the_pool_owned_by_the_node() {
    let server = server().await;
    let (mut publisher, _) = publisher(&server, "n1");
    let devs = devices("pf", 5);
    let outcome = publisher.publish(&pool("n1", &devs, 2)).await.unwrap();
    assert!(outcome.changed);
    assert_eq!(
        (
            outcome.generation,
            outcome.created,
            outcome.updated,
            outcome.deleted
        ),
        (1, 3, 0, 0)
    );
    assert_pool(&server, "n1", 1, &names(&devs));
    assert_eq!(server.writes(), 3);
    assert_eq!(publisher.metrics().writes(WriteOp::Create), 3);
}

#[tokio::test]
async fn resync_without_change_makes_zero_writes() {
    let server = server().await;
    let (mut publisher, _) = publisher(&server, "n1");
    let desired = pool("n1", &devices("pf", 8), 3);
    publisher.publish(&desired).await.unwrap();
    server.clear_requests();
    for _ in 0..3 {
        let outcome = publisher.publish(&desired).await.unwrap();
        assert!(!outcome.changed);
        assert_eq!(outcome.generation, 1);
    }
    assert_eq!(server.writes(), 0, "{:?}", server.requests());
    // Nothing changed, so not even the Node is read: one list per resync.
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.verb == Verb::List && r.resource == "resourceslices")
    );
}

#[tokio::test]
async fn link_down_bumps_the_generation_once_and_settles() {
    let server = server().await;
    let (mut publisher, _) = publisher(&server, "n1");
    let mut devs = devices("pf", 4);
    publisher.publish(&pool("n1", &devs, 2)).await.unwrap();
    devs[3] = device("pf-3", false);
    let outcome = publisher.publish(&pool("n1", &devs, 2)).await.unwrap();
    assert_eq!(
        (
            outcome.generation,
            outcome.created,
            outcome.updated,
            outcome.deleted
        ),
        (2, 0, 2, 0)
    );
    assert_pool(&server, "n1", 2, &names(&devs));
    let tainted = held(&server, "n1", DRIVER)
        .into_iter()
        .flat_map(|s| s.spec.devices.unwrap_or_default())
        .filter(|d| d.taints.is_some())
        .map(|d| d.name)
        .collect::<Vec<_>>();
    assert_eq!(tainted, ["pf-3"]);
    // The server stamped the taint's timeAdded; that is not a difference.
    server.clear_requests();
    assert!(
        !publisher
            .publish(&pool("n1", &devs, 2))
            .await
            .unwrap()
            .changed
    );
    assert_eq!(server.writes(), 0);
}

#[tokio::test]
async fn vf_count_change_grows_and_shrinks_the_pool() {
    let server = server().await;
    let (mut publisher, _) = publisher(&server, "n1");
    let few = devices("vf", 6);
    publisher.publish(&pool("n1", &few, 4)).await.unwrap();
    let many = devices("vf", 17);
    let grown = publisher.publish(&pool("n1", &many, 4)).await.unwrap();
    assert_eq!(
        (
            grown.generation,
            grown.created,
            grown.updated,
            grown.deleted
        ),
        (2, 3, 2, 0)
    );
    assert_pool(&server, "n1", 2, &names(&many));
    let shrunk = publisher.publish(&pool("n1", &few, 4)).await.unwrap();
    assert_eq!(
        (
            shrunk.generation,
            shrunk.created,
            shrunk.updated,
            shrunk.deleted
        ),
        (3, 0, 2, 3)
    );
    assert_pool(&server, "n1", 3, &names(&few));
    let removed = publisher.publish(&[]).await.unwrap();
    assert_eq!(removed.deleted, 2);
    assert!(held(&server, "n1", DRIVER).is_empty());
}

/// Slices left by a previous run of the driver on n1, plus neighbours' slices.
fn previous_run(server: &testkit::apiserver::ApiServer) -> Vec<ResourceSlice> {
    let mut old = pool("n1", &devices("old", 9), 3);
    for s in &mut old {
        s.spec.pool.generation = 5;
    }
    let mut older = pool("n1", &devices("older", 1), 1);
    older[0].metadata.name = Some("n1-leftover".into());
    older[0].spec.pool.generation = 4;
    old.extend(older);
    let mut neighbours = pool("n2", &devices("pf", 2), 2);
    let mut other_driver = pool("n1", &devices("gpu", 2), 2);
    other_driver[0].metadata.name = Some("n1-gpu-0".into());
    other_driver[0].spec.driver = "gpu.amd.com".into();
    neighbours.append(&mut other_driver);
    for s in &neighbours {
        server.seed(s);
    }
    for s in &old {
        server.seed(s);
    }
    neighbours
        .iter()
        .map(|s| {
            server
                .get::<ResourceSlice>(None, s.metadata.name.as_deref().unwrap())
                .unwrap()
        })
        .collect()
}

#[tokio::test]
async fn restart_with_stale_slices_converges_and_leaves_others_untouched() {
    let server = server().await;
    let untouched = previous_run(&server);
    let (mut publisher, _) = publisher(&server, "n1");
    let devs = devices("pf", 3);
    let outcome = publisher.publish(&pool("n1", &devs, 2)).await.unwrap();
    // Two named slices reuse their old objects; the third old slice and the
    // generation-4 leftover are deleted; the new generation beats 5.
    assert_eq!(
        (
            outcome.generation,
            outcome.created,
            outcome.updated,
            outcome.deleted
        ),
        (6, 0, 2, 2)
    );
    assert_pool(&server, "n1", 6, &names(&devs));
    for before in untouched {
        let name = before.metadata.name.as_deref().unwrap();
        assert_eq!(
            server.get::<ResourceSlice>(None, name),
            Some(before.clone()),
            "{name} changed"
        );
    }
    server.clear_requests();
    assert!(
        !publisher
            .publish(&pool("n1", &devs, 2))
            .await
            .unwrap()
            .changed
    );
    assert_eq!(server.writes(), 0);
}

#[tokio::test]
async fn every_new_generation_slice_is_written_before_any_old_one_is_deleted() {
    let server = server().await;
    previous_run(&server);
    let (mut publisher, _) = publisher(&server, "n1");
    server.clear_requests();
    publisher
        .publish(&pool("n1", &devices("pf", 12), 2))
        .await
        .unwrap();
    let writes: Vec<Verb> = server
        .requests()
        .iter()
        .map(|r| r.verb)
        .filter(|v| v.is_write())
        .collect();
    let first_delete = writes
        .iter()
        .position(|v| *v == Verb::Delete)
        .expect("stale slices deleted");
    assert!(
        writes[first_delete..].iter().all(|v| *v == Verb::Delete),
        "{writes:?}"
    );
    assert_eq!(writes.len(), 6 + 1, "{writes:?}");
}

#[tokio::test]
async fn slices_of_another_node_or_driver_are_refused() {
    let server = server().await;
    let (mut publisher, _) = publisher(&server, "n1");
    let err = publisher
        .publish(&pool("n2", &devices("pf", 1), 1))
        .await
        .unwrap_err();
    assert!(matches!(err, PublishError::ForeignSlice { .. }), "{err}");
    assert_eq!(server.requests(), []);
}

#[tokio::test]
async fn missing_node_is_reported_without_writes() {
    let server = server().await;
    let (mut publisher, _) = publisher(&server, "n3");
    let err = publisher
        .publish(&pool("n3", &devices("pf", 1), 1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, PublishError::NodeNotFound { ref node } if node == "n3"),
        "{err}"
    );
    assert_eq!(server.writes(), 0);
}

#[tokio::test]
async fn fields_the_server_drops_do_not_cause_endless_rewrites() {
    let server = server().await;
    server.drop_device_field("allowMultipleAllocations");
    let (mut publisher, _) = publisher(&server, "n1");
    let mut devs = devices("pf", 2);
    devs[0].allow_multiple_allocations = Some(true);
    // A dry run finds the field dropped before anything is written: the
    // caller is told to build again without its gate.
    let first = publisher.publish(&pool("n1", &devs, 2)).await.unwrap();
    assert!(first.refused && !first.changed, "{first:?}");
    assert_eq!(server.writes(), 0);
    assert_eq!(
        publisher.refused_gates().get(),
        BTreeSet::from([FeatureGate::DraConsumableCapacity])
    );
    // A caller that sends the field anyway gets it written once (no
    // second dry run, no second report), and then never again.
    let written = publisher.publish(&pool("n1", &devs, 2)).await.unwrap();
    assert!(written.changed && !written.refused, "{written:?}");
    server.clear_requests();
    let again = publisher.publish(&pool("n1", &devs, 2)).await.unwrap();
    assert!(!again.changed);
    assert_eq!(server.writes(), 0);
    // A real change is still published.
    devs.push(device("pf-2", true));
    let changed = publisher.publish(&pool("n1", &devs, 2)).await.unwrap();
    assert_eq!(
        (changed.generation, changed.updated, changed.created),
        (2, 1, 1)
    );
    assert_pool(&server, "n1", 2, &names(&devs));
}

#[tokio::test]
async fn renamed_pool_replaces_same_named_slices_it_cannot_update() {
    let server = server().await;
    let mut legacy = pool("n1", &devices("pf", 2), 2);
    legacy[0].spec.pool.name = "legacy".into();
    legacy[0].spec.pool.generation = 9;
    server.seed(&legacy[0]);
    let (mut publisher, _) = publisher(&server, "n1");
    let devs = devices("pf", 2);
    let outcome = publisher.publish(&pool("n1", &devs, 2)).await.unwrap();
    assert_eq!(
        (outcome.generation, outcome.created, outcome.deleted),
        (10, 1, 1)
    );
    assert_pool(&server, "n1", 10, &names(&devs));
}

#[tokio::test]
async fn pool_of_eight_pfs_with_256_vfs_each_resyncs_without_writes() {
    let server = server().await;
    let (mut publisher, _) = publisher(&server, "n1");
    let devs = devices("vf", 8 * 257);
    let first = publisher.publish(&pool("n1", &devs, 128)).await.unwrap();
    assert_eq!(first.created, 17);
    server.clear_requests();
    assert!(
        !publisher
            .publish(&pool("n1", &devs, 128))
            .await
            .unwrap()
            .changed
    );
    assert_eq!(server.writes(), 0);
    assert_pool(&server, "n1", 1, &names(&devs));
}
