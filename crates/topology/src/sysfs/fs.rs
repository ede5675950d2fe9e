//! The rooted path resolver: links resolved by hand, never out of the root.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use super::backend::{Backend, DirBackend, EntryKind};

/// The longest chain of symlinks followed for one path; more means a loop.
pub const MAX_LINK_HOPS: usize = 40;

/// Directory listings kept at once. Discovery reads one device at a time,
/// so a few dozen hold its working set while memory stays bounded on nodes
/// with thousands of functions.
const CACHED_LISTINGS: usize = 64;

/// Paths remembered as real directories before the memory is given back.
const CACHED_DIRS: usize = 8192;

/// Why a path inside the sysfs tree could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// Some component of the path does not exist (a dangling link included).
    #[error("{path} does not exist")]
    NotFound {
        /// The path as asked for, relative to the root.
        path: String,
    },
    /// A symlink on the way points above the root or to an absolute path
    /// outside it.
    #[error("{path} leads out of the sysfs root (via link target {target:?})")]
    Escapes {
        /// The path as asked for.
        path: String,
        /// The offending link target.
        target: PathBuf,
    },
    /// More than [`MAX_LINK_HOPS`] links on the way: a loop.
    #[error("{path} goes through more than {MAX_LINK_HOPS} symlinks (a loop)")]
    Loop {
        /// The path as asked for.
        path: String,
    },
    /// The path resolves to something of the wrong kind.
    #[error("{path} is not a {expected}")]
    WrongKind {
        /// The path as asked for.
        path: String,
        /// What was expected (`directory`, `regular file`).
        expected: &'static str,
    },
    /// The backend failed for another reason.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path as asked for.
        path: String,
        /// The underlying error.
        source: io::Error,
    },
}

impl FsError {
    /// True when the path (or the link it goes through) does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, FsError::NotFound { .. })
    }
}

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
    listings: RefCell<HashMap<String, (Rc<Listing>, u64)>>,
    clock: Cell<u64>,
    known_dirs: RefCell<HashSet<String>>,
}

/// The entries of one directory, by name.
type Listing = HashMap<String, EntryKind>;

impl Sysfs<DirBackend> {
    /// The tree below the directory `root`.
    pub fn open(root: &Path) -> Self {
        let root_abs = std::fs::canonicalize(root).ok();
        Sysfs {
            backend: DirBackend::new(root),
            root_abs,
            listings: RefCell::default(),
            clock: Cell::new(0),
            known_dirs: RefCell::default(),
        }
    }
}

impl<B: Backend> Sysfs<B> {
    /// The tree behind `backend`; absolute link targets are all refused.
    pub fn new(backend: B) -> Self {
        Sysfs {
            backend,
            root_abs: None,
            listings: RefCell::default(),
            clock: Cell::new(0),
            known_dirs: RefCell::default(),
        }
    }

    /// `path` with every symlink resolved, relative to the root, and what it is.
    pub fn resolve(&self, path: &str) -> Result<(String, EntryKind), FsError> {
        let mut pending: VecDeque<String> = components(path).collect();
        let mut resolved: Vec<String> = Vec::new();
        let mut hops = 0;
        let mut kind = EntryKind::Dir;
        while let Some(comp) = pending.pop_front() {
            if kind != EntryKind::Dir {
                return Err(FsError::WrongKind {
                    path: path.into(),
                    expected: "directory",
                });
            }
            if comp == ".." {
                if resolved.pop().is_none() {
                    return Err(FsError::Escapes {
                        path: path.into(),
                        target: "..".into(),
                    });
                }
                continue;
            }
            resolved.push(comp);
            let here = resolved.join("/");
            kind = self.kind(&here, path)?;
            if kind == EntryKind::Symlink {
                hops += 1;
                if hops > MAX_LINK_HOPS {
                    return Err(FsError::Loop { path: path.into() });
                }
                resolved.pop();
                let target = self.backend.read_link(&here).map_err(|e| io_err(path, e))?;
                let target_rel = self.splice_target(&target, &mut resolved, path)?;
                for c in components(&target_rel).rev() {
                    pending.push_front(c);
                }
                kind = EntryKind::Dir;
            }
        }
        Ok((resolved.join("/"), kind))
    }

    /// The content of the regular file at `path`.
    ///
    /// The directory part is resolved (from cached listings), then the file
    /// is opened without following a link; only a link in last place takes
    /// the slow path through [`Sysfs::resolve`].
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
    pub fn list(&self, path: &str) -> Result<Vec<(String, EntryKind)>, FsError> {
        let real = self.resolve_dir(path, path)?;
        let listing = self.listing(&real).map_err(|e| io_err(path, e))?;
        let mut entries: Vec<(String, EntryKind)> =
            listing.iter().map(|(n, k)| (n.clone(), *k)).collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(entries)
    }

    /// The last component of the target of the link at `path`, without
    /// following it (e.g. the driver name from a `driver` link).
    pub fn link_name(&self, path: &str) -> Result<String, FsError> {
        let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
        let (real_parent, _) = self.resolve(parent)?;
        let real = join(&real_parent, name);
        match self.kind(&real, path)? {
            EntryKind::Symlink => {}
            _ => {
                return Err(FsError::WrongKind {
                    path: path.into(),
                    expected: "symlink",
                });
            }
        }
        let target = self.backend.read_link(&real).map_err(|e| io_err(path, e))?;
        target
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
            .ok_or_else(|| FsError::WrongKind {
                path: path.into(),
                expected: "symlink to a named entry",
            })
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
        let not_found = || FsError::NotFound { path: asked.into() };
        if real.is_empty() || self.known_dirs.borrow().contains(real) {
            return Ok(EntryKind::Dir);
        }
        let (parent, name) = real.rsplit_once('/').unwrap_or(("", real));
        if let Some((listing, _)) = self.listings.borrow().get(parent) {
            return listing.get(name).copied().ok_or_else(not_found);
        }
        let kind = self.backend.kind(real).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                not_found()
            } else {
                io_err(asked, e)
            }
        })?;
        if kind == EntryKind::Dir {
            let mut known = self.known_dirs.borrow_mut();
            if known.len() >= CACHED_DIRS {
                known.clear();
            }
            known.insert(real.to_string());
        }
        Ok(kind)
    }

    /// The cached listing of the real directory `dir`, read on first use.
    fn listing(&self, dir: &str) -> io::Result<Rc<Listing>> {
        let now = self.clock.get() + 1;
        self.clock.set(now);
        let mut cache = self.listings.borrow_mut();
        if let Some((listing, used)) = cache.get_mut(dir) {
            *used = now;
            return Ok(Rc::clone(listing));
        }
        let listing: Rc<Listing> = Rc::new(self.backend.list(dir)?.into_iter().collect());
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

    /// Turns a link target into components to walk from `resolved` (the
    /// link's directory); absolute targets restart from the root when they
    /// point inside it.
    fn splice_target(
        &self,
        target: &Path,
        resolved: &mut Vec<String>,
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
