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

/// The run loop publishing `slices` on a task, until the sender fires.
fn run_until_stopped(
    publisher: crate::publisher::SlicePublisher,
    slices: Vec<ResourceSlice>,
    options: RunOptions<u32>,
) -> (
    tokio::task::JoinHandle<crate::publisher::SlicePublisher>,
    oneshot::Sender<()>,
) {
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(crate::publisher::run(
        publisher,
        move || Ok(slices.clone()),
        options,
        async {
            let _ = stop_rx.await;
        },
    ));
    (task, stop_tx)
}

#[tokio::test]
async fn run_loop_never_gives_up_after_a_failed_publish() {
    let server = server().await;
    let (publisher, _) = publisher(&server, "n1");
    // More failures than one publish's attempts (5).
    server.inject(Fault::status(503).on(Verb::List).times(7));
    let slices = pool("n1", &devices("pf", 2), 1);
    let wanted = slices.len();
    let (reports_tx, mut reports) = mpsc::unbounded_channel();
    // No resync for an hour and no other trigger: only the retry can publish.
    let mut options = RunOptions::<u32>::new(Duration::from_secs(3600));
    options.reports = Some(reports_tx);
    let (task, stop_tx) = run_until_stopped(publisher, slices, options);
    let first = reports.recv().await.unwrap();
    assert!(
        first.unwrap_err().contains("gave up"),
        "the first publish failed"
    );
    // Bounded only so that a loop that waits for the resync fails, not hangs.
    let retried = tokio::time::timeout(Duration::from_secs(60), reports.recv())
        .await
        .expect("retried before the resync")
        .unwrap()
        .unwrap();
    assert_eq!(retried.created, wanted);
    assert_eq!(server.pending_faults(), 0);
    stop_tx.send(()).unwrap();
    task.await.unwrap();
}

#[tokio::test]
async fn run_loop_restores_a_deleted_slice_when_its_watch_nudges() {
    use ainic_dra_daemon::follow::{Seen, watch};
    let server = server().await;
    let (publisher, _) = publisher(&server, "n1");
    let slices = pool("n1", &devices("pf", 4), 2);
    let (nudge_tx, nudges) = mpsc::channel(1);
    let api: kube::Api<ResourceSlice> = kube::Api::all(server.client());
    let mut seen = watch(api.clone(), "spec.nodeName=n1".into(), "slices");
    tokio::spawn(async move {
        while let Some(event) = seen.recv().await {
            if !matches!(event, Seen::Restarted) {
                let _ = nudge_tx.try_send(());
            }
        }
    });
    let (reports_tx, mut reports) = mpsc::unbounded_channel();
    let mut options = RunOptions::<u32>::new(Duration::from_secs(3600));
    options.nudges = Some(nudges);
    options.debounce = Duration::ZERO;
    options.reports = Some(reports_tx);
    let (task, stop_tx) = run_until_stopped(publisher, slices, options);
    assert_eq!(reports.recv().await.unwrap().unwrap().created, 2);
    let victim = server.list::<ResourceSlice>()[0]
        .metadata
        .name
        .clone()
        .unwrap();
    api.delete(&victim, &Default::default()).await.unwrap();
    // Syncs nudged by our own writes find nothing to do; one restores the slice.
    loop {
        let outcome = reports.recv().await.unwrap().unwrap();
        if outcome.changed {
            assert_eq!(outcome.created + outcome.updated, 2, "{outcome:?}");
            break;
        }
    }
    assert_eq!(server.list::<ResourceSlice>().len(), 2);
    stop_tx.send(()).unwrap();
    task.await.unwrap();
}
