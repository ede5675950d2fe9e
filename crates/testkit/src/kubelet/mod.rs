//! A kubelet stand-in for DRA plugins: finds a plugin's registration
//! socket, registers it the way the kubelet's plugin watcher does
//! (`GetInfo`, checks, `NotifyRegistrationStatus`), then calls
//! `DRAPlugin` v1 or v1beta1 and `DRAResourceHealth` on the endpoint the
//! plugin announced, over the real unix sockets.
//!
//! ```no_run
//! # async fn demo(registry: &std::path::Path) -> Result<(), testkit::kubelet::SimError> {
//! use testkit::kubelet::{ClaimRef, KubeletSim};
//! let plugin = KubeletSim::register_driver(registry, "ainic.amd.com").await?;
//! let claim = ClaimRef::new("default", "claim-a", "uid-a");
//! let answer = plugin.prepare_v1(&[claim]).await?;
//! # let _ = answer; Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use kubelet_api::dra::{v1, v1beta1};
use kubelet_api::dra_health::{v1 as health_v1, v1alpha1 as health};
use kubelet_api::pluginregistration::v1 as reg;
use tonic::transport::Channel;

/// What went wrong talking to a plugin.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A socket did not appear in time.
    #[error("socket {0} did not appear within {1:?}")]
    NoSocket(PathBuf, Duration),
    /// Dialling a socket failed.
    #[error(transparent)]
    Dial(#[from] kubelet_api::uds::UdsError),
    /// A call failed.
    #[error("{call} failed: {status}")]
    Call {
        /// The RPC.
        call: &'static str,
        /// The gRPC status.
        status: tonic::Status,
    },
    /// The plugin's info is not acceptable to a kubelet; the plugin was told so.
    #[error("plugin rejected: {0}")]
    Rejected(String),
}

/// A claim as the kubelet names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

impl ClaimRef {
    /// `namespace/name` with `uid`.
    pub fn new(namespace: &str, name: &str, uid: &str) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    fn v1(&self) -> v1::Claim {
        v1::Claim {
            namespace: self.namespace.clone(),
            uid: self.uid.clone(),
            name: self.name.clone(),
        }
    }

    fn v1beta1(&self) -> v1beta1::Claim {
        v1beta1::Claim {
            namespace: self.namespace.clone(),
            uid: self.uid.clone(),
            name: self.name.clone(),
        }
    }
}

/// The kubelet side of plugin registration.
pub struct KubeletSim;

/// How often the simulator looks for a socket by default. The real
/// kubelet's plugin watcher is told by inotify the moment a socket
/// appears; benches that time start-up poll finer
/// ([`KubeletSim::register_driver_polling`]).
const POLL: Duration = Duration::from_millis(20);

/// Polls until `path` exists (sockets appear when a plugin starts).
pub async fn wait_for_socket(path: &Path, timeout: Duration) -> Result<(), SimError> {
    wait_for_socket_polling(path, timeout, POLL).await
}

async fn wait_for_socket_polling(
    path: &Path,
    timeout: Duration,
    poll: Duration,
) -> Result<(), SimError> {
    let start = std::time::Instant::now();
    while !path.exists() {
        if start.elapsed() > timeout {
            return Err(SimError::NoSocket(path.to_path_buf(), timeout));
        }
        tokio::time::sleep(poll).await;
    }
    Ok(())
}

fn call(call: &'static str) -> impl FnOnce(tonic::Status) -> SimError {
    move |status| SimError::Call { call, status }
}

impl KubeletSim {
    /// Waits for `<registry>/<driver>-reg.sock` and registers the plugin.
    pub async fn register_driver(
        registry: &Path,
        driver: &str,
    ) -> Result<DraPluginClient, SimError> {
        Self::register_driver_polling(registry, driver, POLL).await
    }

    /// [`Self::register_driver`], looking for the socket every `poll`
    /// (a coarse poll adds up to its period to a timed start-up: 20 ms was
    /// a third of the agent's start → registered figure).
    pub async fn register_driver_polling(
        registry: &Path,
        driver: &str,
        poll: Duration,
    ) -> Result<DraPluginClient, SimError> {
        const TIMEOUT: Duration = Duration::from_secs(20);
        let socket = registry.join(format!("{driver}-reg.sock"));
        wait_for_socket_polling(&socket, TIMEOUT, poll).await?;
        // A socket file left by a dead plugin refuses connections until the
        // new process replaces it: retry like the plugin watcher does.
        let start = std::time::Instant::now();
        loop {
            match Self::register(&socket).await {
                Err(SimError::Dial(_)) if start.elapsed() < TIMEOUT => {
                    tokio::time::sleep(poll).await;
                }
                other => return other,
            }
        }
    }

    /// Registers the plugin behind the registration socket `socket`: reads
    /// its info, checks it as the kubelet does (type `DRAPlugin`, a
    /// `DRAPlugin` version we speak, a reachable endpoint) and tells the
    /// plugin the outcome.
    ///
    /// Dials as the real kubelet does: the plugin manager with a bare
    /// socket path (grpc-go then sends the encoded path as `:authority`),
    /// the DRA client with a `unix:` target (authority `localhost`).
    pub async fn register(socket: &Path) -> Result<DraPluginClient, SimError> {
        let mut registration = reg::registration_client::RegistrationClient::new(
            kubelet_api::uds::connect_sending_path(socket).await?,
        );
        let info = registration
            .get_info(reg::InfoRequest {})
            .await
            .map_err(call("GetInfo"))?
            .into_inner();
        let verdict = match Self::check(&info) {
            Ok(()) => kubelet_api::uds::connect(Path::new(&info.endpoint))
                .await
                .map_err(|e| e.to_string()),
            Err(why) => Err(why),
        };
        let status = reg::RegistrationStatus {
            plugin_registered: verdict.is_ok(),
            error: verdict.as_ref().err().cloned().unwrap_or_default(),
        };
        registration
            .notify_registration_status(status)
            .await
            .map_err(call("NotifyRegistrationStatus"))?;
        let channel = verdict.map_err(SimError::Rejected)?;
        Ok(DraPluginClient { info, channel })
    }

