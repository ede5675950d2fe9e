//! The live checkpoint: the in-memory copy every request reads, and durable
//! records in the journal ([`super::journal`]) with group commit, so that
//! many claims prepared at once share one append and one `fdatasync`.
//!
//! A change is visible in memory at once and reported done only after the
//! journal holds it. If the append fails the change is undone in memory,
//! so memory never claims more than the disk; the next write then
//! compacts instead of appending, so the journal never depends on an
//! append that failed halfway.

use std::path::Path;
use std::sync::Mutex;

use super::journal::{self, Journal, Record};
use super::{
    Checkpoint, CheckpointError, ExclusiveConflict, NetdevMove, PreparedClaim, remove_stale_temps,
};

/// Where the kernel says which boot this is.
pub const KERNEL_BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

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
    state: Mutex<Versioned>,
    /// The journal and the generation last made durable; held while
    /// writing.
    written: tokio::sync::Mutex<Written>,
    previous_boot: Option<String>,
}

#[derive(Debug, Default)]
struct Versioned {
    checkpoint: Checkpoint,
    generation: u64,
    /// Records of the changes not yet written, in generation order.
    pending: Vec<u8>,
    /// Bytes each live record takes in the journal, by claim UID or move
    /// key, and their sum: when to compact.
    sizes: std::collections::HashMap<String, u64>,
    live: u64,
}

#[derive(Debug)]
struct Written {
    journal: Journal,
    generation: u64,
    /// An append failed: the next write compacts.
    broken: bool,
}

impl CheckpointStore {
    /// Opens (and creates) `state_dir` and loads its checkpoint, in the
    /// boot the kernel names.
    pub fn open(state_dir: &Path) -> Result<Self, CheckpointError> {
        Self::open_in_boot(state_dir, &journal::boot_id(Path::new(KERNEL_BOOT_ID)))
    }

    /// Opens `state_dir` in boot `boot_id` (see [`Self::previous_boot`]).
    pub fn open_in_boot(state_dir: &Path, boot_id: &str) -> Result<Self, CheckpointError> {
        std::fs::create_dir_all(state_dir).map_err(|source| CheckpointError::Io {
            action: "create directory of",
            path: state_dir.to_path_buf(),
            source,
        })?;
        for file in [super::FILE_NAME, journal::FILE_NAME] {
            for stale in remove_stale_temps(&state_dir.join(file))? {
                tracing::info!(file = %stale, "removed a checkpoint temp file left by a killed write");
            }
        }
        let opened = Journal::open(state_dir, boot_id)?;
        if opened.torn_tail {
            tracing::warn!(dir = %state_dir.display(), "the checkpoint's last record was torn by a crash and dropped (its change was never reported done)");
        }
        let mut state = Versioned::default();
        for record in journal::records_of(&opened.checkpoint) {
            state.count(&record);
        }
        state.checkpoint = opened.checkpoint;
        Ok(Self {
            state: Mutex::new(state),
            written: tokio::sync::Mutex::new(Written {
                journal: opened.journal,
                generation: 0,
                broken: false,
            }),
            previous_boot: opened.previous_boot,
        })
    }

    /// The boot the checkpoint was written in when that was not this one:
    /// the node rebooted since (see [`journal`]).
    pub fn previous_boot(&self) -> Option<&str> {
        self.previous_boot.as_deref()
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
        let generation = self.change(put(uid, claim));
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
        let generation = {
            let mut state = self.lock();
            if let Some(conflict) = state.checkpoint.exclusive_conflict(uid, &claim.devices) {
                return Err(InsertError::Conflict(conflict));
            }
            Self::record(&mut state, put(uid, claim))
        };
        Ok(self.persist_insert(uid, generation).await?)
    }

    /// Waits until the insert of `uid` (generation `generation`) is on
    /// disk; if the write fails, takes it out of memory again.
    async fn persist_insert(&self, uid: &str, generation: u64) -> Result<(), CheckpointError> {
        let result = self.persist(generation).await;
        if result.is_err() {
            self.change(Record::Del(uid.to_string()));
        }
        result
    }

    /// Records the CDI spec content of a claim recorded without device
    /// identities (entries of older agents), as it was rebuilt.
    pub async fn update_spec(&self, uid: &str, content: String) -> Result<(), CheckpointError> {
        let Some(mut claim) = self.get(uid) else {
            return Ok(());
        };
        let old = std::mem::replace(&mut claim.cdi_spec, content);
        let generation = self.change(put(uid, claim.clone()));
        let result = self.persist(generation).await;
        if result.is_err() {
            claim.cdi_spec = old;
            self.change(put(uid, claim));
        }
        result
    }

