//! The fabric config file (`--fabric-config`) as the node agent follows
//! it: read at start, then polled, so an edited ConfigMap takes effect
//! without a restart.
//!
//! The file fences NICs to tenants, so it fails closed. A file that does
//! not read, parse or validate never counts as "no config": the last valid
//! content this process read stays in force, and when there is none the
//! fencing of every NIC is unknown and [`FabricConfig::in_force`] says so
//! (the agent then publishes no device). The transitions are in
//! [`FabricConfig::next`].
//!
//! Polling, not inotify: a ConfigMap volume is updated by the kubelet
//! swapping a symlink (`..data`), which file watches see only as events on
//! the directory, and a poll of one small file every few seconds costs a
//! read syscall and a compare. The content is compared, not the mtime, so
//! an edit is seen whatever the timestamps say.

use ainic_dra_daemon::Tasks;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dra_model::fabric::FabricFile;
use tokio::sync::watch;

/// Why the fabric config file gives no valid content.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FabricConfigError {
    /// The file could not be read.
    #[error("failed to read fabric config {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// What reading it said.
        reason: String,
    },
    /// The file is not UTF-8.
    #[error("fabric config {path} is not UTF-8: {source}")]
    NotUtf8 {
        /// The file.
        path: String,
        /// Where the bytes stop being UTF-8.
        source: std::str::Utf8Error,
    },
    /// The content is not a valid fabric config (the error names the entry
    /// and its line).
    #[error(transparent)]
    Invalid(#[from] dra_model::fabric::FabricError),
}

/// Reads and checks the file at `path`; the error names the file and,
/// for a bad entry, its path in the file and its line.
pub fn read(path: &Path) -> Result<FabricFile, FabricConfigError> {
    let read = std::fs::read(path).map_err(|e| e.to_string());
    from_bytes(&read, path)
}

/// What the agent knows of the fabric config file.
///
/// - `NotConfigured`: no `--fabric-config`; for ever.
/// - `Valid`: the file's current content is valid; entered whenever a read
///   succeeds.
/// - `Stale`: the current content is invalid, an earlier one read by this
///   process was valid and stays in force; entered from `Valid` or `Stale`
///   by a failed read, left by a good one.
/// - `Unknown`: no content read by this process was valid: no NIC's
///   fencing is known; the start state when the first read fails, left by
///   a good read.
#[derive(Clone, Debug, PartialEq)]
pub enum FabricConfig {
    /// No fabric config file is configured.
    NotConfigured,
    /// The file as last read.
    Valid(Arc<FabricFile>),
    /// The file is invalid now; `last_good` stays in force.
    Stale {
        /// The last valid content.
        last_good: Arc<FabricFile>,
        /// Why the current content is not used.
        error: String,
    },
    /// The file has not been valid since the agent started.
    Unknown {
        /// Why.
        error: String,
    },
}

impl FabricConfig {
    /// The state for a first read of the file.
    pub fn first(read: Result<FabricFile, String>) -> Self {
        FabricConfig::Unknown {
            error: String::new(),
        }
        .next(read)
    }

    /// The state after another read of the file.
    pub fn next(self, read: Result<FabricFile, String>) -> Self {
        match (self, read) {
            (FabricConfig::NotConfigured, _) => FabricConfig::NotConfigured,
            (_, Ok(file)) => FabricConfig::Valid(Arc::new(file)),
            (FabricConfig::Valid(last_good), Err(error))
            | (FabricConfig::Stale { last_good, .. }, Err(error)) => {
                FabricConfig::Stale { last_good, error }
            }
            (FabricConfig::Unknown { .. }, Err(error)) => FabricConfig::Unknown { error },
        }
    }

    /// The file the device model is built from: `Some(None)` with no file
    /// configured, `Some(Some(file))` with a valid one in force, `None`
    /// when no NIC's fencing is known.
    pub fn in_force(&self) -> Option<Option<&FabricFile>> {
        match self {
            FabricConfig::NotConfigured => Some(None),
            FabricConfig::Valid(file)
            | FabricConfig::Stale {
                last_good: file, ..
            } => Some(Some(file)),
            FabricConfig::Unknown { .. } => None,
        }
    }

    /// Why the file's current content is not used, if it is not.
    pub fn error(&self) -> Option<&str> {
        match self {
            FabricConfig::Stale { error, .. } | FabricConfig::Unknown { error } => Some(error),
            FabricConfig::NotConfigured | FabricConfig::Valid(_) => None,
        }
    }
}

