//! The live checkpoint: the in-memory copy every request reads, and durable
//! writes with group commit, so that many claims prepared at once share a
//! few fsyncs instead of one each.
//!
//! A change is visible in memory at once and reported done only after a
//! file containing it is on disk. If the write fails the change is undone
//! in memory, so memory never claims more than the disk.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{
    Checkpoint, CheckpointError, ExclusiveConflict, FILE_NAME, NetdevMove, PreparedClaim, encode,
    load, remove_stale_temps, write_durably,
};

/// Why [`CheckpointStore::insert_exclusive`] recorded nothing.
#[derive(Debug, thiserror::Error)]
pub enum InsertError {
    /// Another claim holds a device exclusively.
    #[error(transparent)]
    Conflict(#[from] ExclusiveConflict),
    /// The file could not be written.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
}

/// The checkpoint of one node agent.
#[derive(Debug)]
pub struct CheckpointStore {
    path: PathBuf,
    state: Mutex<Versioned>,
    /// Generation last written to disk; held while writing.
    written: tokio::sync::Mutex<u64>,
}

#[derive(Debug, Default)]
struct Versioned {
    checkpoint: Checkpoint,
    generation: u64,
}

impl CheckpointStore {
    /// Opens (and creates) `state_dir` and loads its checkpoint.
    pub fn open(state_dir: &Path) -> Result<Self, CheckpointError> {
        std::fs::create_dir_all(state_dir).map_err(|source| CheckpointError::Io {
            action: "create directory of",
            path: state_dir.to_path_buf(),
            source,
        })?;
        let path = state_dir.join(FILE_NAME);
        let checkpoint = load(&path)?;
        for stale in remove_stale_temps(&path)? {
            tracing::info!(file = %stale, "removed a checkpoint temp file left by a killed write");
        }
        Ok(Self {
            path,
            state: Mutex::new(Versioned {
                checkpoint,
                generation: 0,
            }),
            written: tokio::sync::Mutex::new(0),
        })
    }

    /// Path of the checkpoint file.
    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Versioned> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The prepared claim with this UID, if any.
    pub fn get(&self, uid: &str) -> Option<PreparedClaim> {
        self.lock().checkpoint.claims.get(uid).cloned()
    }

    /// How many claims are recorded.
    pub fn claim_count(&self) -> usize {
        self.lock().checkpoint.claims.len()
    }

    /// A copy of the whole checkpoint.
    pub fn snapshot(&self) -> Checkpoint {
        self.lock().checkpoint.clone()
    }

    /// Records `claim` as prepared and waits until that is on disk.
    pub async fn insert(&self, uid: &str, claim: PreparedClaim) -> Result<(), CheckpointError> {
        let generation = self.mutate(|c| {
            c.claims.insert(uid.to_string(), claim);
        });
        self.persist_insert(uid, generation).await
    }

    /// Records `claim` unless another prepared claim already holds one of
    /// its devices exclusively (checked and recorded under one lock, so
    /// two claims prepared at once cannot both pass), then waits until it
    /// is on disk.
    pub async fn insert_exclusive(
        &self,
        uid: &str,
        claim: PreparedClaim,
    ) -> Result<(), InsertError> {
        let mut conflict = None;
        let generation = self.mutate(|c| {
            conflict = c.exclusive_conflict(uid, &claim.devices);
            if conflict.is_none() {
                c.claims.insert(uid.to_string(), claim);
            }
        });
        if let Some(conflict) = conflict {
            return Err(InsertError::Conflict(conflict));
        }
        Ok(self.persist_insert(uid, generation).await?)
    }

    /// Waits until the insert of `uid` (generation `generation`) is on
    /// disk; if the write fails, takes it out of memory again.
    async fn persist_insert(&self, uid: &str, generation: u64) -> Result<(), CheckpointError> {
        let result = self.persist(generation).await;
        if result.is_err() {
            self.mutate(|c| {
                c.claims.remove(uid);
            });
        }
        result
    }

    /// Records that the spec of prepared claim `uid` now has `content`
    /// (rebuilt from today's devices) and waits until that is on disk; if
    /// the write fails the old content is put back. Nothing when the claim
    /// is not recorded.
    pub async fn update_spec(&self, uid: &str, content: String) -> Result<(), CheckpointError> {
        let mut old = None;
        let generation = self.mutate(|c| {
            if let Some(entry) = c.claims.get_mut(uid) {
                old = Some(std::mem::replace(&mut entry.cdi_spec, content));
            }
        });
        let Some(old) = old else {
            return Ok(());
        };
        let result = self.persist(generation).await;
        if result.is_err() {
            self.mutate(|c| {
                if let Some(entry) = c.claims.get_mut(uid) {
                    entry.cdi_spec = old;
                }
            });
        }
        result
    }

