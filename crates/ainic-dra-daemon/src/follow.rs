//! Following API objects the agent depends on but does not own the truth
//! of: its own ResourceSlices (someone may delete or edit them) and its
//! Node (whose labels carry fabric facts).
//!
//! A plain watch (`kube`'s client, no controller runtime), restarted for
//! ever. The first watch asks from resourceVersion `0`, so the server first
//! replays every matching object ([`Seen::Restarted`], then
//! [`Seen::Applied`] for each). Later watches resume from the last
//! resourceVersion seen (objects and bookmarks): the server sends only what
//! changed since, including deletions, and nothing is replayed. Only a
//! resume the server refuses (410: its history no longer reaches that far
//! back, as after an API server restart; or a version it has not seen)
//! falls back to a replay.
//!
//! A replay comes in name order, not version order, so one cut short by a
//! broken connection resumes after the last object it brought and may leave
//! some out. Every follower here either watches one object or takes events
//! as nudges and reads the truth with a list; a follower that kept the
//! objects themselves would need a replay known to be whole (the
//! `sendInitialEvents` bookmark).
//!
//! Why long watches: every watch is a request, and an agent at rest makes
//! nothing else for hours. Each asks the server to end it after 30 to 60
//! minutes (the span the API server picks itself for watches that name no
//! timeout), spread so a fleet started together does not restart together;
//! the API server sends a bookmark every minute, so a watch silent for
//! [`Lifetime::idle`] is taken for a lost connection and resumed. See
//! docs/scale.md ("Agents at rest").

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, WatchEvent, WatchParams};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use crate::Backoff;

/// One thing a watch saw.
#[derive(Debug, Clone, PartialEq)]
pub enum Seen<K> {
    /// An object was added, or changed (or replayed after a restart).
    Applied(K),
    /// An object was deleted.
    Deleted(K),
    /// The watch (re)started from nothing: what follows is a replay of every
    /// matching object (see the module docs for one cut short). Not sent
    /// when a watch resumes where the last one ended.
    Restarted,
}

/// How long each watch lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// The mean time after which the server is asked to end a watch; each
    /// watch asks for a time within a third of it either way.
    pub timeout: Duration,
    /// A watch that brings neither an event nor a bookmark for this long is
    /// taken for a lost connection and resumed.
    pub idle: Duration,
}

impl Default for Lifetime {
    /// 30 to 60 minutes; idle after 150 s (two and a half bookmarks).
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(2700),
            idle: Duration::from_secs(150),
        }
    }
}

impl Lifetime {
    /// The `timeoutSeconds` of the next watch.
    fn next_timeout(&self) -> u32 {
        let spread = Backoff {
            jitter_percent: 33,
            ..Backoff::default()
        };
        spread
            .jittered(self.timeout)
            .as_secs()
            .clamp(1, u64::from(u32::MAX)) as u32
    }
}

/// Watches the objects of `api` matching `fields` (a field selector) on a
/// task of its own, with the [`Lifetime::default`]; ends when the receiver
/// is dropped. `what` names them in logs.
pub fn watch<K>(api: Api<K>, fields: String, what: &'static str) -> mpsc::Receiver<Seen<K>>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watch_for(api, fields, what, Lifetime::default())
}

/// [`watch`] with watches that last `lifetime`.
pub fn watch_for<K>(
    api: Api<K>,
    fields: String,
    what: &'static str,
    lifetime: Lifetime,
) -> mpsc::Receiver<Seen<K>>
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let backoff = Backoff::default();
        let mut failures = 0u32;
        let mut from = None;
        loop {
            let delay = match watch_once(&api, &fields, &tx, &mut from, lifetime).await {
                Ended::Receiver => return,
                // The server's history no longer reaches our version:
                // replay, soon.
                Ended::Expired => {
                    tracing::info!(what, "watch expired; replaying every object");
                    backoff.delay(1)
                }
                Ended::Stream => {
                    failures = 0;
                    backoff.delay(1)
                }
                Ended::Idle => {
                    tracing::info!(
                        what,
                        idle_s = lifetime.idle.as_secs(),
                        "watch silent; resuming it"
                    );
                    failures = 0;
                    backoff.delay(1)
                }
                Ended::Failed { error, worked } => {
                    // A watch that delivered events was healthy: start the
                    // backoff afresh.
                    failures = if worked { 1 } else { failures + 1 };
                    tracing::warn!(what, %error, failures, "watch failed; restarting");
                    backoff.delay(failures)
                }
            };
            // Failures back off up to the cap, never giving up.
            tokio::time::sleep(delay).await;
        }
    });
    rx
}