/// Reads `path` now, then every `every` on a task of its own, and sends
/// each new state; ends when every receiver is gone. `None` follows
/// nothing: [`FabricConfig::NotConfigured`] for ever.
pub fn follow(
    path: Option<PathBuf>,
    every: Duration,
    tasks: &Tasks,
) -> watch::Receiver<FabricConfig> {
    let Some(path) = path else {
        return watch::channel(FabricConfig::NotConfigured).1;
    };
    let mut last = std::fs::read(&path).map_err(|e| e.to_string());
    let first = from_bytes(&last, &path).map_err(|e| e.to_string());
    let (tx, rx) = watch::channel(FabricConfig::first(first));
    tasks.spawn_critical("fabric config follower", async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                () = tx.closed() => return,
            }
            // On the worker itself: a few hundred bytes from the ConfigMap's
            // tmpfs, where a blocking-pool thread every poll would cost the
            // agent a thread's stack and arena (its memory budget).
            let now = std::fs::read(&path).map_err(|e| e.to_string());
            if now == last {
                continue;
            }
            last = now;
            let read = from_bytes(&last, &path).map_err(|e| e.to_string());
            tx.send_modify(|state| {
                *state = std::mem::replace(state, FabricConfig::NotConfigured).next(read)
            });
        }
    });
    rx
}

/// The checked file from what a read returned.
fn from_bytes(
    read: &Result<Vec<u8>, String>,
    path: &Path,
) -> Result<FabricFile, FabricConfigError> {
    let shown = path.display().to_string();
    let bytes = read.as_ref().map_err(|reason| FabricConfigError::Read {
        path: shown.clone(),
        reason: reason.clone(),
    })?;
    let text = std::str::from_utf8(bytes).map_err(|source| FabricConfigError::NotUtf8 {
        path: shown.clone(),
        source,
    })?;
    Ok(FabricFile::parse(text, &shown)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(tenant: &str) -> FabricFile {
        FabricFile::parse(&format!("defaults: {{tenant: {tenant}}}\n"), "f.yaml").unwrap()
    }

    #[test]
    fn a_first_read_that_fails_leaves_the_fencing_unknown() {
        let state = FabricConfig::first(Err("bad entry".into()));
        assert_eq!(state.in_force(), None);
        assert_eq!(state.error(), Some("bad entry"));
        let state = state.next(Err("still bad".into()));
        assert_eq!(state.in_force(), None, "no valid content yet");
        let state = state.next(Ok(file("team-a")));
        assert_eq!(state.in_force(), Some(Some(&file("team-a"))));
        assert_eq!(state.error(), None);
    }

    #[test]
    fn a_bad_read_after_a_good_one_keeps_the_good_one() {
        let state = FabricConfig::first(Ok(file("team-a")));
        let state = state.next(Err("typo".into()));
        assert_eq!(state.in_force(), Some(Some(&file("team-a"))));
        assert_eq!(state.error(), Some("typo"));
        let state = state.next(Err("other typo".into()));
        assert_eq!(state.in_force(), Some(Some(&file("team-a"))));
        let state = state.next(Ok(file("team-b")));
        assert_eq!(state.in_force(), Some(Some(&file("team-b"))));
    }

    #[test]
    fn without_a_file_there_is_nothing_to_follow() {
        let state = FabricConfig::NotConfigured.next(Err("x".into()));
        assert_eq!(state.in_force(), Some(None));
        assert_eq!(state.error(), None);
    }

    #[test]
    fn a_missing_or_bad_file_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fabric.yaml");
        let err = read(&path).unwrap_err().to_string();
        assert!(
            err.contains("fabric.yaml") && err.contains("No such file"),
            "{err}"
        );
        std::fs::write(&path, "nodes:\n  n:\n    tenant: Bad_Tenant\n").unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(
            err.contains("fabric.yaml") && err.contains("nodes.n.tenant") && err.contains("line 3"),
            "{err}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_edited_file_is_seen_at_the_next_poll() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fabric.yaml");
        std::fs::write(&path, "defaults: {tenant: Bad}\n").unwrap();
        let (_supervisor, tasks) = ainic_dra_daemon::Supervisor::new();
        let mut rx = follow(Some(path.clone()), Duration::from_secs(5), &tasks);
        assert_eq!(rx.borrow_and_update().in_force(), None);
        std::fs::write(&path, "defaults: {tenant: team-a}\n").unwrap();
        rx.changed().await.unwrap();
        assert_eq!(
            rx.borrow_and_update().in_force(),
            Some(Some(&file("team-a")))
        );
        std::fs::write(&path, "defaults: {tenant: [x]}\n").unwrap();
        rx.changed().await.unwrap();
        let state = rx.borrow_and_update().clone();
        assert_eq!(state.in_force(), Some(Some(&file("team-a"))));
        assert!(
            state.error().is_some_and(|e| e.contains("defaults")),
            "{state:?}"
        );
    }
}
