//! The Kubernetes release of the API server the agent publishes to.
//!
//! Its release decides the default feature gates the agent publishes with
//! and the slice layout (counters beside devices in 1.34, in slices of
//! their own from 1.35). `--kubernetes-version` skips the lookup;
//! `--feature-gates` overrides single gates either way.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::version::Info;
use k8s_release::{Release, UnsupportedRelease};
use tokio::sync::{Notify, watch};

use crate::Backoff;

/// The release of a server's `/version`: from `major`/`minor` (the minor
/// may carry a suffix, `37+` on some managed clusters), else from
/// `gitVersion` (`v1.37.2-…`; some builds leave the others empty).
pub fn release_of(info: &Info) -> Result<Release, UnsupportedRelease> {
    let digits: String = info
        .minor
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    format!("{}.{digits}", info.major)
        .parse()
        .or_else(|_| info.git_version.parse())
        .map_err(|_| UnsupportedRelease(info.git_version.clone()))
}

/// Whether `error` will not go away by asking again (the server refuses
/// or does not serve `/version`).
fn is_permanent(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if matches!(status.code, 401 | 403 | 404))
}

/// Asks the API server for its version until it answers, waiting with
/// `backoff` between tries; `None` when `stop` turns true first. A server
/// older than 1.34 is logged as unsupported and 1.34's rules are used (its
/// API has no `resource.k8s.io/v1`, so publishing fails and says so). A
/// server that refuses `/version` (401, 403, 404) or answers what cannot be
/// read gets the newest release's rules, with an error that names
/// `--kubernetes-version`; the read-back of written fields still turns off
/// what it drops.
pub async fn learn(
    client: &kube::Client,
    backoff: Backoff,
    stop: &mut watch::Receiver<bool>,
) -> Option<Release> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let error = match client.apiserver_version().await {
            Ok(info) => return Some(chosen(&info)),
            Err(error) => error,
        };
        if is_permanent(&error) {
            tracing::error!(%error, release = %Release::NEWEST, "the API server does not tell its version; publishing for the newest known release (set --kubernetes-version to choose)");
            return Some(Release::NEWEST);
        }
        let delay = backoff.delay(attempt).min(Duration::from_secs(30));
        tracing::warn!(%error, attempt, delay_ms = delay.as_millis() as u64, "cannot read the API server's version; trying again");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = stop.wait_for(|s| *s) => return None,
        }
    }
}

/// When [`follow`] asks the API server's version again.
#[derive(Debug)]
pub struct Asked {
    /// Every so often (the publisher's resync).
    pub every: Duration,
    /// And whenever this is notified: a watch had to start over, as after
    /// an API server restart, which is when an upgrade happens.
    pub replayed: Arc<Notify>,
}

/// Asks the API server for its version as `asked` says and, when its
/// release changed (a control-plane upgrade), sends the new one and nudges
/// the publisher, which then builds for it. Ends when nobody listens.
pub async fn follow(
    client: kube::Client,
    asked: Asked,
    release: watch::Sender<Release>,
    nudge: tokio::sync::mpsc::Sender<()>,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(asked.every) => {}
            () = asked.replayed.notified() => {}
        }
        if release.is_closed() {
            return;
        }
        let Ok(info) = client.apiserver_version().await else {
            continue;
        };
        let Ok(now) = release_of(&info) else {
            continue;
        };
        if release.send_if_modified(|r| std::mem::replace(r, now) != now) {
            tracing::info!(server = %info.git_version, %now, "the API server's release changed; publishing with its defaults");
            let _ = nudge.try_send(());
        }
    }
}

/// Whether a version that is not supported reads as 1.x below 1.34.
fn looks_older(info: &Info) -> bool {
    let minor = |text: &str| -> Option<u32> {
        let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    let from_fields = (info.major == "1").then(|| minor(&info.minor)).flatten();
    let from_git = (info.git_version.trim_start_matches('v'))
        .strip_prefix("1.")
        .and_then(minor);
    from_fields.or(from_git).is_some_and(|m| m < 34)
}

fn chosen(info: &Info) -> Release {
    match release_of(info) {
        Ok(release) => {
            tracing::info!(
                server = %info.git_version,
                %release,
                "publishing with the defaults of the API server's release"
            );
            release
        }
        Err(error) if looks_older(info) => {
            tracing::error!(%error, "the API server is older than this driver supports (1.34); using 1.34's rules");
            Release::OLDEST
        }
        Err(error) => {
            tracing::error!(%error, release = %Release::NEWEST, "the API server's version cannot be read; publishing for the newest known release (set --kubernetes-version to choose)");
            Release::NEWEST
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(major: &str, minor: &str, git: &str) -> Info {
        Info {
            major: major.into(),
            minor: minor.into(),
            git_version: git.into(),
            ..Info::default()
        }
    }

    #[test]
    fn server_versions_map_to_releases() {
        assert_eq!(release_of(&info("1", "37", "v1.37.2")).unwrap().minor(), 37);
        assert_eq!(
            release_of(&info("1", "34+", "v1.34.4-gke.1"))
                .unwrap()
                .minor(),
            34
        );
        let err = release_of(&info("1", "33", "v1.33.7")).unwrap_err();
        assert!(err.to_string().contains("v1.33.7"), "{err}");
        assert!(release_of(&info("", "", "")).is_err());
        assert_eq!(
            release_of(&info("", "", "v1.36.1-custom")).unwrap().minor(),
            36
        );
        assert_eq!(chosen(&info("1", "31", "v1.31.0")), Release::OLDEST);
        assert_eq!(chosen(&info("", "", "v1.30.2")), Release::OLDEST);
        assert_eq!(chosen(&info("", "", "unknown")), Release::NEWEST);
    }
}

#[cfg(test)]
mod following {
    use testkit::apiserver::ApiServer;

    use super::*;

    #[tokio::test]
    async fn a_replayed_watch_asks_the_release_again_before_the_resync() {
        let api = ApiServer::start().await.unwrap();
        api.set_version(34);
        let (release_tx, mut release) = watch::channel(Release::OLDEST);
        let (nudge, mut nudges) = tokio::sync::mpsc::channel(1);
        let replayed = Arc::new(Notify::new());
        let asked = Asked {
            every: Duration::from_secs(3600),
            replayed: replayed.clone(),
        };
        tokio::spawn(follow(api.client(), asked, release_tx, nudge));
        // The control plane is upgraded; the agent's slice watch replays.
        api.set_version(37);
        replayed.notify_one();
        let wait = Duration::from_secs(30);
        let changed = tokio::time::timeout(wait, release.changed()).await;
        assert!(changed.is_ok(), "the release was not asked again");
        assert_eq!(release.borrow().minor(), 37);
        assert_eq!(
            tokio::time::timeout(wait, nudges.recv()).await,
            Ok(Some(()))
        );
    }
}
