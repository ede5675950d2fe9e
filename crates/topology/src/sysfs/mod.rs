//! Read access to a sysfs tree, confined to its root.
//!
//! Discovery never opens a path the operating system could resolve through a
//! symlink: [`Sysfs`] walks every path one component at a time, reads each
//! link itself, splices the target in relative to the link, and refuses
//! targets that climb above the root or hop more than [`MAX_LINK_HOPS`]
//! times. What it walks is a [`Backend`]: the real directory tree
//! ([`DirBackend`]) or an in-memory one for tests ([`MemBackend`]).

mod backend;
mod fs;
mod mem;
pub(crate) mod parse;

pub use backend::{Backend, DirBackend, EntryKind};
pub use fs::{FsError, MAX_LINK_HOPS, Sysfs};
pub use mem::MemBackend;
