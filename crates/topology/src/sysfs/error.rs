//! What can go wrong with a path inside the sysfs tree.

use std::io;
use std::path::PathBuf;

use super::fs::MAX_LINK_HOPS;

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
