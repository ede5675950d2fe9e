//! Read access to a sysfs tree, confined to its root.
//!
//! Discovery never opens anything outside the root. [`Sysfs`] walks a path
//! one component at a time, reads each link itself, splices the target in
//! relative to the link, and refuses targets that climb above the root or
//! hop more than [`MAX_LINK_HOPS`] times. What it walks is a [`Backend`]:
//! the real directory tree ([`DirBackend`]) or an in-memory one for tests
//! ([`MemBackend`]). File reads first try the backend's kernel-checked path
//! ([`Backend::read_beneath`]: `openat2` with `RESOLVE_BENEATH`, where the
//! kernel follows links and refuses any step out of the root); only what
//! that cannot open is walked by hand.

mod backend;
mod beneath;
mod error;
mod fs;
mod mem;
mod memory;
pub(crate) mod parse;

pub use backend::{Backend, DirBackend, EntryKind};
pub use error::FsError;
pub use fs::{MAX_LINK_HOPS, Sysfs};
pub use mem::MemBackend;
