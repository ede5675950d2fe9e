//! The fast read path of [`super::DirBackend`]: files opened with
//! `openat2(RESOLVE_BENEATH)`, so that the kernel itself follows the links
//! of a path and refuses, atomically, any step out of the root.
//!
//! It only ever answers "here is the content": every failure (a missing
//! file, a link out of the root, an absolute link, a kernel without
//! `openat2`) returns `None` and the caller takes the careful walk of
//! [`super::Sysfs`], which then produces the same result and error as it
//! always did. A success here opens the same file the careful walk would:
//! both follow relative links from the real directory holding them, both
//! refuse `..` above the root and more than 40 links, and the kernel
//! refuses absolute link targets outright where the careful walk would
//! accept the ones inside the root (those take the careful walk).
//!
//! Reading a file costs `openat2` + `read` + `close`. Directories read
//! often (the function being discovered) get a cached handle, so that the
//! kernel walks one component per file instead of the whole path.

use std::cell::{Cell, OnceCell, RefCell};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};

use super::backend::read_all;

/// Reads in a row in one directory before it gets its own handle: a handle
/// costs an open and a close, a read through it saves a path walk. A class
/// directory (two or three files) never earns one; a function (about twenty
/// files) does.
const READS_BEFORE_HANDLE: u32 = 4;

/// Directory handles kept at once (the function read, its PF, a class dir).
const CACHED_HANDLES: usize = 4;

/// Kernel-checked reads below one root; see the module docs.
#[derive(Debug)]
pub(crate) struct Beneath {
    root: PathBuf,
    /// The root directory, opened on first use; `None` if it cannot be.
    root_fd: OnceCell<Option<OwnedFd>>,
    /// False once the kernel refused `openat2` (too old, or filtered).
    usable: Cell<bool>,
    /// Handles of directories read often, most recent last.
    handles: RefCell<Vec<(String, OwnedFd)>>,
    /// The directory of the last reads and how many in a row.
    streak: RefCell<(String, u32)>,
}

impl Beneath {
    pub(crate) fn new(root: &Path) -> Self {
        Beneath {
            root: root.to_path_buf(),
            root_fd: OnceCell::new(),
            usable: Cell::new(true),
            handles: RefCell::default(),
            streak: RefCell::default(),
        }
    }

    /// The content of `file` below the directory `dir` (both relative to the
    /// root, `dir` empty for the root), or `None` when the kernel could not
    /// open it as a file beneath the root.
    pub(crate) fn read(&self, dir: &str, file: &str) -> Option<String> {
        if !self.usable.get() || file.is_empty() {
            return None;
        }
        let root = self.root_fd()?;
        if let Some(text) = self.read_via_handle(dir, file) {
            return text;
        }
        if dir.is_empty() {
            return self.read_at(root, file);
        }
        let mut path = String::with_capacity(dir.len() + 1 + file.len());
        path.push_str(dir);
        path.push('/');
        path.push_str(file);
        self.read_at(root, &path)
    }

    /// `Some(answer)` when `dir` has (or now earns) a handle.
    fn read_via_handle(&self, dir: &str, file: &str) -> Option<Option<String>> {
        if dir.is_empty() {
            return None;
        }
        let mut handles = self.handles.borrow_mut();
        if let Some(at) = handles.iter().position(|(d, _)| d == dir) {
            let entry = handles.remove(at);
            let text = self.read_at(entry.1.as_fd(), file);
            handles.push(entry);
            return Some(text);
        }
        if !self.earns_handle(dir) {
            return None;
        }
        let root = self.root_fd()?;
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let handle = self.open(root, dir, flags)?;
        let text = self.read_at(handle.as_fd(), file);
        if handles.len() >= CACHED_HANDLES {
            handles.remove(0);
        }
        handles.push((dir.to_string(), handle));
        Some(text)
    }

    /// Counts a read in `dir`; true once the streak is long enough.
    fn earns_handle(&self, dir: &str) -> bool {
        let mut streak = self.streak.borrow_mut();
        if streak.0 == dir {
            streak.1 += 1;
        } else {
            streak.0.clear();
            streak.0.push_str(dir);
            streak.1 = 1;
        }
        streak.1 >= READS_BEFORE_HANDLE
    }

    fn root_fd(&self) -> Option<BorrowedFd<'_>> {
        self.root_fd
            .get_or_init(|| {
                let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
                rustix::fs::open(&self.root, flags, Mode::empty()).ok()
            })
            .as_ref()
            .map(AsFd::as_fd)
    }

    fn read_at(&self, dir: BorrowedFd<'_>, file: &str) -> Option<String> {
        // O_NONBLOCK: a fifo planted in a fake tree reads as empty, as on
        // the careful path, instead of hanging.
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = self.open(dir, file, flags)?;
        read_all(&mut File::from(fd)).ok()
    }

    fn open(&self, dir: BorrowedFd<'_>, path: &str, flags: OFlags) -> Option<OwnedFd> {
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(dir, path, flags, Mode::empty(), resolve) {
            Ok(fd) => Some(fd),
            Err(e) if e == rustix::io::Errno::NOSYS || e == rustix::io::Errno::PERM => {
                // No openat2 here (kernel before 5.6, or a seccomp filter):
                // the careful walk does all the work from now on.
                self.usable.set(false);
                None
            }
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// `<tmp>/root` with a file, an inner link, links out of the root (by
    /// `..` and absolute) and a secret next to the root.
    fn tree() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("devices/f")).unwrap();
        std::fs::write(root.join("devices/f/vendor"), "0x1dd8\n").unwrap();
        std::fs::write(tmp.path().join("secret"), "s\n").unwrap();
        symlink("../devices/f", root.join("devices/link")).unwrap();
        symlink("../../secret", root.join("devices/out")).unwrap();
        symlink(tmp.path().join("secret"), root.join("devices/abs")).unwrap();
        (tmp, root)
    }

    #[test]
    fn reads_through_links_that_stay_inside() {
        let (_tmp, root) = tree();
        let b = Beneath::new(&root);
        assert_eq!(
            b.read("", "devices/link/vendor").as_deref(),
            Some("0x1dd8\n")
        );
        // Enough reads in one directory to give it a handle: same answers.
        for _ in 0..READS_BEFORE_HANDLE + 1 {
            assert_eq!(b.read("devices/f", "vendor").as_deref(), Some("0x1dd8\n"));
        }
        assert_eq!(b.read("devices/f", "missing"), None);
        assert_eq!(b.read("devices", "f"), None, "a directory is not a file");
    }

    #[test]
    fn never_opens_anything_outside_the_root() {
        let (_tmp, root) = tree();
        let b = Beneath::new(&root);
        assert_eq!(b.read("", "devices/out"), None);
        assert_eq!(b.read("", "devices/abs"), None);
        assert_eq!(b.read("", "../secret"), None);
        for _ in 0..READS_BEFORE_HANDLE + 1 {
            assert_eq!(b.read("devices/f", "../../../secret"), None);
            assert_eq!(b.read("devices/f", "../out"), None);
        }
    }
}
