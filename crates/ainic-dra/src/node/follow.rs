//! Following API objects the agent depends on but does not own the truth
//! of: its own ResourceSlices (someone may delete or edit them) and its
//! Node (whose labels carry fabric facts).
//!
//! A plain watch (`kube`'s client, no controller runtime), restarted for
//! ever with jittered backoff. Each (re)start asks from resourceVersion `0`,
//! so the server first replays every matching object: whatever happened
//! while no watch was open is seen as [`Seen::Applied`] or, for objects
//! gone meanwhile, by the follower comparing with what it expected.

use std::fmt::Debug;

use futures::StreamExt;
use kube::api::{Api, WatchEvent, WatchParams};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::publisher::Backoff;

/// One thing a watch saw.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen<K> {
    /// An object was added, or changed (or replayed after a restart).
    Applied(K),
    /// An object was deleted.
    Deleted(K),
    /// The watch (re)started: what follows is a full replay.
    Restarted,
}

/// Watches the objects of `api` matching `fields` (a field selector) on a
/// task of its own; ends when the receiver is dropped. `what` names them
/// in logs.
pub fn watch<K>(api: Api<K>, fields: String, what: &'static str) -> mpsc::Receiver<Seen<K>>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let backoff = Backoff::default();
        let mut failures = 0u32;
        loop {
            match watch_once(&api, &fields, &tx).await {
                Ended::Receiver => return,
                Ended::Stream => failures = 0,
                Ended::Failed { error, worked } => {
                    // A watch that delivered events was healthy: start the
                    // backoff afresh.
                    failures = if worked { 1 } else { failures + 1 };
                    tracing::warn!(what, %error, failures, "watch failed; restarting");
                }
            }
            // A stream that simply ended (server timeout) restarts soon;
            // failures back off up to the cap, never giving up.
            tokio::time::sleep(backoff.delay(failures.max(1))).await;
        }
    });
    rx
}

enum Ended {
    Receiver,
    Stream,
    Failed { error: String, worked: bool },
}

async fn watch_once<K>(api: &Api<K>, fields: &str, tx: &mpsc::Sender<Seen<K>>) -> Ended
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    // Below the API server's shortest watch timeout, so the end is ours.
    let params = WatchParams::default().fields(fields).timeout(290);
    let stream = match api.watch(&params, "0").await {
        Ok(stream) => stream,
        Err(e) => {
            return Ended::Failed {
                error: e.to_string(),
                worked: false,
            };
        }
    };
    if tx.send(Seen::Restarted).await.is_err() {
        return Ended::Receiver;
    }
    let mut stream = std::pin::pin!(stream);
    let mut worked = false;
    while let Some(event) = stream.next().await {
        let seen = match event {
            Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => Ok(Seen::Applied(o)),
            Ok(WatchEvent::Deleted(o)) => Ok(Seen::Deleted(o)),
            Ok(WatchEvent::Bookmark(_)) => continue,
            Ok(WatchEvent::Error(e)) => Err(e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let seen = match seen {
            Ok(seen) => seen,
            Err(error) => return Ended::Failed { error, worked },
        };
        worked = true;
        if tx.send(seen).await.is_err() {
            return Ended::Receiver;
        }
    }
    Ended::Stream
}
