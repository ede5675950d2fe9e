//! The rooted path resolver: links resolved by hand, never out of the root.

use std::collections::VecDeque;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use super::backend::{Backend, DirBackend, EntryKind};
use super::error::FsError;
use super::memory::{Listing, Memory};

/// The longest chain of symlinks followed for one path; more means a loop.
pub const MAX_LINK_HOPS: usize = 40;

/// A sysfs tree reached through a [`Backend`], never leaving its root.
///
/// What it learns is cached, bounded: paths known to be real directories,
/// and the listings of directories it enumerated (least recently used out),
/// so that walking a path costs no syscall per component once it is known.
/// One `Sysfs` should serve one discovery pass.
#[derive(Debug)]
pub struct Sysfs<B> {
    backend: B,
    /// The root as an absolute path, to map absolute link targets inside it.
    root_abs: Option<PathBuf>,
    memory: Memory,
}

impl Sysfs<DirBackend> {
    /// The tree below the directory `root`.
    pub fn open(root: &Path) -> Self {
        let root_abs = std::fs::canonicalize(root).ok();
        Sysfs {
            backend: DirBackend::new(root),
            root_abs,
            memory: Memory::default(),
        }
    }
}

impl<B: Backend> Sysfs<B> {
    /// The tree behind `backend`; absolute link targets are all refused.
    pub fn new(backend: B) -> Self {
        Sysfs {
            backend,
            root_abs: None,
            memory: Memory::default(),
        }
    }

