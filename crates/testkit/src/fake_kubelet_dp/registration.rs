//! The kubelet's `Registration` service as the fake serves it: it checks the
//! request the way the kubelet does and records every accepted one.

use std::sync::{Arc, Mutex};

use kubelet_api::deviceplugin::v1beta1 as dp;
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

/// Registrations seen so far, shared between the service and the test.
#[derive(Clone, Default)]
pub(crate) struct Log {
    entries: Arc<Mutex<Vec<dp::RegisterRequest>>>,
    changed: Arc<Notify>,
}

impl Log {
    pub(crate) fn snapshot(&self) -> Vec<dp::RegisterRequest> {
        self.entries.lock().map(|e| e.clone()).unwrap_or_default()
    }

    pub(crate) fn changed(&self) -> Arc<Notify> {
        Arc::clone(&self.changed)
    }

    fn push(&self, request: dp::RegisterRequest) {
        if let Ok(mut e) = self.entries.lock() {
            e.push(request);
        }
        self.changed.notify_waiters();
    }
}

/// The `Registration` service.
pub(crate) struct RegistrationService {
    pub(crate) log: Log,
}

#[tonic::async_trait]
impl dp::registration_server::Registration for RegistrationService {
    async fn register(
        &self,
        request: Request<dp::RegisterRequest>,
    ) -> Result<Response<dp::Empty>, Status> {
        let request = request.into_inner();
        if request.version != dp::VERSION {
            return Err(Status::invalid_argument(format!(
                "unsupported device plugin API version {:?}",
                request.version
            )));
        }
        if !request.resource_name.contains('/') || request.resource_name.contains("kubernetes.io") {
            return Err(Status::invalid_argument(format!(
                "invalid extended resource name {:?}",
                request.resource_name
            )));
        }
        if request.endpoint.is_empty() || request.endpoint.contains('/') {
            return Err(Status::invalid_argument(format!(
                "endpoint {:?} must be a socket file name in the device plugin dir",
                request.endpoint
            )));
        }
        self.log.push(request);
        Ok(Response::new(dp::Empty {}))
    }
}
