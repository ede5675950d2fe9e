//! Why the node agent could not start, or stopped on a failure.

use std::net::SocketAddr;
use std::path::PathBuf;

/// An error the caller may box from a source of its own (the API client it
/// builds, the model it rebuilds).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why [`serve`](crate::serve) or [`agent::run`](crate::agent::run) failed.
/// Each says what failed with which input; its source says why.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The sysfs tree could not be read at all.
    #[error("failed to discover NICs under {}", root.display())]
    Discover {
        /// The sysfs root.
        root: PathBuf,
        /// What discovery said.
        #[source]
        source: topology::DiscoverError,
    },
    /// The state directory is another agent's, or cannot be locked.
    #[error(transparent)]
    StateLock(#[from] crate::state_lock::LockError),
    /// A kubelet socket could not be served.
    #[error(transparent)]
    Socket(#[from] kubelet_api::uds::UdsError),
    /// The HTTP endpoint could not listen.
    #[error("failed to listen on {addr}")]
    Http {
        /// The address asked for.
        addr: SocketAddr,
        /// What binding said.
        #[source]
        source: std::io::Error,
    },
    /// The checkpoint could not be read or written.
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    /// The CDI directory could not be read or reconciled.
    #[error(transparent)]
    CdiDir(#[from] crate::cdi::dir::CdiDirError),
    /// Device metadata files could not be cleaned up.
    #[error(transparent)]
    Metadata(#[from] crate::metadata::MetadataError),
    /// The API client could not be built.
    #[error("failed to build the API client")]
    Client(#[source] BoxError),
    /// The node's labels and the flags give no valid device model.
    #[error(transparent)]
    Model(BoxError),
    /// The classic device plugin could not start.
    #[error("failed to start the classic device plugin")]
    Classic(#[source] BoxError),
    /// A long-lived task ended while the agent needed it.
    #[error(transparent)]
    Task(#[from] ainic_dra_daemon::TaskFailed),
}
