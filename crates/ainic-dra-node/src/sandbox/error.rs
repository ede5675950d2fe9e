//! Why a pod sandbox hook could not do its part; each names the claim,
//! the device or netdev and the pod.

use crate::checkpoint::CheckpointError;
use crate::netdev::NetdevError;
use crate::rdma_netns::RdmaError;

/// A hook's failure (the runtime gets its message).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// Moving the netdev failed.
    #[error("claim {claim} device {device}: {source}")]
    Netdev {
        /// `namespace/name`.
        claim: String,
        /// DRA device name.
        device: String,
        /// What failed.
        #[source]
        source: NetdevError,
    },
    /// Moving the RDMA device, or reading the RDMA netns mode, failed.
    #[error("claim {claim} device {device}: {source}")]
    Rdma {
        /// `namespace/name`.
        claim: String,
        /// DRA device name.
        device: String,
        /// What failed.
        #[source]
        source: RdmaError,
    },
    /// The checkpoint could not record a move.
    #[error("cannot record the netdev move {key}: {source}")]
    Record {
        /// The move's key (`<claim uid>/<device>`).
        key: String,
        /// What failed.
        #[source]
        source: CheckpointError,
    },
    /// A netdev could not be brought home.
    #[error(
        "claim {claim}: netdev {netdev} is still in pod {pod} and could not be brought home (see the agent's log)"
    )]
    StillAway {
        /// `namespace/name` (or the claim UID when only it is known).
        claim: String,
        /// The netdev's host name.
        netdev: String,
        /// The pod's UID.
        pod: String,
    },
    /// The pod has no network namespace of its own.
    #[error(
        "pod {pod} has a claim in exclusive netdev mode but no network namespace of its own (hostNetwork pods cannot take a netdev)"
    )]
    NoNetns {
        /// `namespace/name` of the pod.
        pod: String,
    },
}