    /// Records the move `key` (or forgets it, with `None`) and waits until
    /// that is on disk; if the write fails the old entry is put back.
    pub async fn record_move(
        &self,
        key: &str,
        entry: Option<NetdevMove>,
    ) -> Result<(), CheckpointError> {
        let mut old = None;
        let generation = self.mutate(|c| {
            old = match entry {
                Some(entry) => c.moves.insert(key.to_string(), entry),
                None => c.moves.remove(key),
            };
        });
        let result = self.persist(generation).await;
        if result.is_err() {
            self.mutate(|c| match old {
                Some(old) => {
                    c.moves.insert(key.to_string(), old);
                }
                None => {
                    c.moves.remove(key);
                }
            });
        }
        result
    }

    /// Every recorded move, by key.
    pub fn moves(&self) -> std::collections::BTreeMap<String, NetdevMove> {
        self.lock().checkpoint.moves.clone()
    }

    /// Forgets the claim and waits until that is on disk; returns what was
    /// recorded.
    pub async fn remove(&self, uid: &str) -> Result<Option<PreparedClaim>, CheckpointError> {
        let mut removed = None;
        let generation = self.mutate(|c| removed = c.claims.remove(uid));
        if removed.is_none() {
            return Ok(None);
        }
        if let Err(e) = self.persist(generation).await {
            let claim = removed.clone().expect("checked above");
            self.mutate(|c| {
                c.claims.insert(uid.to_string(), claim);
            });
            return Err(e);
        }
        Ok(removed)
    }

    fn mutate(&self, change: impl FnOnce(&mut Checkpoint)) -> u64 {
        let mut state = self.lock();
        change(&mut state.checkpoint);
        state.generation += 1;
        state.generation
    }

    /// Makes sure a file with generation `generation` or later is on disk.
    /// Whoever holds the writer lock writes the newest state, which covers
    /// every change made before it, so waiting writers often find their
    /// change already written.
    async fn persist(&self, generation: u64) -> Result<(), CheckpointError> {
        let mut written = self.written.lock().await;
        if *written >= generation {
            return Ok(());
        }
        let (bytes, newest) = {
            let state = self.lock();
            (encode(&state.checkpoint), state.generation)
        };
        blocking(|| write_durably(&self.path, &bytes))?;
        *written = newest;
        Ok(())
    }
}

/// Runs the fsync-bound write on this worker thread, telling a
/// multi-thread runtime to move its other tasks elsewhere meanwhile: cheaper
/// than a hand-off to the blocking pool and back, which under CPU
/// contention costs more than the fsync itself.
fn blocking<T>(write: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(write),
        _ => write(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::checkpoint::PreparedDevice;
    use std::sync::Arc;

    fn claim(name: &str) -> PreparedClaim {
        PreparedClaim {
            namespace: "ns".into(),
            name: name.into(),
            devices: vec![PreparedDevice {
                admin_access: false,
                requests: vec!["nic".into()],
                pool: "node-a".into(),
                device: "pf-0000-0c-00-0".into(),
                share_id: None,
                cdi_ids: vec![format!("amd.com/ainic={name}")],
                identity: None,
                netdev: None,
            }],
            cdi_file: format!("{name}.json"),
            cdi_spec: "{}".into(),
            metadata_specs: Default::default(),
            metadata_files: Default::default(),
        }
    }

    #[tokio::test]
    async fn changes_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path()).unwrap();
        store.insert("a", claim("a")).await.unwrap();
        store.insert("b", claim("b")).await.unwrap();
        assert_eq!(store.remove("a").await.unwrap(), Some(claim("a")));
        assert_eq!(store.remove("a").await.unwrap(), None);
        let reopened = CheckpointStore::open(dir.path()).unwrap();
        assert_eq!(reopened.get("b"), Some(claim("b")));
        assert_eq!(reopened.snapshot().claims.len(), 1);
    }

    #[tokio::test]
    async fn concurrent_inserts_are_all_on_disk_when_they_return() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(CheckpointStore::open(dir.path()).unwrap());
        let tasks: Vec<_> = (0..50)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    store
                        .insert(&format!("c{i}"), claim(&format!("c{i}")))
                        .await
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let on_disk = load(store.path()).unwrap();
        assert_eq!(on_disk.claims.len(), 50);
    }

    #[tokio::test]
    async fn a_failed_write_leaves_memory_as_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path()).unwrap();
        // A file where the state directory was makes the write fail.
        std::fs::remove_dir_all(dir.path()).unwrap();
        std::fs::write(dir.path(), b"not a directory").unwrap();
        assert!(store.insert("a", claim("a")).await.is_err());
        assert_eq!(store.get("a"), None);
    }
}
