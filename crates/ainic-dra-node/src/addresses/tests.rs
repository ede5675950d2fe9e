use std::sync::atomic::{AtomicUsize, Ordering};

use futures::channel::mpsc;

use super::*;

/// A lookup that answers `<ifname>-<n>` for its n-th call, and its count.
fn counting() -> (Lookup, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::default());
    let counted = calls.clone();
    let lookup: Lookup = Arc::new(move |ifname| {
        let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
        Box::pin(async move { vec![format!("{ifname}-{n}")] })
    });
    (lookup, calls)
}

/// Lets the follower task take what was sent.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn answers_are_kept_while_events_arrive_and_forgotten_at_each() {
    let (lookup, calls) = counting();
    let cache = Addresses::uncached(lookup);
    let (changes, events) = mpsc::unbounded();
    cache.follow(events);
    assert_eq!(cache.of("eth0").await, ["eth0-1"]);
    assert_eq!(cache.of("eth0").await, ["eth0-1"]);
    assert_eq!(cache.of("eth1").await, ["eth1-2"]);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    changes.unbounded_send(()).unwrap();
    settle().await;
    assert_eq!(cache.of("eth0").await, ["eth0-3"]);
    assert_eq!(cache.of("eth1").await, ["eth1-4"]);
    assert_eq!(cache.of("eth1").await, ["eth1-4"]);
}

#[tokio::test]
async fn without_events_every_call_asks() {
    let (lookup, calls) = counting();
    let cache = Addresses::uncached(lookup);
    cache.of("eth0").await;
    cache.of("eth0").await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // Events that stop: nothing is kept from then on.
    let (changes, events) = mpsc::unbounded();
    cache.follow(events);
    cache.of("eth0").await;
    cache.of("eth0").await;
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    drop(changes);
    settle().await;
    cache.of("eth0").await;
    cache.of("eth0").await;
    assert_eq!(calls.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn a_lookup_overtaken_by_a_change_is_answered_not_kept() {
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let released = Arc::new(Mutex::new(Some(released)));
    let calls = Arc::new(AtomicUsize::default());
    let counted = calls.clone();
    // The first lookup waits until released; the others answer at once.
    let lookup: Lookup = Arc::new(move |_| {
        let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
        let wait = released.lock().unwrap().take();
        Box::pin(async move {
            if let Some(wait) = wait {
                let _ = wait.await;
            }
            vec![format!("answer-{n}")]
        })
    });
    let cache = Addresses::uncached(lookup);
    let (changes, events) = mpsc::unbounded();
    cache.follow(events);
    let first = tokio::spawn({
        let cache = cache.clone();
        async move { cache.of("eth0").await }
    });
    settle().await;
    changes.unbounded_send(()).unwrap();
    settle().await;
    release.send(()).unwrap();
    assert_eq!(first.await.unwrap(), ["answer-1"]);
    assert_eq!(
        cache.of("eth0").await,
        ["answer-2"],
        "the first was not kept"
    );
    assert_eq!(cache.of("eth0").await, ["answer-2"]);
}

#[tokio::test(start_paused = true)]
async fn an_entry_is_trusted_for_max_age_at_most() {
    let (lookup, calls) = counting();
    let cache = Addresses::uncached(lookup);
    let (_changes, events) = mpsc::unbounded();
    cache.follow(events);
    cache.of("eth0").await;
    tokio::time::advance(MAX_AGE - Duration::from_secs(1)).await;
    cache.of("eth0").await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(cache.of("eth0").await, ["eth0-2"]);
}

#[tokio::test]
async fn an_interface_that_is_not_here_has_no_addresses() {
    assert!(ask_kernel("ainic-none0".into()).await.is_empty());
}

const INNER: &str = "addresses::tests::an_address_added_by_the_kernel_is_seen_at_once";

#[tokio::test]
#[ignore = "runs only inside its own network namespace, started by the_kernels_address_events_keep_the_cache_true"]
async fn an_address_added_by_the_kernel_is_seen_at_once() {
    assert!(testkit::netns::is_inner(), "run via the outer test");
    let calls = Arc::new(AtomicUsize::default());
    let (counted, kernel) = (calls.clone(), kernel_lookup());
    let cache = Addresses::uncached(Arc::new(move |ifname| {
        counted.fetch_add(1, Ordering::SeqCst);
        kernel(ifname)
    }));
    cache.follow(kernel_changes().expect("netlink multicast socket"));
    let ip = |args: &[&str]| {
        let status = std::process::Command::new("ip").args(args).status();
        assert!(status.is_ok_and(|s| s.success()), "ip {args:?} failed");
    };
    ip(&["link", "add", "t0", "type", "veth", "peer", "name", "t1"]);
    // Once the link's own events are in, an answer is kept: a lookup right
    // after another does not ask the kernel.
    let kept = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            assert_eq!(cache.of("t0").await, Vec::<String>::new());
            let asked = calls.load(Ordering::SeqCst);
            assert_eq!(cache.of("t0").await, Vec::<String>::new());
            if calls.load(Ordering::SeqCst) == asked {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    assert!(kept.await.is_ok(), "no answer was ever kept");
    ip(&["addr", "add", "192.0.2.7/24", "dev", "t0"]);
    // Well inside MAX_AGE: only the kernel's event can make it seen.
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        while cache.of("t0").await.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert!(seen.await.is_ok(), "the new address was never seen");
    assert_eq!(cache.of("t0").await, ["192.0.2.7/24"]);
}

#[test]
fn the_kernels_address_events_keep_the_cache_true() {
    testkit::netns::run_inner(INNER);
}
