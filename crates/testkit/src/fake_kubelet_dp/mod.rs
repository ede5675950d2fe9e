//! A fake kubelet for the classic device plugin API `v1beta1`, over real
//! unix sockets.
//!
//! It serves `Registration.Register` on `<dir>/kubelet.sock`, records each
//! registration, and dials a plugin's `DevicePlugin` socket in the same
//! directory. [`FakeKubelet::restart`] behaves like a kubelet restart: the
//! old server goes away, every file in the directory is removed (as the
//! kubelet's device manager does at start), and a new `kubelet.sock` appears.

mod registration;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kubelet_api::deviceplugin::v1beta1 as dp;
use kubelet_api::uds;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use registration::{Log, RegistrationService};

/// A `DevicePlugin` client connected to a plugin's socket.
pub type DevicePluginClient = dp::device_plugin_client::DevicePluginClient<Channel>;

/// What went wrong in the fake kubelet.
#[derive(Debug, thiserror::Error)]
pub enum FakeKubeletError {
    /// Binding or dialling a socket failed.
    #[error(transparent)]
    Socket(#[from] uds::UdsError),
    /// Clearing the device plugin directory failed.
    #[error("failed to clear device plugin dir {path}: {source}")]
    Clear {
        /// The directory.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The expected registration did not arrive in time.
    #[error("no registration #{count} of {resource} within {timeout:?}; seen: {seen:?}")]
    NoRegistration {
        /// The resource waited for.
        resource: String,
        /// How many registrations of it were expected.
        count: usize,
        /// How long the test waited.
        timeout: Duration,
        /// Resource names registered so far.
        seen: Vec<String>,
    },
}

/// A running fake kubelet.
pub struct FakeKubelet {
    dir: PathBuf,
    log: Log,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

impl FakeKubelet {
    /// Starts serving `Registration` on `<dir>/kubelet.sock`.
    pub async fn start(dir: &Path) -> Result<Self, FakeKubeletError> {
        let mut kubelet = FakeKubelet {
            dir: dir.to_path_buf(),
            log: Log::default(),
            stop: None,
            server: None,
        };
        kubelet.serve()?;
        Ok(kubelet)
    }

    fn serve(&mut self) -> Result<(), FakeKubeletError> {
        let incoming = uds::bind(&self.socket_path())?;
        let (stop, stopped) = oneshot::channel::<()>();
        let service = RegistrationService {
            log: self.log.clone(),
        };
        let server = tonic::transport::Server::builder()
            .add_service(dp::registration_server::RegistrationServer::new(service))
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            });
        self.server = Some(tokio::spawn(async {
            let _ = server.await;
        }));
        self.stop = Some(stop);
        Ok(())
    }

    /// `<dir>/kubelet.sock`.
    pub fn socket_path(&self) -> PathBuf {
        self.dir.join(dp::KUBELET_SOCKET)
    }

    /// Every accepted registration, oldest first (across restarts).
    pub fn registrations(&self) -> Vec<dp::RegisterRequest> {
        self.log.snapshot()
    }

    /// Waits until `resource` has registered `count` times in all, and
    /// returns the latest of its registrations.
    pub async fn wait_for_registration(
        &self,
        resource: &str,
        count: usize,
        timeout: Duration,
    ) -> Result<dp::RegisterRequest, FakeKubeletError> {
        let changed = self.log.changed();
        let wait = async {
            loop {
                let notified = changed.notified();
                let seen: Vec<_> = self
                    .registrations()
                    .into_iter()
                    .filter(|r| r.resource_name == resource)
                    .collect();
                if seen.len() >= count {
                    return seen[count - 1].clone();
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| FakeKubeletError::NoRegistration {
                resource: resource.to_string(),
                count,
                timeout,
                seen: self
                    .registrations()
                    .into_iter()
                    .map(|r| r.resource_name)
                    .collect(),
            })
    }

    /// Dials the plugin socket `endpoint` (a file name in the directory), as
    /// the kubelet does after a registration.
    pub async fn dial(&self, endpoint: &str) -> Result<DevicePluginClient, FakeKubeletError> {
        let channel = uds::connect(&self.dir.join(endpoint)).await?;
        Ok(DevicePluginClient::new(channel))
    }

    /// Stops serving and removes `kubelet.sock`, like a kubelet going down.
    pub async fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
        let _ = std::fs::remove_file(self.socket_path());
    }

    /// A kubelet restart: stop, clear the directory, serve a new socket.
    pub async fn restart(&mut self) -> Result<(), FakeKubeletError> {
        self.stop().await;
        let clear = |source| FakeKubeletError::Clear {
            path: self.dir.clone(),
            source,
        };
        for entry in std::fs::read_dir(&self.dir).map_err(clear)? {
            let path = entry.map_err(clear)?.path();
            if path.is_file() || !path.is_dir() {
                std::fs::remove_file(&path).map_err(clear)?;
            }
        }
        self.serve()
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Checks an `Allocate` answer as the container runtime will: every device
/// spec's host path must exist on the host and be a device node (containerd
/// `lstat`s it to learn the type and numbers, and fails the container
/// otherwise). The real node showed that the fake never looked.
pub fn check_device_specs(answer: &dp::ContainerAllocateResponse) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    for spec in &answer.devices {
        let meta = std::fs::symlink_metadata(&spec.host_path)
            .map_err(|e| format!("lstat {}: {e}", spec.host_path))?;
        let kind = meta.file_type();
        if !kind.is_char_device() && !kind.is_block_device() {
            return Err(format!("{} is not a device node", spec.host_path));
        }
    }
    Ok(())
}
