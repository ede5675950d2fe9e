//! The checkpoint on disk, format v2: an append-only journal, so that
//! recording one claim's change costs one small append and one
//! `fdatasync` however many claims are prepared (format v1 rewrote the
//! whole file at every change: 0.75 MB and growing with 100 claims).
//!
//! ```text
//! ainic-dra-checkpoint v2 boot=<boot id>
//! <fnv1a64 of the JSON, 16 hex> {"put":{"uid":"…","claim":{…}}}
//! <fnv1a64> {"del":"<uid>"}
//! <fnv1a64> {"move":{"key":"<uid>/<device>","entry":{…}|null}}
//! ```
//!
//! Replaying the records in order gives the checkpoint. A crash in the
//! middle of an append leaves a torn last line: it is dropped (and cut
//! off) at the next open, which is right, since its change was never
//! reported done. A bad line anywhere else is corruption and refused.
//! When the file is more than twice what the live records need it is
//! compacted: the live records are written to a temp file, fsynced and
//! renamed over it, and the directory fsynced (a rename is durable only
//! with its directory).
//!
//! The header records the boot the file was written in (the kernel's boot
//! ID): what a reboot voids (netdevs in pod namespaces, CDI specs on
//! tmpfs, device numbers) must not be trusted from a checkpoint of
//! another boot. A v1 checkpoint (`checkpoint.json`) is read and migrated;
//! a format newer than v2 is refused, never guessed at.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Checkpoint, CheckpointError, NetdevMove, PreparedClaim, fnv1a64};
use crate::faults::{self, Point};

/// The journal's file name inside `--state-dir`.
pub const FILE_NAME: &str = "checkpoint.journal";
/// The format this binary writes.
pub const VERSION: u32 = 2;
const MAGIC: &str = "ainic-dra-checkpoint";
/// Compaction waits until the dead records are worth at least this much.
const COMPACT_SLACK: u64 = 64 * 1024;

/// One change, as written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Record {
    /// Claim `uid` is prepared as `claim`.
    Put {
        /// The claim's UID.
        uid: String,
        /// What was prepared.
        claim: Box<PreparedClaim>,
    },
    /// Claim `uid` is no longer prepared.
    Del(String),
    /// A netdev move was recorded (`Some`) or forgotten (`None`).
    Move {
        /// [`super::move_key`].
        key: String,
        /// The move.
        entry: Option<Box<NetdevMove>>,
    },
}

impl Record {
    /// Applies the change to `checkpoint`.
    pub fn apply(self, checkpoint: &mut Checkpoint) {
        match self {
            Record::Put { uid, claim } => {
                checkpoint.claims.insert(uid, *claim);
            }
            Record::Del(uid) => {
                checkpoint.claims.remove(&uid);
            }
            Record::Move {
                key,
                entry: Some(entry),
            } => {
                checkpoint.moves.insert(key, *entry);
            }
            Record::Move { key, entry: None } => {
                checkpoint.moves.remove(&key);
            }
        }
    }

    /// The record as one line of the journal.
    pub fn encode(&self) -> Vec<u8> {
        let json = serde_json::to_vec(self).expect("records serialise");
        let mut line = format!("{:016x} ", fnv1a64(&json)).into_bytes();
        line.extend_from_slice(&json);
        line.push(b'\n');
        line
    }
}

/// The records that make `checkpoint`, in a stable order.
pub fn records_of(checkpoint: &Checkpoint) -> impl Iterator<Item = Record> + '_ {
    let claims = checkpoint.claims.iter().map(|(uid, claim)| Record::Put {
        uid: uid.clone(),
        claim: Box::new(claim.clone()),
    });
    let moves = checkpoint.moves.iter().map(|(key, entry)| Record::Move {
        key: key.clone(),
        entry: Some(Box::new(entry.clone())),
    });
    claims.chain(moves)
}

/// The open journal, appended to by the store.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    /// Bytes of whole records in the file; a failed append is cut back
    /// to this.
    len: u64,
    boot_id: String,
}

/// What [`Journal::open`] found.
#[derive(Debug)]
pub struct Opened {
    /// The journal, ready for appends.
    pub journal: Journal,
    /// The checkpoint its records make.
    pub checkpoint: Checkpoint,
    /// The boot the checkpoint was written in, when it is not this one.
    /// A v1 checkpoint did not record its boot: it is taken as this one's
    /// (an agent upgraded in place), never as a reboot that would void its
    /// netdev moves.
    pub previous_boot: Option<String>,
    /// A torn last record was cut off (a crash during an append).
    pub torn_tail: bool,
}