enum Ended {
    Receiver,
    Stream,
    Idle,
    Expired,
    Failed { error: String, worked: bool },
}

/// One watch, from `from` (a replay from `0` when `None`); leaves in `from`
/// the version to resume from.
async fn watch_once<K>(
    api: &Api<K>,
    fields: &str,
    tx: &mpsc::Sender<Seen<K>>,
    from: &mut Option<String>,
    lifetime: Lifetime,
) -> Ended
where
    K: kube::Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    // Bookmarks are asked for (kube's default) and carry the version on.
    let params = WatchParams::default()
        .fields(fields)
        .timeout(lifetime.next_timeout());
    let version = from.clone().unwrap_or_else(|| "0".to_string());
    // A request sent on a connection that died unseen would wait for ever.
    let stream = match tokio::time::timeout(lifetime.idle, api.watch(&params, &version)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(kube::Error::Api(status))) if refused(&status) => return expired(from),
        Ok(Err(e)) => return failed(e.to_string(), false),
        Err(_) => return failed("no answer".into(), false),
    };
    if from.is_none() && tx.send(Seen::Restarted).await.is_err() {
        return Ended::Receiver;
    }
    let mut stream = std::pin::pin!(stream);
    let mut worked = false;
    loop {
        let event = match tokio::time::timeout(lifetime.idle, stream.next()).await {
            Err(_) => return Ended::Idle,
            Ok(None) => return Ended::Stream,
            Ok(Some(event)) => event,
        };
        let seen = match event {
            Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => Seen::Applied(o),
            Ok(WatchEvent::Deleted(o)) => Seen::Deleted(o),
            Ok(WatchEvent::Bookmark(b)) => {
                tracing::debug!(version = %b.metadata.resource_version, "watch bookmark");
                *from = Some(b.metadata.resource_version);
                worked = true;
                continue;
            }
            Ok(WatchEvent::Error(e)) if refused(&e) => return expired(from),
            Ok(WatchEvent::Error(e)) => return failed(e.to_string(), worked),
            Err(e) => return failed(e.to_string(), worked),
        };
        if let Seen::Applied(o) | Seen::Deleted(o) = &seen {
            *from = o.meta().resource_version.clone().or(from.take());
        }
        worked = true;
        if tx.send(seen).await.is_err() {
            return Ended::Receiver;
        }
    }
}

fn expired(from: &mut Option<String>) -> Ended {
    *from = None;
    Ended::Expired
}

fn failed(error: String, worked: bool) -> Ended {
    Ended::Failed { error, worked }
}