    /// Records a netdev move (`Some`) or forgets it (`None`), waiting until
    /// that is on disk.
    pub async fn record_move(
        &self,
        key: &str,
        entry: Option<NetdevMove>,
    ) -> Result<(), CheckpointError> {
        let old = self.lock().checkpoint.moves.get(key).cloned();
        let change = |entry: Option<NetdevMove>| Record::Move {
            key: key.to_string(),
            entry: entry.map(Box::new),
        };
        let generation = self.change(change(entry));
        let result = self.persist(generation).await;
        if result.is_err() {
            self.change(change(old));
        }
        result
    }

    /// Every recorded netdev move.
    pub fn moves(&self) -> std::collections::BTreeMap<String, NetdevMove> {
        self.lock().checkpoint.moves.clone()
    }

    /// Forgets claim `uid`, waiting until that is on disk; what was
    /// recorded, or `None` when nothing was.
    pub async fn remove(&self, uid: &str) -> Result<Option<PreparedClaim>, CheckpointError> {
        let (removed, generation) = {
            let mut state = self.lock();
            let Some(removed) = state.checkpoint.claims.get(uid).cloned() else {
                return Ok(None);
            };
            (
                removed,
                Self::record(&mut state, Record::Del(uid.to_string())),
            )
        };
        if let Err(e) = self.persist(generation).await {
            self.change(put(uid, removed));
            return Err(e);
        }
        Ok(Some(removed))
    }

    /// Forgets every netdev move at once (a reboot voided them), waiting
    /// until that is on disk.
    pub async fn forget_moves(&self) -> Result<usize, CheckpointError> {
        let keys: Vec<String> = self.moves().into_keys().collect();
        let mut generation = 0;
        for key in &keys {
            generation = self.change(Record::Move {
                key: key.clone(),
                entry: None,
            });
        }
        if !keys.is_empty() {
            self.persist(generation).await?;
        }
        Ok(keys.len())
    }

    /// Applies `record` in memory and queues it; its generation.
    fn change(&self, record: Record) -> u64 {
        Self::record(&mut self.lock(), record)
    }

    fn record(state: &mut Versioned, record: Record) -> u64 {
        state.pending.extend(record.encode());
        state.count(&record);
        record.apply(&mut state.checkpoint);
        state.generation += 1;
        state.generation
    }

    /// Makes everything up to `generation` durable: one append of every
    /// queued record (group commit), or a compaction when the journal is
    /// mostly dead records or an append failed before.
    async fn persist(&self, generation: u64) -> Result<(), CheckpointError> {
        let mut written = self.written.lock().await;
        if written.generation >= generation {
            return Ok(());
        }
        let (records, newest, live) = {
            let mut state = self.lock();
            (
                std::mem::take(&mut state.pending),
                state.generation,
                state.live,
            )
        };
        let compact = written.broken
            || written.journal.worth_compacting(live)
            || crate::faults::compaction_armed();
        let result = if compact {
            let snapshot = self.snapshot();
            blocking(|| written.journal.compact(&snapshot))
        } else {
            blocking(|| written.journal.append(&records))
        };
        written.broken = result.is_err();
        result?;
        written.generation = newest;
        Ok(())
    }
}

fn put(uid: &str, claim: PreparedClaim) -> Record {
    Record::Put {
        uid: uid.to_string(),
        claim: Box::new(claim),
    }
}

impl Versioned {
    /// Keeps [`Versioned::live`] in step with `record`.
    fn count(&mut self, record: &Record) {
        let (key, size) = match record {
            Record::Put { uid, .. } => (format!("c/{uid}"), Some(record.encode().len() as u64)),
            Record::Del(uid) => (format!("c/{uid}"), None),
            Record::Move { key, entry } => (
                format!("m/{key}"),
                entry.as_ref().map(|_| record.encode().len() as u64),
            ),
        };
        let old = match size {
            Some(size) => self.sizes.insert(key, size),
            None => self.sizes.remove(&key),
        };
        self.live = self.live - old.unwrap_or(0) + size.unwrap_or(0);
    }
}

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
    use crate::checkpoint::PreparedDevice;
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
            metadata: Default::default(),
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
        let on_disk = super::super::read(dir.path()).unwrap();
        assert_eq!(on_disk.claims.len(), 50);
    }

    #[tokio::test]
    async fn a_failed_write_leaves_memory_as_the_disk() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path()).unwrap();
        store.insert("kept", claim("kept")).await.unwrap();
        store.written.lock().await.journal.fill_disk();
        assert!(store.insert("a", claim("a")).await.is_err());
        assert_eq!(store.get("a"), None);
        // The next write does not append after a failed append: it
        // compacts, and the file then holds exactly what memory does.
        store.insert("b", claim("b")).await.unwrap();
        assert_eq!(super::super::read(dir.path()).unwrap(), store.snapshot());
        assert_eq!(store.snapshot().claims.len(), 2);
    }
}
