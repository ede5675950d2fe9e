//! One node agent per state directory. Two agents on one `--state-dir`
//! (a second DaemonSet, a copy started by hand, a new pod of a rolling
//! update beside the old one) would each load the checkpoint, overwrite
//! the other's writes, replace each other's kubelet sockets and prepare
//! the same devices twice. The agent takes an exclusive `flock` on
//! `<state dir>/agent.lock` before it reads the checkpoint or binds a
//! socket, and holds it for its whole life; the kernel drops it when the
//! process ends, however it ends (SIGKILL included), so a stale lock
//! cannot outlive its holder. The holder writes its PID into the file,
//! so a refused agent can name it.
//!
//! [`acquire`] either fails at once when another agent holds the lock
//! (`wait` zero, the default) or waits up to `wait` for it to be released:
//! the mode a new pod of a rolling update with surge can use to start
//! while the old pod finishes, taking over once the old one exits.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{FlockOperation, flock};

/// The lock file's name inside the state directory.
pub(crate) const FILE_NAME: &str = "agent.lock";
/// The longest pause between tries while waiting.
const POLL_MAX: Duration = Duration::from_millis(500);

/// The held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub(crate) struct StateLock {
    _file: File,
    path: PathBuf,
}

impl StateLock {
    /// The lock file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// Why the state directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another agent holds the lock.
    #[error(
        "state directory {dir} is in use by another ainic-dra node agent ({holder}){waited}: two agents on one node would overwrite each other's checkpoint and kubelet sockets; stop the other one, or give this one its own --state-dir"
    )]
    Held {
        /// The state directory.
        dir: PathBuf,
        /// Who holds it, as its lock file says (`pid 1234`), or that it
        /// is not known.
        holder: String,
        /// How long this agent waited, for the message (empty: it did
        /// not).
        waited: String,
    },
    /// The lock file could not be opened or locked.
    #[error("failed to {action} the state directory lock {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The lock file.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
}

/// The result of one try: the lock, or the holder it names.
enum Tried {
    Locked(StateLock),
    Held(String),
}

/// Locks `dir` (creating it), trying again until `wait` has passed while
/// another agent holds it.
pub(crate) async fn acquire(dir: &Path, wait: Duration) -> Result<StateLock, LockError> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut pause = Duration::from_millis(10);
    let mut announced = false;
    loop {
        let holder = match try_lock(dir)? {
            Tried::Locked(lock) => return Ok(lock),
            Tried::Held(holder) => holder,
        };
        let now = tokio::time::Instant::now();
        if now >= deadline {
            let waited = if wait.is_zero() {
                String::new()
            } else {
                format!(" after waiting {wait:?}")
            };
            return Err(LockError::Held {
                dir: dir.to_path_buf(),
                holder,
                waited,
            });
        }
        if !announced {
            tracing::info!(dir = %dir.display(), %holder, ?wait, "state directory locked by another agent; waiting for it to exit");
            announced = true;
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(POLL_MAX);
    }
}

fn try_lock(dir: &Path) -> Result<Tried, LockError> {
    let path = dir.join(FILE_NAME);
    let io = |action: &'static str| {
        let path = path.clone();
        move |source| LockError::Io {
            action,
            path,
            source,
        }
    };
    std::fs::create_dir_all(dir).map_err(io("create the directory of"))?;
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io("open"))?;
    match flock(&file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Ok(Tried::Held(holder_of(&mut file))),
        Err(errno) => return Err(io("lock")(errno.into())),
    }
    // Ours: say who holds it.
    file.set_len(0).map_err(io("truncate"))?;
    file.rewind().map_err(io("rewind"))?;
    writeln!(file, "pid {}", std::process::id()).map_err(io("write"))?;
    Ok(Tried::Locked(StateLock { _file: file, path }))
}

/// What the holder wrote into the lock file: `pid N` (in the holder's
/// own PID namespace: another container's PIDs differ from ours).
fn holder_of(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    match text.lines().next().map(str::trim) {
        Some(line) if line.starts_with("pid ") => line.to_string(),
        _ => "holder unknown".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_lock_is_refused_with_the_holders_pid_and_the_dir() {
        let dir = tempfile::tempdir().unwrap();
        let held = acquire(dir.path(), Duration::ZERO).await.unwrap();
        // flock locks belong to an open file: a second open in this
        // process conflicts as another process's would.
        let error = acquire(dir.path(), Duration::ZERO).await.unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains(&dir.path().display().to_string()),
            "{message}"
        );
        assert!(
            message.contains(&format!("pid {}", std::process::id())),
            "{message}"
        );
        drop(held);
        acquire(dir.path(), Duration::ZERO).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_agent_takes_the_lock_once_the_holder_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let held = acquire(dir.path(), Duration::ZERO).await.unwrap();
        let timed_out = acquire(dir.path(), Duration::from_secs(2)).await;
        let message = timed_out.unwrap_err().to_string();
        assert!(message.contains("after waiting 2s"), "{message}");
        let path = dir.path().to_path_buf();
        let waiting =
            tokio::spawn(async move { acquire(&path, Duration::from_secs(60)).await.is_ok() });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!waiting.is_finished(), "waits while the lock is held");
        drop(held);
        assert!(waiting.await.unwrap(), "takes it once released");
    }
}