/// Whether the server refused the version a watch asked for: too old (410:
/// its history no longer reaches it) or too new (504 "Too large resource
/// version": it has not seen it, as after a restore from backup). Only
/// these make the next watch replay; any other failure (throttling, an API
/// server restarting, a broken connection) resumes where the last ended,
/// so a fleet retrying against a struggling server does not replay too.
fn refused(status: &kube::core::Status) -> bool {
    status.code == 410
        || (status.code == 504 && status.message.contains("Too large resource version"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::api::{DeleteParams, Patch, PatchParams};
    use testkit::apiserver::{ApiServer, Fault, Verb};

    use super::*;

    const WAIT: Duration = Duration::from_secs(30);

    fn node(name: &str, value: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([("a".to_string(), value.to_string())])),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn label(seen: &Seen<Node>) -> Option<String> {
        match seen {
            Seen::Applied(n) | Seen::Deleted(n) => n.metadata.labels.as_ref()?.get("a").cloned(),
            Seen::Restarted => None,
        }
    }

    async fn next(rx: &mut mpsc::Receiver<Seen<Node>>) -> Seen<Node> {
        let seen = tokio::time::timeout(WAIT, rx.recv()).await;
        seen.expect("an event within 30 s")
            .expect("the watch task runs")
    }

    fn watches(api: &ApiServer) -> usize {
        let requests = api.requests();
        requests.iter().filter(|r| r.verb == Verb::Watch).count()
    }

    /// Waits until the server has seen `n` watch requests in all.
    async fn until_watches(api: &ApiServer, n: usize) {
        tokio::time::timeout(WAIT, async {
            while watches(api) < n {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{n} watch requests within 30 s"));
    }

    /// A stand-in with Node `n1` (label `a=1`), followed with `lifetime`
    /// past its first replay.
    async fn following(lifetime: Lifetime) -> (ApiServer, mpsc::Receiver<Seen<Node>>) {
        let api = ApiServer::start().await.unwrap();
        api.seed(&node("n1", "1"));
        let nodes = Api::<Node>::all(api.client());
        let mut rx = watch_for(nodes, "metadata.name=n1".into(), "node", lifetime);
        replayed(&mut rx, "1").await;
        (api, rx)
    }

    /// Watches that the server ends after a second.
    const SHORT: Lifetime = Lifetime {
        timeout: Duration::from_secs(1),
        idle: WAIT,
    };

    async fn replayed(rx: &mut mpsc::Receiver<Seen<Node>>, value: &str) {
        assert_eq!(next(rx).await, Seen::Restarted);
        let seen = next(rx).await;
        assert!(matches!(seen, Seen::Applied(_)), "{seen:?}");
        assert_eq!(label(&seen).as_deref(), Some(value));
    }

    /// Sets `n1`'s label `a` to `value`.
    async fn relabel(api: &ApiServer, value: &str) {
        let patch = serde_json::json!({"metadata": {"labels": {"a": value}}});
        (Api::<Node>::all(api.client()))
            .patch("n1", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Panics if anything more was seen.
    fn nothing_more(rx: &mut mpsc::Receiver<Seen<Node>>) {
        let more = rx.try_recv();
        assert!(more.is_err(), "nothing replayed: {more:?}");
    }

    #[tokio::test]
    async fn a_watch_that_ends_resumes_where_it_was_and_replays_nothing() {
        let (api, mut rx) = following(SHORT).await;
        until_watches(&api, 3).await;
        // A change and a deletion between and across restarts arrive once each.
        relabel(&api, "2").await;
        assert_eq!(label(&next(&mut rx).await).as_deref(), Some("2"));
        let watched = watches(&api);
        until_watches(&api, watched + 2).await;
        (Api::<Node>::all(api.client()))
            .delete("n1", &DeleteParams::default())
            .await
            .unwrap();
        let gone = next(&mut rx).await;
        assert!(matches!(gone, Seen::Deleted(_)), "{gone:?}");
        until_watches(&api, watches(&api) + 2).await;
        nothing_more(&mut rx);
    }

    #[tokio::test]
    async fn a_silent_watch_is_resumed_not_replayed() {
        // The stand-in sends no bookmarks: every watch falls silent.
        let silent = Lifetime {
            timeout: Duration::from_secs(3600),
            // Long enough for the first watch's replay on a loaded machine:
            // a watch that ends before it saves no version.
            idle: Duration::from_secs(1),
        };
        let (api, mut rx) = following(silent).await;
        until_watches(&api, 4).await;
        nothing_more(&mut rx);
    }

    #[tokio::test]
    async fn a_resume_that_fails_otherwise_is_tried_again_without_a_replay() {
        let (api, mut rx) = following(SHORT).await;
        api.inject(Fault::status(500).on(Verb::Watch).resource("nodes"));
        until_watches(&api, 3).await;
        assert_eq!(api.pending_faults(), 0);
        relabel(&api, "2").await;
        assert_eq!(label(&next(&mut rx).await).as_deref(), Some("2"));
        nothing_more(&mut rx);
    }

    #[tokio::test]
    async fn a_resume_the_server_calls_expired_replays_every_object() {
        let (api, mut rx) = following(SHORT).await;
        api.inject(Fault::status(410).on(Verb::Watch).resource("nodes"));
        replayed(&mut rx, "1").await;
        assert_eq!(api.pending_faults(), 0);
    }
}
