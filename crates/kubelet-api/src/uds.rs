//! Serving and dialling gRPC over unix domain sockets, the way the kubelet
//! and its plugins talk.
//!
//! [`bind`] replaces a stale socket file left by a previous run (the kubelet
//! never removes plugin sockets), creates the parent directory, and leaves
//! the socket readable and writable by its owner only (the kubelet runs as
//! root, as does the agent; nobody else on the node may prepare claims);
//! every accepted connection is wrapped in [`authority::ServerConn`], so a
//! client that sends the socket path as `:authority` (the kubelet's plugin
//! manager does) is served; [`connect`] returns a tonic [`Channel`] that
//! dials the socket path with authority `localhost`, as the kubelet's DRA
//! client and device manager do. A failed accept (out of file descriptors)
//! pauses the listener instead of letting tonic retry at once
//! ([`crate::backoff`]).

use std::io;
use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint};

use crate::authority::{self, ClientConn, ServerConn};

/// The connections accepted on a socket from [`bind`], each one a
/// [`ServerConn`] that accepts a socket path as `:authority`, with a
/// pause after a failed accept ([`crate::backoff`]).
pub type Incoming = crate::backoff::Backoff<
    tokio_stream::adapters::Map<
        UnixListenerStream,
        fn(io::Result<UnixStream>) -> io::Result<ServerConn<UnixStream>>,
    >,
>;

/// Failure to bind or dial a unix socket.
#[derive(Debug, thiserror::Error)]
pub enum UdsError {
    /// The parent directory could not be created.
    #[error("failed to create socket directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// A stale socket file could not be removed.
    #[error("failed to remove stale socket {path}: {source}")]
    RemoveStale {
        /// The socket path.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// Binding the socket failed.
    #[error("failed to listen on socket {path}: {source}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// The socket's permissions could not be set.
    #[error("failed to make socket {path} owner-only (mode 0600): {source}")]
    Permissions {
        /// The socket path.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// Connecting to the socket failed.
    #[error("failed to connect to socket {path}: {source}")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// What went wrong.
        source: tonic::transport::Error,
    },
}

/// Listens on `path`, first creating its directory and removing whatever
/// file a previous process left there. Feed the stream to
/// `tonic::transport::Server::serve_with_incoming`.
pub fn bind(path: &Path) -> Result<Incoming, UdsError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| UdsError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(UdsError::RemoveStale {
                path: path.to_path_buf(),
                source,
            });
        }
    }
    let listener = UnixListener::bind(path).map_err(|source| UdsError::Bind {
        path: path.to_path_buf(),
        source,
    })?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|source| {
        UdsError::Permissions {
            path: path.to_path_buf(),
            source,
        }
    })?;
    let wrap: fn(io::Result<UnixStream>) -> io::Result<ServerConn<UnixStream>> =
        |accepted| accepted.map(ServerConn::new);
    Ok(crate::backoff::Backoff::new(
        UnixListenerStream::new(listener).map(wrap),
    ))
}

/// Opens a gRPC channel to the server listening on `path`.
pub async fn connect(path: &Path) -> Result<Channel, UdsError> {
    let socket = path.to_path_buf();
    // Every connection dials `socket`: the URI only gives the authority,
    // `localhost` as the kubelet's own DRA and device-plugin clients send.
    let endpoint = Endpoint::from_static("http://localhost");
    endpoint
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move { UnixStream::connect(socket).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|source| UdsError::Connect {
            path: path.to_path_buf(),
            source,
        })
}

/// Opens a gRPC channel to `path` that sends what grpc-go sends when it
/// dials a bare socket path, as the kubelet's plugin manager does: the
/// percent-encoded path as `:authority` ([`authority::grpc_go_authority`]).
/// For test doubles that play the kubelet; the agent dials with [`connect`].
pub async fn connect_sending_path(path: &Path) -> Result<Channel, UdsError> {
    let socket = path.to_path_buf();
    let sent = authority::grpc_go_authority(&path.to_string_lossy());
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let (socket, sent) = (socket.clone(), sent.clone());
            async move {
                let io = UnixStream::connect(socket).await?;
                Ok::<_, io::Error>(TokioIo::new(ClientConn::with_authority(io, sent)))
            }
        }))
        .await
        .map_err(|source| UdsError::Connect {
            path: path.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authority::tests::Fixed;
    use crate::pluginregistration::v1 as reg;
    use reg::registration_client::RegistrationClient;
    use reg::registration_server::RegistrationServer;

    #[tokio::test]
    async fn serves_and_dials_over_a_unix_socket_replacing_a_stale_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/reg.sock");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"stale").unwrap();
        let incoming = bind(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RegistrationServer::new(Fixed))
                .serve_with_incoming(incoming),
        );
        let mut client = RegistrationClient::new(connect(&path).await.unwrap());
        let info = client
            .get_info(reg::InfoRequest {})
            .await
            .unwrap()
            .into_inner();
        assert_eq!(info.r#type, "DRAPlugin");
        assert_eq!(info.endpoint, "/x/dra.sock");
    }

    #[tokio::test]
    async fn connect_to_a_missing_socket_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.sock");
        let err = connect(&path).await.unwrap_err();
        assert!(err.to_string().contains("absent.sock"), "{err}");
    }
}
