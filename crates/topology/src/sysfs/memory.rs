//! What a [`super::Sysfs`] remembers of the tree during one pass, bounded:
//! paths known to be real directories, and directory listings (least
//! recently used out).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::rc::Rc;

use super::backend::EntryKind;

/// Directory listings kept at once. Discovery reads one device at a time,
/// so a few dozen hold its working set while memory stays bounded on nodes
/// with thousands of functions.
const CACHED_LISTINGS: usize = 64;

/// Paths remembered as real directories before the memory is given back.
/// Discovery meets about six per function (the function, its class
/// directories), so this holds a node of a few thousand functions.
const CACHED_DIRS: usize = 16384;

/// The entries of one directory, by name.
pub(super) type Listing = HashMap<String, EntryKind, PathHash>;

/// A fast hash for the paths and names of one local tree (the default
/// SipHash guards against chosen keys, which a sysfs tree has no way to
/// send; it was a visible share of discovery).
pub(super) type PathHash = BuildHasherDefault<PathHasher>;

/// Multiply-rotate over 8-byte words, as in rustc's FxHash.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct PathHasher(u64);

impl Hasher for PathHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Real directories and listings met so far.
#[derive(Debug, Default)]
pub(super) struct Memory {
    listings: RefCell<HashMap<String, (Rc<Listing>, u64), PathHash>>,
    clock: Cell<u64>,
    known_dirs: RefCell<HashSet<String, PathHash>>,
}

impl Memory {
    /// True when `real` is known to be a real directory.
    pub(super) fn is_known_dir(&self, real: &str) -> bool {
        self.known_dirs.borrow().contains(real)
    }

    /// Remembers that `real` is a real directory.
    pub(super) fn remember_dir(&self, real: &str) {
        let mut known = self.known_dirs.borrow_mut();
        if known.len() >= CACHED_DIRS {
            known.clear();
        }
        known.insert(real.to_string());
    }

    /// The kind of `name` in the directory `parent`, when its listing is
    /// held: `Some(None)` means it is not there.
    pub(super) fn listed_kind(&self, parent: &str, name: &str) -> Option<Option<EntryKind>> {
        let listings = self.listings.borrow();
        let (listing, _) = listings.get(parent)?;
        Some(listing.get(name).copied())
    }

    /// The listing of the real directory `dir`, from `read` on first use.
    pub(super) fn listing(
        &self,
        dir: &str,
        read: impl FnOnce() -> io::Result<Vec<(String, EntryKind)>>,
    ) -> io::Result<Rc<Listing>> {
        let now = self.clock.get() + 1;
        self.clock.set(now);
        let mut cache = self.listings.borrow_mut();
        if let Some((listing, used)) = cache.get_mut(dir) {
            *used = now;
            return Ok(Rc::clone(listing));
        }
        let listing: Rc<Listing> = Rc::new(read()?.into_iter().collect());
        if cache.len() >= CACHED_LISTINGS {
            let oldest = cache
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                cache.remove(&oldest);
            }
        }
        cache.insert(dir.to_string(), (Rc::clone(&listing), now));
        Ok(listing)
    }
}
