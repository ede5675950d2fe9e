//! The publisher under API faults (conflicts, 503, validation errors) and its
//! run loop (link events, followed inventory, build failures).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::fixtures::*;
use crate::publisher::{LinkEvent, PublishError, RunOptions, SyncResult};
use k8s_openapi::api::resource::v1::ResourceSlice;
use testkit::apiserver::{Fault, Verb};
use tokio::sync::{mpsc, oneshot, watch};

#[tokio::test]
async fn conflicts_and_unavailable_are_retried_with_backoff() {
    let server = server().await;
    let (mut publisher, sleeper) = publisher(&server, "n1");
    let mut devs = devices("pf", 4);
    publisher.publish(&pool("n1", &devs, 2)).await.unwrap();
    devs[0] = device("pf-0", false);
    devs.push(device("pf-4", true));
    server.inject(
        Fault::status(409)
            .on(Verb::Update)
            .resource("resourceslices"),
    );
    server.inject(
        Fault::status(503)
            .on(Verb::Create)
            .resource("resourceslices")
            .times(2),
    );
    let outcome = publisher.publish(&pool("n1", &devs, 2)).await.unwrap();
    assert_eq!(server.pending_faults(), 0);
    assert_eq!(outcome.attempts, 4);
    let ms: Vec<u128> = sleeper.delays().iter().map(Duration::as_millis).collect();
    assert_eq!(ms, [100, 200, 400]);
    assert_eq!(publisher.metrics().retries(), 3);
    // Each retry re-listed and may have bumped again; what counts is one
    // complete pool at one generation with the new content.
    assert_pool(&server, "n1", outcome.generation, &names(&devs));
    assert!(outcome.generation >= 2);
}

#[tokio::test]
async fn persistent_failure_gives_up_after_all_attempts_with_capped_delays() {
    let server = server().await;
    let (mut publisher, sleeper) = publisher(&server, "n1");
    server.inject(Fault::status(503).on(Verb::List).times(100));
    let err = publisher
        .publish(&pool("n1", &devices("pf", 1), 1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, PublishError::GaveUp { attempts: 5, .. }),
        "{err}"
    );
    let ms: Vec<u128> = sleeper.delays().iter().map(Duration::as_millis).collect();
    assert_eq!(ms, [100, 200, 400, 400]);
    assert_eq!(publisher.metrics().syncs(SyncResult::Failed), 1);
    assert_eq!(server.writes(), 0);
}

#[tokio::test]
async fn invalid_slices_are_not_retried() {
    let server = server().await;
    let (mut publisher, sleeper) = publisher(&server, "n1");
    server.inject(Fault::status(422).on(Verb::Create));
    let err = publisher
        .publish(&pool("n1", &devices("pf", 1), 1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            PublishError::Api {
                action: "create",
                ..
            }
        ),
        "{err}"
    );
    assert!(sleeper.delays().is_empty());
}

/// Desired slices the test can change while the loop runs.
fn shared_build(
    devs: Vec<k8s_openapi::api::resource::v1::Device>,
) -> Arc<Mutex<anyhow::Result<Vec<ResourceSlice>>>> {
    Arc::new(Mutex::new(Ok(pool("n1", &devs, 2))))
}

#[tokio::test]
async fn run_loop_republishes_on_link_events_and_inventory_changes() {
    let server = server().await;
    let (publisher, _) = publisher(&server, "n1");
    let desired = shared_build(devices("pf", 3));
    let source = desired.clone();
    let build = move || match &*source.lock().unwrap() {
        Ok(slices) => Ok(slices.clone()),
        Err(e) => Err(anyhow::anyhow!("{e}")),
    };
    let (links_tx, links_rx) = mpsc::channel(8);
    let (inventory_tx, inventory_rx) = watch::channel(0u32);
    let (reports_tx, mut reports) = mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let mut options = RunOptions::new(Duration::from_secs(3600));
    options.follow = Some(inventory_rx);
    options.links = Some(links_rx);
    options.debounce = Duration::ZERO;
    options.reports = Some(reports_tx);
    let task = tokio::spawn(crate::publisher::run(publisher, build, options, async {
        let _ = stop_rx.await;
    }));

    let started = reports.recv().await.unwrap().unwrap();
    assert_eq!((started.generation, started.created), (1, 2));

    // A link goes down: the next build carries the taint.
    *desired.lock().unwrap() = Ok(pool(
        "n1",
        &[
            device("pf-0", true),
            device("pf-1", false),
            device("pf-2", true),
        ],
        2,
    ));
    links_tx
        .send(LinkEvent {
            ifname: "ens1f1".into(),
            up: false,
        })
        .await
        .unwrap();
    let after_link = reports.recv().await.unwrap().unwrap();
    assert_eq!((after_link.generation, after_link.updated), (2, 2));

    // The inventory changes without any device change: nothing to write.
    inventory_tx.send(1).unwrap();
    let unchanged = reports.recv().await.unwrap().unwrap();
    assert!(!unchanged.changed);

    // A failed scan keeps what is published.
    *desired.lock().unwrap() = Err(anyhow::anyhow!("sysfs unreadable"));
    inventory_tx.send(2).unwrap();
    let failed = reports.recv().await.unwrap().unwrap_err();
    assert!(failed.contains("sysfs unreadable"), "{failed}");
    assert_eq!(held(&server, "n1", DRIVER).len(), 2);

    stop_tx.send(()).unwrap();
    let publisher = task.await.unwrap();
    assert_eq!(publisher.metrics().syncs(SyncResult::Published), 2);
    assert_eq!(publisher.metrics().syncs(SyncResult::Unchanged), 1);
}

#[tokio::test]
async fn spawned_agent_loop_publishes_before_it_stops() {
    let server = server().await;
    let (publisher, _) = publisher(&server, "n1");
    let devs = devices("pf", 3);
    let desired = pool("n1", &devs, 2);
    let (_inventory_tx, inventory_rx) = watch::channel(());
    let task = crate::publisher::spawn(
        publisher,
        move || Ok(desired.clone()),
        inventory_rx,
        Duration::from_secs(3600),
        async {},
    );
    let publisher = task.await.unwrap();
    assert_eq!(publisher.metrics().syncs(SyncResult::Published), 1);
    assert_pool(&server, "n1", 1, &names(&devs));
}
