//! The life of one resource's plugin: serve, register, watch the kubelet,
//! and start over when the kubelet restarts.
//!
//! The kubelet forgets every plugin when it restarts: it clears the device
//! plugin directory and creates a new `kubelet.sock`. A plugin notices that
//! its own socket is gone or that `kubelet.sock` is a new file (another
//! inode), stops serving, and goes through the phases again. The socket
//! files are checked every `poll` interval (a `stat` each, no busy loop).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use dra_model::classic::{AllocateOptions, ResourceName};
use kubelet_api::deviceplugin::v1beta1 as dp;
use kubelet_api::uds;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::service::ResourceService;
use super::snapshot::Snapshot;

/// A file removed when this is dropped, if it is there.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Identity of a socket file: a restarted kubelet makes a new inode.
type FileId = (u64, u64);

fn file_id(path: &Path) -> Option<FileId> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The phases of one resource plugin.
enum Phase {
    /// Entry: start, or the kubelet went away. Exit: `kubelet.sock` exists.
    WaitingForKubelet,
    /// Entry: `kubelet.sock` (with this identity) exists. Our socket is
    /// bound and served; exit once `Register` succeeded (or failed: back to
    /// waiting, after one poll interval).
    Registering(Server, FileId),
    /// Entry: the kubelet accepted us. Exit: `kubelet.sock` changed or
    /// vanished, or our socket vanished.
    Registered(Server, FileId),
}

/// One generation of our `DevicePlugin` server.
struct Server {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Server {
    async fn shut_down(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Everything one resource plugin needs.
pub struct ResourcePlugin {
    /// The resource.
    pub resource: ResourceName,
    /// The device plugin directory (`/var/lib/kubelet/device-plugins`).
    pub dir: PathBuf,
    /// The current split.
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    /// How `Allocate` answers.
    pub options: AllocateOptions,
    /// How often socket files are checked.
    pub poll: Duration,
    /// The host's device directory, for device specs' host paths.
    pub host_dev: PathBuf,
    /// The agent's instance ID, part of the socket's name when set.
    pub instance: Option<String>,
}

impl ResourcePlugin {
    /// Our socket's file name in the directory, e.g.
    /// `ainic-dra-amd.com_nic.sock`, or with an instance ID
    /// `ainic-dra-<ID>-amd.com_nic.sock`.
    pub fn endpoint(&self) -> String {
        let resource = self.resource.as_str().replace('/', "_");
        match &self.instance {
            None => format!("ainic-dra-{resource}.sock"),
            Some(id) => format!("ainic-dra-{id}-{resource}.sock"),
        }
    }

    /// Runs until `shutdown` flips to `true`, then removes our socket; also
    /// when the task is dropped instead (aborted by the supervisor, or with
    /// the runtime when the agent fails to start after this served), so the
    /// kubelet's directory keeps no socket of an agent that is gone.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let _socket = RemoveOnDrop(self.dir.join(self.endpoint()));
        let mut phase = Phase::WaitingForKubelet;
        loop {
            phase = tokio::select! {
                next = self.step(phase) => next,
                _ = shutdown.wait_for(|s| *s) => break,
            };
        }
    }

    /// One transition. A server dropped on shutdown stops: dropping it
    /// drops its stop sender, which ends its graceful-shutdown wait.
    async fn step(&self, phase: Phase) -> Phase {
        let kubelet = self.dir.join(dp::KUBELET_SOCKET);
        match phase {
            Phase::WaitingForKubelet => match file_id(&kubelet) {
                None => {
                    tokio::time::sleep(self.poll).await;
                    Phase::WaitingForKubelet
                }
                Some(id) => match self.serve() {
                    Ok(server) => Phase::Registering(server, id),
                    Err(e) => {
                        tracing::error!(resource = %self.resource, error = %e, "cannot serve device plugin");
                        tokio::time::sleep(self.poll).await;
                        Phase::WaitingForKubelet
                    }
                },
            },
            Phase::Registering(server, id) => match self.register(&kubelet).await {
                Ok(()) => {
                    tracing::info!(resource = %self.resource, endpoint = %self.endpoint(), "registered with kubelet");
                    Phase::Registered(server, id)
                }
                Err(e) => {
                    tracing::warn!(resource = %self.resource, error = %e, "kubelet registration failed; retrying");
                    server.shut_down().await;
                    tokio::time::sleep(self.poll).await;
                    Phase::WaitingForKubelet
                }
            },
            Phase::Registered(server, id) => {
                tokio::time::sleep(self.poll).await;
                let ours = self.dir.join(self.endpoint()).exists();
                if file_id(&kubelet) == Some(id) && ours {
                    Phase::Registered(server, id)
                } else {
                    tracing::info!(resource = %self.resource, "kubelet restarted; registering again");
                    server.shut_down().await;
                    Phase::WaitingForKubelet
                }
            }
        }
    }

    fn serve(&self) -> Result<Server, uds::UdsError> {
        let incoming = uds::bind(&self.dir.join(self.endpoint()))?;
        let (stop, stopping) = watch::channel(false);
        let service = ResourceService {
            resource: self.resource.clone(),
            snapshots: self.snapshots.clone(),
            options: self.options,
            stopping: stopping.clone(),
            host_dev: self.host_dev.clone(),
        };
        let mut until_stopped = stopping;
        let server = tonic::transport::Server::builder()
            .add_service(dp::device_plugin_server::DevicePluginServer::new(service))
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = until_stopped.wait_for(|s| *s).await;
            });
        let resource = self.resource.clone();
        let task = tokio::spawn(async move {
            if let Err(e) = server.await {
                tracing::error!(resource = %resource, error = %e, "device plugin server failed");
            }
        });
        Ok(Server { stop, task })
    }

    async fn register(&self, kubelet: &Path) -> anyhow::Result<()> {
        let channel = uds::connect(kubelet).await?;
        let mut client = dp::registration_client::RegistrationClient::new(channel);
        client
            .register(dp::RegisterRequest {
                version: dp::VERSION.to_string(),
                endpoint: self.endpoint(),
                resource_name: self.resource.to_string(),
                options: Some(dp::DevicePluginOptions {
                    pre_start_required: false,
                    get_preferred_allocation_available: true,
                }),
            })
            .await?;
        Ok(())
    }
}
