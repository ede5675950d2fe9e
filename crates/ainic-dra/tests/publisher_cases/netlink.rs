//! Netlink link events from a real kernel, in a network namespace of our
//! own: the outer test re-runs the ignored inner test under `unshare -n`, so
//! the host's links are never touched.

use std::process::Command;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::publisher::{LinkEvent, LinkSource, NetlinkLinks};

const INNER: &str = "publisher_cases::netlink::veth_changes_arrive_as_link_events";

fn ip(args: &[&str]) {
    let status = Command::new("ip")
        .args(args)
        .status()
        .expect("ip command runs");
    assert!(status.success(), "ip {args:?} failed");
}

/// Waits for an event about `ifname` with state `up` (bounded, so a broken
/// kernel feed fails the test instead of hanging it).
async fn expect(events: &mut mpsc::Receiver<LinkEvent>, ifname: &str, up: bool) {
    let wanted = LinkEvent {
        ifname: ifname.into(),
        up,
    };
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(event) = events.recv().await {
            if event == wanted {
                return true;
            }
        }
        false
    });
    assert!(found.await.unwrap_or(false), "no event {wanted:?}");
}

#[tokio::test]
#[ignore = "runs only inside its own network namespace, started by link_events_come_from_netlink"]
async fn veth_changes_arrive_as_link_events() {
    assert!(testkit::netns::is_inner(), "run via the outer test");
    let mut events = NetlinkLinks.subscribe().expect("netlink multicast socket");
    ip(&["link", "add", "v0", "type", "veth", "peer", "name", "v1"]);
    ip(&["link", "set", "v1", "up"]);
    ip(&["link", "set", "v0", "up"]);
    expect(&mut events, "v0", true).await;
    ip(&["link", "set", "v1", "down"]);
    expect(&mut events, "v0", false).await;
}

#[test]
fn link_events_come_from_netlink() {
    testkit::netns::run_inner(INNER);
}