    /// `path` with every symlink resolved, relative to the root, and what it is.
    pub fn resolve(&self, path: &str) -> Result<(String, EntryKind), FsError> {
        let mut pending: VecDeque<String> = components(path).collect();
        let mut here = String::new();
        let mut hops = 0;
        let mut kind = EntryKind::Dir;
        let mut spliced = false;
        while let Some(comp) = pending.pop_front() {
            if kind != EntryKind::Dir {
                return Err(FsError::WrongKind {
                    path: path.into(),
                    expected: "directory",
                });
            }
            if comp == ".." {
                if here.is_empty() {
                    return Err(FsError::Escapes {
                        path: path.into(),
                        target: "..".into(),
                    });
                }
                here.truncate(here.rfind('/').unwrap_or(0));
                continue;
            }
            let parent_len = here.len();
            if !here.is_empty() {
                here.push('/');
            }
            here.push_str(&comp);
            // The last entry of the path asked for is most often a link
            // (a `bus/pci/devices` entry, `physfn`, a class entry).
            let expect_link = !spliced && pending.is_empty();
            let (found, target) = self.entry(&here, path, expect_link)?;
            kind = found;
            if kind == EntryKind::Symlink {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err(FsError::Loop { path: path.into() });
                }
                let target = match target {
                    Some(target) => target,
                    None => self.backend.read_link(&here).map_err(|e| io_err(path, e))?,
                };
                here.truncate(parent_len);
                let target_rel = self.splice_target(&target, &mut here, path)?;
                for c in components(&target_rel).rev() {
                    pending.push_front(c);
                }
                spliced = true;
                kind = EntryKind::Dir;
            }
        }
        Ok((here, kind))
    }

    /// The kind of the entry `real`, and its target when it is a link and
    /// `expect_link` had it read first (one `readlink` instead of an
    /// `lstat` and a `readlink`).
    fn entry(
        &self,
        real: &str,
        asked: &str,
        expect_link: bool,
    ) -> Result<(EntryKind, Option<PathBuf>), FsError> {
        if let Some(kind) = self.cached_kind(real, asked)? {
            return Ok((kind, None));
        }
        if expect_link {
            match self.backend.read_link(real) {
                Ok(target) => return Ok((EntryKind::Symlink, Some(target))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(FsError::NotFound { path: asked.into() });
                }
                // Not a link (or unreadable): `lstat` says what it is.
                Err(_) => {}
            }
        }
        Ok((self.stat_kind(real, asked)?, None))
    }

    /// The content of the regular file at `path`.
    ///
    /// Tried first through the backend's kernel-checked path (see
    /// [`Sysfs::read_in`]); else the directory part is resolved (from
    /// cached listings), then the file is opened without following a link,
    /// and only a link in last place takes the slow path through
    /// [`Sysfs::resolve`].
    pub fn read(&self, path: &str) -> Result<String, FsError> {
        self.read_in("", path)
    }

    /// The content of the regular file `file` below the directory `dir`:
    /// [`Sysfs::read`] of `dir/file`, faster when `dir` is read often.
    ///
    /// The backend's kernel-checked path is tried first
    /// ([`Backend::read_beneath`]); whatever it cannot open (a missing
    /// file, a link out of the root) is walked here, with the same result
    /// and errors as ever.
    pub fn read_in(&self, dir: &str, file: &str) -> Result<String, FsError> {
        if let Some(text) = self.backend.read_beneath(dir, file) {
            return Ok(text);
        }
        self.read_careful(&join(dir, file))
    }

    /// [`Sysfs::read`] with every link resolved here.
    fn read_careful(&self, path: &str) -> Result<String, FsError> {
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        if !matches!(name, "" | "." | "..") {
            let real_parent = self.resolve_dir(parent, path)?;
            let real = join(&real_parent, name);
            match self.backend.read_file(&real) {
                Ok(Some(text)) => return Ok(text),
                Ok(None) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(FsError::NotFound { path: path.into() });
                }
                Err(e) if e.kind() == io::ErrorKind::IsADirectory => {
                    return Err(FsError::WrongKind {
                        path: path.into(),
                        expected: "regular file",
                    });
                }
                Err(e) => return Err(io_err(path, e)),
            }
        }
        let (real, kind) = self.resolve(path)?;
        let wrong = || FsError::WrongKind {
            path: path.into(),
            expected: "regular file",
        };
        if kind != EntryKind::File {
            return Err(wrong());
        }
        self.backend
            .read_file(&real)
            .map_err(|e| io_err(path, e))?
            .ok_or_else(wrong)
    }

    fn resolve_dir(&self, dir: &str, asked: &str) -> Result<String, FsError> {
        match self.resolve(dir)? {
            (real, EntryKind::Dir) => Ok(real),
            _ => Err(FsError::WrongKind {
                path: asked.into(),
                expected: "file in a directory",
            }),
        }
    }

    /// The entries of the directory at `path`, sorted by name.
    ///
    /// The directory is opened without following a link in last place, so
    /// a real directory needs no `lstat` first; anything else is resolved.
    pub fn list(&self, path: &str) -> Result<Vec<(String, EntryKind)>, FsError> {
        let listing = match self.listing_in_place(path) {
            Some(listing) => listing,
            None => {
                let real = self.resolve_dir(path, path)?;
                self.listing(&real).map_err(|e| io_err(path, e))?
            }
        };
        let mut entries: Vec<(String, EntryKind)> =
            listing.iter().map(|(n, k)| (n.clone(), *k)).collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(entries)
    }

    /// The listing of `path` when its last entry is a real directory.
    fn listing_in_place(&self, path: &str) -> Option<Rc<Listing>> {
        let (parent, name) = path.rsplit_once('/')?;
        if matches!(name, "" | "." | "..") {
            return None;
        }
        match self.resolve(parent) {
            Ok((real_parent, EntryKind::Dir)) => self.listing(&join(&real_parent, name)).ok(),
            _ => None,
        }
    }

    /// The last component of the target of the link at `path`, without
    /// following it (e.g. the driver name from a `driver` link).
    pub fn link_name(&self, path: &str) -> Result<String, FsError> {
        self.link_target(path)?
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .ok_or_else(|| FsError::WrongKind {
                path: path.into(),
                expected: "symlink to a named entry",
            })
    }

    /// The target text of the link at `path`, not followed (its directory
    /// is resolved first).
    pub fn link_target(&self, path: &str) -> Result<PathBuf, FsError> {
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        let (real_parent, _) = self.resolve(parent)?;
        let real = join(&real_parent, name);
        let (kind, target) = self.entry(&real, path, true)?;
        if kind != EntryKind::Symlink {
            return Err(FsError::WrongKind {
                path: path.into(),
                expected: "symlink",
            });
        }
        match target {
            Some(target) => Ok(target),
            None => self.backend.read_link(&real).map_err(|e| io_err(path, e)),
        }
    }

    /// True when an entry (of any kind, links not followed) exists at `path`.
    pub fn exists(&self, path: &str) -> bool {
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        match self.resolve(parent) {
            Ok((real_parent, EntryKind::Dir)) => self.kind(&join(&real_parent, name), path).is_ok(),
            _ => false,
        }
    }

    /// The kind of `real`: from memory when known, else one `lstat` (a
    /// listing is read only by [`Sysfs::list`], where it pays for itself).
    fn kind(&self, real: &str, asked: &str) -> Result<EntryKind, FsError> {
        match self.cached_kind(real, asked)? {
            Some(kind) => Ok(kind),
            None => self.stat_kind(real, asked),
        }
    }

    /// The kind of `real` if memory knows it (a known directory, or an
    /// entry of a cached listing, where absence is final).
    fn cached_kind(&self, real: &str, asked: &str) -> Result<Option<EntryKind>, FsError> {
        if real.is_empty() || self.memory.is_known_dir(real) {
            return Ok(Some(EntryKind::Dir));
        }
        let (parent, name) = real.rsplit_once('/').unwrap_or(("", real));
        match self.memory.listed_kind(parent, name) {
            Some(Some(kind)) => Ok(Some(kind)),
            Some(None) => Err(FsError::NotFound { path: asked.into() }),
            None => Ok(None),
        }
    }

    /// One `lstat` of `real`; a directory is remembered.
    fn stat_kind(&self, real: &str, asked: &str) -> Result<EntryKind, FsError> {
        let kind = self.backend.kind(real).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                FsError::NotFound { path: asked.into() }
            } else {
                io_err(asked, e)
            }
        })?;
        if kind == EntryKind::Dir {
            self.memory.remember_dir(real);
        }
        Ok(kind)
    }

    /// The cached listing of the real directory `dir`, read on first use.
    fn listing(&self, dir: &str) -> io::Result<Rc<Listing>> {
        self.memory.listing(dir, || self.backend.list(dir))
    }

    /// Turns a link target into components to walk from `resolved` (the
    /// link's directory); absolute targets restart from the root when they
    /// point inside it.
    fn splice_target(
        &self,
        target: &Path,
        resolved: &mut String,
        asked: &str,
    ) -> Result<String, FsError> {
        let escapes = || FsError::Escapes {
            path: asked.into(),
            target: target.to_path_buf(),
        };
        if !target.is_absolute() {
            return target.to_str().map(str::to_string).ok_or_else(escapes);
        }
        let root = self.root_abs.as_deref().ok_or_else(escapes)?;
        let inside = target.strip_prefix(root).map_err(|_| escapes())?;
        if inside
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            return Err(escapes());
        }
        resolved.clear();
        inside.to_str().map(str::to_string).ok_or_else(escapes)
    }
}

fn components(path: &str) -> impl DoubleEndedIterator<Item = String> + '_ {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_string)
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

fn io_err(path: &str, source: io::Error) -> FsError {
    FsError::Io {
        path: path.into(),
        source,
    }
}