impl Journal {
    /// Opens the journal in `state_dir` for boot `boot_id`: replays it, or
    /// migrates a v1 checkpoint, or starts an empty one. A journal of
    /// another boot is compacted at once, so it names this boot from now
    /// on (the caller decides what the reboot voids).
    pub fn open(state_dir: &Path, boot_id: &str) -> Result<Opened, CheckpointError> {
        let path = state_dir.join(FILE_NAME);
        let v1 = state_dir.join(super::FILE_NAME);
        let (checkpoint, previous, torn, len) = match read(&path)? {
            Some(found) => {
                if v1.exists() {
                    // A migration finished writing the journal, then died.
                    remove(&v1)?;
                }
                found
            }
            None => match v1_checkpoint(&v1)? {
                Some(checkpoint) => (checkpoint, None, false, 0),
                None => (Checkpoint::default(), None, false, 0),
            },
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io("open", &path))?;
        let mut journal = Journal {
            path,
            file,
            len,
            boot_id: boot_id.to_string(),
        };
        let rebooted = previous.as_deref().is_some_and(|p| p != boot_id);
        if len == 0 && checkpoint == Checkpoint::default() {
            journal.start_empty()?;
        } else if len == 0 || torn || rebooted {
            journal.compact(&checkpoint)?;
        }
        if v1.exists() {
            remove(&v1)?;
        }
        Ok(Opened {
            journal,
            checkpoint,
            previous_boot: previous.filter(|_| rebooted),
            torn_tail: torn,
        })
    }

    /// Appends `records` (encoded lines) and makes them durable. On
    /// failure the file is cut back to its last whole record, so a later
    /// append never follows half a line.
    pub fn append(&mut self, records: &[u8]) -> Result<(), CheckpointError> {
        let written = self
            .file
            .write_all(records)
            .map_err(io("append to", &self.path))
            .and_then(|()| {
                faults::hit(Point::JournalWritten);
                self.file.sync_data().map_err(io("fsync", &self.path))
            });
        if let Err(e) = written {
            let _ = self.file.set_len(self.len);
            return Err(e);
        }
        faults::hit(Point::JournalSynced);
        self.len += records.len() as u64;
        Ok(())
    }

    /// Whether the file carries enough dead records to compact, given the
    /// live records' size.
    pub fn worth_compacting(&self, live: u64) -> bool {
        self.len > 2 * live + COMPACT_SLACK
    }

    /// Bytes of the file.
    pub fn bytes(&self) -> u64 {
        self.len
    }

    /// Makes every later append fail with ENOSPC (a full disk), for tests.
    #[cfg(test)]
    pub fn fill_disk(&mut self) {
        self.file = OpenOptions::new().write(true).open("/dev/full").unwrap();
    }

    /// Writes the header of a journal that has no records yet (a new state
    /// directory): nothing to lose, so no temp file.
    fn start_empty(&mut self) -> Result<(), CheckpointError> {
        let header = format!("{MAGIC} v{VERSION} boot={}\n", self.boot_id);
        self.file.set_len(0).map_err(io("truncate", &self.path))?;
        self.file
            .write_all(header.as_bytes())
            .and_then(|()| self.file.sync_all())
            .map_err(io("write", &self.path))?;
        self.len = header.len() as u64;
        Ok(())
    }

    /// Rewrites the journal as the records of `checkpoint`: temp file,
    /// fsync, rename, fsync of the directory.
    pub fn compact(&mut self, checkpoint: &Checkpoint) -> Result<(), CheckpointError> {
        let mut bytes = format!("{MAGIC} v{VERSION} boot={}\n", self.boot_id).into_bytes();
        for record in records_of(checkpoint) {
            bytes.extend(record.encode());
        }
        super::write_durably(&self.path, &bytes)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io("fsync directory of", &self.path))?;
        }
        self.file = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(io("open", &self.path))?;
        self.len = bytes.len() as u64;
        Ok(())
    }
}

/// The checkpoint in `state_dir` as the journal (or a v1 checkpoint)
/// says, without changing anything: for tools and tests.
pub fn read_only(state_dir: &Path) -> Result<Checkpoint, CheckpointError> {
    if let Some((checkpoint, ..)) = read(&state_dir.join(FILE_NAME))? {
        return Ok(checkpoint);
    }
    Ok(v1_checkpoint(&state_dir.join(super::FILE_NAME))?.unwrap_or_default())
}