    fn check(info: &reg::PluginInfo) -> Result<(), String> {
        if info.r#type != reg::DRA_PLUGIN_TYPE {
            return Err(format!(
                "plugin type {:?} is not {}",
                info.r#type,
                reg::DRA_PLUGIN_TYPE
            ));
        }
        let speaks = |s: &str| info.supported_versions.iter().any(|v| v == s);
        if !speaks(v1::SERVICE) && !speaks(v1beta1::SERVICE) {
            return Err(format!(
                "none of the supported versions {:?} is a DRAPlugin version this kubelet speaks",
                info.supported_versions
            ));
        }
        if info.name.is_empty() || info.endpoint.is_empty() {
            return Err("plugin name and endpoint must be set".into());
        }
        Ok(())
    }
}

/// A registered DRA plugin, reachable at the endpoint it announced.
#[derive(Clone)]
pub struct DraPluginClient {
    /// What `GetInfo` said.
    pub info: reg::PluginInfo,
    channel: Channel,
}

impl DraPluginClient {
    /// True when the plugin listed `service` in its supported versions.
    pub fn supports(&self, service: &str) -> bool {
        self.info.supported_versions.iter().any(|v| v == service)
    }

    /// `NodePrepareResources` through `DRAPlugin` v1.
    pub async fn prepare_v1(
        &self,
        claims: &[ClaimRef],
    ) -> Result<v1::NodePrepareResourcesResponse, SimError> {
        let request = v1::NodePrepareResourcesRequest {
            claims: claims.iter().map(ClaimRef::v1).collect(),
        };
        let mut client = v1::dra_plugin_client::DraPluginClient::new(self.channel.clone());
        Ok(client
            .node_prepare_resources(request)
            .await
            .map_err(call("NodePrepareResources"))?
            .into_inner())
    }

    /// `NodeUnprepareResources` through `DRAPlugin` v1.
    pub async fn unprepare_v1(
        &self,
        claims: &[ClaimRef],
    ) -> Result<v1::NodeUnprepareResourcesResponse, SimError> {
        let request = v1::NodeUnprepareResourcesRequest {
            claims: claims.iter().map(ClaimRef::v1).collect(),
        };
        let mut client = v1::dra_plugin_client::DraPluginClient::new(self.channel.clone());
        Ok(client
            .node_unprepare_resources(request)
            .await
            .map_err(call("NodeUnprepareResources"))?
            .into_inner())
    }

    /// `NodePrepareResources` through `DRAPlugin` v1beta1.
    pub async fn prepare_v1beta1(
        &self,
        claims: &[ClaimRef],
    ) -> Result<v1beta1::NodePrepareResourcesResponse, SimError> {
        let request = v1beta1::NodePrepareResourcesRequest {
            claims: claims.iter().map(ClaimRef::v1beta1).collect(),
        };
        let mut client = v1beta1::dra_plugin_client::DraPluginClient::new(self.channel.clone());
        Ok(client
            .node_prepare_resources(request)
            .await
            .map_err(call("NodePrepareResources"))?
            .into_inner())
    }

    /// `NodeUnprepareResources` through `DRAPlugin` v1beta1.
    pub async fn unprepare_v1beta1(
        &self,
        claims: &[ClaimRef],
    ) -> Result<v1beta1::NodeUnprepareResourcesResponse, SimError> {
        let request = v1beta1::NodeUnprepareResourcesRequest {
            claims: claims.iter().map(ClaimRef::v1beta1).collect(),
        };
        let mut client = v1beta1::dra_plugin_client::DraPluginClient::new(self.channel.clone());
        Ok(client
            .node_unprepare_resources(request)
            .await
            .map_err(call("NodeUnprepareResources"))?
            .into_inner())
    }

    /// Opens `DRAResourceHealth.NodeWatchResources`.
    pub async fn watch_health(
        &self,
    ) -> Result<tonic::Streaming<health::NodeWatchResourcesResponse>, SimError> {
        let mut client =
            health::dra_resource_health_client::DraResourceHealthClient::new(self.channel.clone());
        Ok(client
            .node_watch_resources(health::NodeWatchResourcesRequest {})
            .await
            .map_err(call("NodeWatchResources"))?
            .into_inner())
    }

    /// Opens `DRAResourceHealth.NodeWatchResources` in version `v1`, which
    /// the kubelet of 1.37 uses when the plugin lists it.
    pub async fn watch_health_v1(
        &self,
    ) -> Result<tonic::Streaming<health_v1::NodeWatchResourcesResponse>, SimError> {
        let mut client = health_v1::dra_resource_health_client::DraResourceHealthClient::new(
            self.channel.clone(),
        );
        Ok(client
            .node_watch_resources(health_v1::NodeWatchResourcesRequest {})
            .await
            .map_err(call("NodeWatchResources"))?
            .into_inner())
    }
}

#[cfg(test)]
mod tests;
