//! `DRAPlugin` v1 and v1beta1 over gRPC: two thin adapters that translate
//! messages to and from the one [`Driver`]. v1beta1 has no share IDs.

use std::sync::Arc;

use kubelet_api::dra::{v1, v1beta1};
use tonic::{Request, Response, Status};

use super::{ClaimRef, Driver};

/// Serves `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`.
#[derive(Clone)]
pub struct V1(pub Arc<Driver>);

/// Serves `k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`.
#[derive(Clone)]
pub struct V1beta1(pub Arc<Driver>);

fn refs_v1(claims: Vec<v1::Claim>) -> Vec<ClaimRef> {
    claims
        .into_iter()
        .map(|c| ClaimRef {
            namespace: c.namespace,
            uid: c.uid,
            name: c.name,
        })
        .collect()
}

fn refs_v1beta1(claims: Vec<v1beta1::Claim>) -> Vec<ClaimRef> {
    claims
        .into_iter()
        .map(|c| ClaimRef {
            namespace: c.namespace,
            uid: c.uid,
            name: c.name,
        })
        .collect()
}

#[tonic::async_trait]
impl v1::dra_plugin_server::DraPlugin for V1 {
    async fn node_prepare_resources(
        &self,
        request: Request<v1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1::NodePrepareResourcesResponse>, Status> {
        let outcomes = self.0.prepare(&refs_v1(request.into_inner().claims)).await;
        let claims = outcomes
            .into_iter()
            .map(|(uid, outcome)| {
                let response = match outcome {
                    Ok(devices) => v1::NodePrepareResourceResponse {
                        devices: devices
                            .into_iter()
                            .map(|d| v1::Device {
                                request_names: d.requests,
                                pool_name: d.pool,
                                device_name: d.device,
                                cdi_device_ids: d.cdi_ids,
                                share_id: d.share_id,
                            })
                            .collect(),
                        error: String::new(),
                    },
                    Err(error) => v1::NodePrepareResourceResponse {
                        devices: vec![],
                        error,
                    },
                };
                (uid, response)
            })
            .collect();
        Ok(Response::new(v1::NodePrepareResourcesResponse { claims }))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1::NodeUnprepareResourcesResponse>, Status> {
        let outcomes = self
            .0
            .unprepare(&refs_v1(request.into_inner().claims))
            .await;
        let claims = outcomes
            .into_iter()
            .map(|(uid, outcome)| {
                let error = outcome.err().unwrap_or_default();
                (uid, v1::NodeUnprepareResourceResponse { error })
            })
            .collect();
        Ok(Response::new(v1::NodeUnprepareResourcesResponse { claims }))
    }
}

#[tonic::async_trait]
impl v1beta1::dra_plugin_server::DraPlugin for V1beta1 {
    async fn node_prepare_resources(
        &self,
        request: Request<v1beta1::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodePrepareResourcesResponse>, Status> {
        let outcomes = self
            .0
            .prepare(&refs_v1beta1(request.into_inner().claims))
            .await;
        let claims = outcomes
            .into_iter()
            .map(|(uid, outcome)| {
                let response = match outcome {
                    Ok(devices) => v1beta1::NodePrepareResourceResponse {
                        devices: devices
                            .into_iter()
                            .map(|d| v1beta1::Device {
                                request_names: d.requests,
                                pool_name: d.pool,
                                device_name: d.device,
                                cdi_device_ids: d.cdi_ids,
                            })
                            .collect(),
                        error: String::new(),
                    },
                    Err(error) => v1beta1::NodePrepareResourceResponse {
                        devices: vec![],
                        error,
                    },
                };
                (uid, response)
            })
            .collect();
        Ok(Response::new(v1beta1::NodePrepareResourcesResponse {
            claims,
        }))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1beta1::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1beta1::NodeUnprepareResourcesResponse>, Status> {
        let outcomes = self
            .0
            .unprepare(&refs_v1beta1(request.into_inner().claims))
            .await;
        let claims = outcomes
            .into_iter()
            .map(|(uid, outcome)| {
                let error = outcome.err().unwrap_or_default();
                (uid, v1beta1::NodeUnprepareResourceResponse { error })
            })
            .collect();
        Ok(Response::new(v1beta1::NodeUnprepareResourcesResponse {
            claims,
        }))
    }
}
