//! `DRAPlugin` v1 and v1beta1 over gRPC: one adapter, written once for
//! both (the messages differ only in v1's share IDs), that translates
//! messages to and from the one [`Driver`].
//!
//! The services reach the driver through a [`DriverSlot`]: the sockets are
//! served before the agent owns its state directory (a new agent of a
//! rolling update registers beside the old one and takes the state over
//! when the old one exits), and a call that arrives meanwhile waits for the
//! driver rather than failing.

use std::sync::Arc;

use kubelet_api::dra::{v1, v1beta1};
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use super::{ClaimRef, Driver};

/// The driver the services call, once there is one.
#[derive(Clone)]
pub struct DriverSlot(watch::Receiver<Option<Arc<Driver>>>);

impl DriverSlot {
    /// An empty slot and the sender that fills it.
    pub fn empty() -> (watch::Sender<Option<Arc<Driver>>>, Self) {
        let (tx, rx) = watch::channel(None);
        (tx, Self(rx))
    }

    /// A slot holding `driver` already.
    pub fn ready(driver: Arc<Driver>) -> Self {
        Self(watch::channel(Some(driver)).1)
    }

    /// The driver, waiting until there is one; `UNAVAILABLE` when the
    /// agent stops before (the kubelet retries, at the new agent).
    async fn get(&self) -> Result<Arc<Driver>, Status> {
        let mut slot = self.0.clone();
        match slot.wait_for(Option::is_some).await {
            Ok(driver) => Ok(driver.clone().expect("waited for it")),
            Err(_) => Err(Status::unavailable(
                "the node agent stopped before it owned its state directory",
            )),
        }
    }
}

/// Serves `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`.
#[derive(Clone)]
pub struct V1(pub DriverSlot);

/// Serves `k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`.
#[derive(Clone)]
pub struct V1beta1(pub DriverSlot);

/// The adapter of one API version: `$device` builds its `Device` message
/// from a prepared device.
macro_rules! dra_plugin {
    ($service:ident, $api:ident, $device:expr) => {
        #[tonic::async_trait]
        impl $api::dra_plugin_server::DraPlugin for $service {
            async fn node_prepare_resources(
                &self,
                request: Request<$api::NodePrepareResourcesRequest>,
            ) -> Result<Response<$api::NodePrepareResourcesResponse>, Status> {
                let claims = refs(request.into_inner().claims, |c| {
                    (c.namespace, c.uid, c.name)
                });
                let outcomes = self.0.get().await?.prepare(&claims).await;
                let claims = outcomes
                    .into_iter()
                    .map(|(uid, outcome)| {
                        let response = match outcome {
                            Ok(devices) => $api::NodePrepareResourceResponse {
                                devices: devices.into_iter().map($device).collect(),
                                error: String::new(),
                            },
                            Err(error) => $api::NodePrepareResourceResponse {
                                devices: vec![],
                                error,
                            },
                        };
                        (uid, response)
                    })
                    .collect();
                Ok(Response::new($api::NodePrepareResourcesResponse { claims }))
            }

            async fn node_unprepare_resources(
                &self,
                request: Request<$api::NodeUnprepareResourcesRequest>,
            ) -> Result<Response<$api::NodeUnprepareResourcesResponse>, Status> {
                let claims = refs(request.into_inner().claims, |c| {
                    (c.namespace, c.uid, c.name)
                });
                let outcomes = self.0.get().await?.unprepare(&claims).await;
                let claims = outcomes
                    .into_iter()
                    .map(|(uid, outcome)| {
                        let error = outcome.err().unwrap_or_default();
                        (uid, $api::NodeUnprepareResourceResponse { error })
                    })
                    .collect();
                Ok(Response::new($api::NodeUnprepareResourcesResponse {
                    claims,
                }))
            }
        }
    };
}

dra_plugin!(V1, v1, |d: super::PreparedDevice| v1::Device {
    request_names: d.requests,
    pool_name: d.pool,
    device_name: d.device,
    cdi_device_ids: d.cdi_ids,
    share_id: d.share_id,
});

dra_plugin!(V1beta1, v1beta1, |d: super::PreparedDevice| {
    v1beta1::Device {
        request_names: d.requests,
        pool_name: d.pool,
        device_name: d.device,
        cdi_device_ids: d.cdi_ids,
    }
});

/// The kubelet's claim references, by (namespace, UID, name).
fn refs<C>(claims: Vec<C>, parts: impl Fn(C) -> (String, String, String)) -> Vec<ClaimRef> {
    claims
        .into_iter()
        .map(|c| {
            let (namespace, uid, name) = parts(c);
            ClaimRef {
                namespace,
                uid,
                name,
            }
        })
        .collect()
}