/// The v1 checkpoint at `path`, if there is one.
fn v1_checkpoint(path: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
    if !path.exists() {
        return Ok(None);
    }
    super::load(path).map(Some)
}

/// What a journal file holds: the checkpoint, its boot, whether its last
/// record is torn, and the length of its whole records.
type Replayed = (Checkpoint, Option<String>, bool, u64);

/// Replays the journal at `path`; `None` when there is no journal.
fn read(path: &Path) -> Result<Option<Replayed>, CheckpointError> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => f.read_to_end(&mut bytes).map_err(io("read", path))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io("open", path)(source)),
    };
    let corrupt = |reason: String| CheckpointError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let Some(header_end) = bytes.iter().position(|b| *b == b'\n') else {
        // Died before the header was whole: nothing was ever recorded.
        return Ok(None);
    };
    let boot = parse_header(&bytes[..header_end]).map_err(corrupt)?;
    let mut checkpoint = Checkpoint::default();
    let mut at = header_end + 1;
    let mut torn = false;
    while at < bytes.len() {
        let Some(end) = bytes[at..].iter().position(|b| *b == b'\n').map(|i| at + i) else {
            // The last line, cut short: a crash mid-append.
            torn = true;
            break;
        };
        match parse_record(&bytes[at..end]) {
            Ok(record) => {
                record.apply(&mut checkpoint);
                at = end + 1;
            }
            // The last line, half-written: a crash mid-append.
            Err(_) if end + 1 == bytes.len() => {
                torn = true;
                break;
            }
            Err(reason) => return Err(corrupt(format!("record at byte {at}: {reason}"))),
        }
    }
    // A torn tail is cut off by the compaction `open` does.
    Ok(Some((checkpoint, Some(boot), torn, at as u64)))
}

/// The boot ID of a v2 header; an error for anything else.
fn parse_header(line: &[u8]) -> Result<String, String> {
    let text = std::str::from_utf8(line).map_err(|_| "header is not text".to_string())?;
    let mut words = text.split(' ');
    if words.next() != Some(MAGIC) {
        return Err(format!("unknown header {text:?}"));
    }
    let version = words.next().unwrap_or_default();
    let number: u32 = version
        .strip_prefix('v')
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("unknown version {version:?}"))?;
    if number > VERSION {
        return Err(format!(
            "format v{number} was written by a newer agent; this agent reads v1 and v{VERSION}: \
             run the newer agent, or move the state directory aside (its claims are then \
             prepared again when the kubelet asks)"
        ));
    }
    if number != VERSION {
        return Err(format!("unsupported version {version:?} in a journal"));
    }
    words
        .next()
        .and_then(|w| w.strip_prefix("boot="))
        .map(str::to_string)
        .ok_or_else(|| "no boot ID in header".to_string())
}

fn parse_record(line: &[u8]) -> Result<Record, String> {
    let text = std::str::from_utf8(line).map_err(|_| "not text".to_string())?;
    let (sum, json) = text.split_once(' ').ok_or("no checksum")?;
    let sum = u64::from_str_radix(sum, 16).map_err(|_| format!("bad checksum {sum:?}"))?;
    if sum != fnv1a64(json.as_bytes()) {
        return Err("checksum mismatch".into());
    }
    serde_json::from_str(json).map_err(|e| format!("invalid record: {e}"))
}

fn remove(path: &Path) -> Result<(), CheckpointError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(io("remove", path)(source)),
    }
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError {
    let path = path.to_path_buf();
    move |source| CheckpointError::Io {
        action,
        path,
        source,
    }
}

/// This boot's ID, read from `source` (the kernel's
/// `/proc/sys/kernel/random/boot_id`, or what `--boot-id-file` names);
/// empty when it cannot be read, which makes every start look like a
/// reboot: safe, since what a reboot voids is only rebuilt.
pub fn boot_id(source: &Path) -> String {
    match fs::read_to_string(source) {
        Ok(text) => text.trim().to_string(),
        Err(error) => {
            tracing::warn!(file = %source.display(), %error, "cannot read the boot ID; treating this start as a reboot");
            String::new()
        }
    }
}

#[cfg(test)]
#[path = "journal_tests.rs"]
mod tests;
