//! The plugin watcher's `Registration` service on
//! `<registry-dir>/<driver>-reg.sock`: tells the kubelet who we are and
//! where the DRA services are, and records whether it accepted us.

use std::path::PathBuf;
use std::sync::Arc;

use kubelet_api::dra::{v1, v1beta1};
use kubelet_api::dra_health::{v1 as health_v1, v1alpha1 as health_v1alpha1};
use kubelet_api::pluginregistration::v1 as reg;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::http::metrics::Metrics;

/// Whether the kubelet has accepted the plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Registration {
    /// No answer yet.
    #[default]
    Pending,
    /// `NotifyRegistrationStatus` said registered.
    Registered,
    /// `NotifyRegistrationStatus` said not registered, with the kubelet's reason.
    Rejected(String),
}

/// The `Registration` service.
pub struct RegistrationService {
    driver: String,
    endpoint: PathBuf,
    status: watch::Sender<Registration>,
    metrics: Arc<Metrics>,
}

impl RegistrationService {
    /// Announces `driver` with its DRA socket `endpoint`.
    pub fn new(driver: &str, endpoint: PathBuf, metrics: Arc<Metrics>) -> Self {
        Self {
            driver: driver.to_string(),
            endpoint,
            status: watch::Sender::new(Registration::Pending),
            metrics,
        }
    }

    /// Follows the registration status.
    pub fn status(&self) -> watch::Receiver<Registration> {
        self.status.subscribe()
    }

    /// The services listed in `supported_versions`.
    pub fn supported_versions() -> Vec<String> {
        vec![
            v1::SERVICE.to_string(),
            v1beta1::SERVICE.to_string(),
            // The kubelet (1.37+) picks the first health version it knows.
            health_v1::SERVICE.to_string(),
            health_v1alpha1::SERVICE.to_string(),
        ]
    }
}

#[tonic::async_trait]
impl reg::registration_server::Registration for RegistrationService {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        Ok(Response::new(reg::PluginInfo {
            r#type: reg::DRA_PLUGIN_TYPE.to_string(),
            name: self.driver.clone(),
            endpoint: self.endpoint.display().to_string(),
            supported_versions: Self::supported_versions(),
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        let state = if status.plugin_registered {
            tracing::info!("kubelet registered the plugin");
            Registration::Registered
        } else {
            tracing::error!(error = %status.error, "kubelet rejected the plugin");
            Registration::Rejected(status.error)
        };
        self.metrics
            .set_registered(state == Registration::Registered);
        self.status.send_replace(state);
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}
