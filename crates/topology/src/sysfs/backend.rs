//! The backend trait, and the backend over a real directory.
//!
//! A backend answers single-entry questions and never follows a symlink in
//! last place; everything about paths and links is [`super::Sysfs`]'s job.

use std::fs::File;
use std::io::{self, Read};
use std::path::PathBuf;

use super::beneath::Beneath;

/// The largest file read, in bytes; sysfs attributes are at most one page.
const MAX_FILE_BYTES: usize = 64 * 1024;

/// What a directory entry is, without following it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link (not followed).
    Symlink,
    /// Anything else (socket, fifo, device node).
    Other,
}

/// The narrow set of primitives discovery needs. Paths are relative to the
/// root, `/`-separated, and every component before the last is a real
/// directory already checked by [`super::Sysfs`]; implementations never follow the
/// last component if it is a link.
pub trait Backend {
    /// The kind of the entry at `path` (like `lstat`).
    fn kind(&self, path: &str) -> io::Result<EntryKind>;
    /// Names and kinds of the entries of the directory `path`; an error
    /// when `path` is missing, not a directory, or a link.
    fn list(&self, path: &str) -> io::Result<Vec<(String, EntryKind)>>;
    /// The target text of the symlink at `path`.
    fn read_link(&self, path: &str) -> io::Result<PathBuf>;
    /// The content of the regular file at `path`, or `Ok(None)` when
    /// `path` is a symlink, which is never followed here.
    fn read_file(&self, path: &str) -> io::Result<Option<String>>;
    /// The content of the regular file `file` below the directory `dir`,
    /// when the backend can open it with every link on the way followed
    /// and checked to stay inside the root by something it trusts (the
    /// kernel); `None` when it cannot tell, and the caller walks the path
    /// itself. The default never can.
    fn read_beneath(&self, dir: &str, file: &str) -> Option<String> {
        let _ = (dir, file);
        None
    }
}

/// A [`Backend`] over a real directory (e.g. `/sys`).
///
/// Besides the single-entry primitives it reads files through
/// `openat2(RESOLVE_BENEATH)` (see [`Backend::read_beneath`]), where the
/// kernel refuses any step out of the root.
#[derive(Debug)]
pub struct DirBackend {
    root: PathBuf,
    beneath: Beneath,
}

impl DirBackend {
    /// A backend rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let root = root.into();
        DirBackend {
            beneath: Beneath::new(&root),
            root,
        }
    }

    fn full(&self, path: &str) -> PathBuf {
        if path.is_empty() {
            self.root.clone()
        } else {
            self.root.join(path)
        }
    }
}

fn kind_of(ft: std::fs::FileType) -> EntryKind {
    if ft.is_symlink() {
        EntryKind::Symlink
    } else if ft.is_dir() {
        EntryKind::Dir
    } else if ft.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    }
}

impl Clone for DirBackend {
    /// A backend on the same root, with none of the open handles.
    fn clone(&self) -> Self {
        DirBackend::new(self.root.clone())
    }
}

impl Backend for DirBackend {
    fn kind(&self, path: &str) -> io::Result<EntryKind> {
        Ok(kind_of(
            std::fs::symlink_metadata(self.full(path))?.file_type(),
        ))
    }

    fn list(&self, path: &str) -> io::Result<Vec<(String, EntryKind)>> {
        use rustix::fs::{FileType, Mode, OFlags};
        // O_NOFOLLOW: a link in last place is refused, never listed.
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::open(self.full(path), flags, Mode::empty())?;
        let mut out = Vec::new();
        for entry in rustix::fs::Dir::new(fd)? {
            let entry = entry?;
            // Names that are not UTF-8 are never sysfs names we look for.
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            let kind = match entry.file_type() {
                FileType::Directory => EntryKind::Dir,
                FileType::RegularFile => EntryKind::File,
                FileType::Symlink => EntryKind::Symlink,
                FileType::Unknown if path.is_empty() => self.kind(name)?,
                FileType::Unknown => self.kind(&format!("{path}/{name}"))?,
                _ => EntryKind::Other,
            };
            out.push((name.to_string(), kind));
        }
        Ok(out)
    }

    fn read_link(&self, path: &str) -> io::Result<PathBuf> {
        std::fs::read_link(self.full(path))
    }

    fn read_file(&self, path: &str) -> io::Result<Option<String>> {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NOFOLLOW: a symlink in last place fails with ELOOP instead of
        // being followed, so one open both checks and reads. O_NONBLOCK: a
        // fifo planted in a fake tree reads as empty instead of hanging.
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(self.full(path));
        let mut file = match opened {
            Ok(file) => file,
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Ok(None),
            Err(e) => return Err(e),
        };
        read_all(&mut file).map(Some)
    }

    fn read_beneath(&self, dir: &str, file: &str) -> Option<String> {
        self.beneath.read(dir, file)
    }
}

/// The whole content of an open file, as UTF-8, at most [`MAX_FILE_BYTES`].
pub(crate) fn read_all(file: &mut File) -> io::Result<String> {
    // One read usually returns the whole attribute (at most a page); a
    // short read of a regular file means end of file, which saves a
    // syscall per file.
    let mut page = [0u8; 4096];
    let n = file.read(&mut page)?;
    let bytes = if n < page.len() {
        page[..n].to_vec()
    } else {
        read_rest(file, page.to_vec())?
    };
    String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))
}

/// The rest of a file whose first `buf.len()` bytes filled the buffer.
fn read_rest(file: &mut File, mut buf: Vec<u8>) -> io::Result<Vec<u8>> {
    let mut len = buf.len();
    loop {
        if buf.len() >= MAX_FILE_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                "file too large",
            ));
        }
        buf.resize(buf.len() * 2, 0);
        let n = file.read(&mut buf[len..])?;
        len += n;
        if n == 0 || len < buf.len() {
            break;
        }
    }
    buf.truncate(len);
    Ok(buf)
}
