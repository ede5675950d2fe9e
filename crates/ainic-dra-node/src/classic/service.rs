//! The `DevicePlugin` service of one extended resource.
//!
//! `ListAndWatch` sends the resource's devices (ID = PCI address, health,
//! NUMA node) at once and again whenever they change; the stream ends when
//! the server generation it belongs to stops. `GetPreferredAllocation` and
//! `Allocate` answer from the snapshot current at the call.

use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use dra_model::classic::{
    AllocateOptions, ClassicDevice, ContainerAllocation, ResourceName, container_allocation,
    preferred_allocation,
};
use kubelet_api::deviceplugin::v1beta1 as dp;
use tokio::sync::{mpsc, watch};
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::snapshot::Snapshot;

/// The `DevicePlugin` service of `resource`.
pub struct ResourceService {
    /// The resource served.
    pub resource: ResourceName,
    /// The current split.
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    /// How `Allocate` answers.
    pub options: AllocateOptions,
    /// Flips to `true` when this server generation stops.
    pub stopping: watch::Receiver<bool>,
    /// The host's device directory (`--host-dev-root`, `/dev`): the
    /// runtime reads device specs' host paths on the host.
    pub host_dev: PathBuf,
}

/// The kubelet's view of the devices of `resource` in `snapshot`.
pub fn device_list(snapshot: &Snapshot, resource: &str) -> Vec<dp::Device> {
    let Some(r) = snapshot.resource(resource) else {
        return Vec::new();
    };
    r.devices.iter().map(to_proto_device).collect()
}

fn to_proto_device(d: &ClassicDevice) -> dp::Device {
    dp::Device {
        id: d.id(),
        health: d.health.as_str().to_string(),
        topology: d.numa_node().map(|n| dp::TopologyInfo {
            nodes: vec![dp::NumaNode { id: i64::from(n) }],
        }),
    }
}

/// `/dev/infiniband/uverbs0` as the host names it: below `host_dev`.
fn on_host(path: &str, host_dev: &Path) -> String {
    match path.strip_prefix("/dev/") {
        Some(relative) => host_dev.join(relative).display().to_string(),
        None => path.to_string(),
    }
}

fn to_proto_allocation(a: ContainerAllocation, host_dev: &Path) -> dp::ContainerAllocateResponse {
    dp::ContainerAllocateResponse {
        envs: a.envs.into_iter().collect(),
        mounts: Vec::new(),
        devices: a
            .device_nodes
            .into_iter()
            .map(|d| dp::DeviceSpec {
                container_path: d.container_path,
                host_path: on_host(&d.host_path, host_dev),
                permissions: d.permissions,
            })
            .collect(),
        annotations: Default::default(),
        cdi_devices: a
            .cdi_devices
            .into_iter()
            .map(|name| dp::CdiDevice { name })
            .collect(),
    }
}

type DeviceStream = Pin<Box<dyn Stream<Item = Result<dp::ListAndWatchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl dp::device_plugin_server::DevicePlugin for ResourceService {
    async fn get_device_plugin_options(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<dp::DevicePluginOptions>, Status> {
        Ok(Response::new(dp::DevicePluginOptions {
            pre_start_required: false,
            get_preferred_allocation_available: true,
        }))
    }

    type ListAndWatchStream = DeviceStream;

    async fn list_and_watch(
        &self,
        _: Request<dp::Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(stream_devices(
            self.resource.to_string(),
            self.snapshots.clone(),
            self.stopping.clone(),
            tx,
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<dp::PreferredAllocationRequest>,
    ) -> Result<Response<dp::PreferredAllocationResponse>, Status> {
        let snapshot = Arc::clone(&self.snapshots.borrow());
        let devices = snapshot
            .resource(self.resource.as_str())
            .map(|r| r.devices.as_slice())
            .unwrap_or_default();
        let mut container_responses = Vec::new();
        for c in request.into_inner().container_requests {
            let size = usize::try_from(c.allocation_size)
                .map_err(|_| Status::invalid_argument("negative allocation_size"))?;
            let ids = preferred_allocation(
                devices,
                &c.available_device_i_ds,
                &c.must_include_device_i_ds,
                size,
            )
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
            tracing::info!(resource = %self.resource, chosen = ?ids, "preferred allocation");
            container_responses.push(dp::ContainerPreferredAllocationResponse { device_i_ds: ids });
        }
        Ok(Response::new(dp::PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<dp::AllocateRequest>,
    ) -> Result<Response<dp::AllocateResponse>, Status> {
        let snapshot = Arc::clone(&self.snapshots.borrow());
        let Some(resource) = snapshot.resource(self.resource.as_str()) else {
            return Err(Status::failed_precondition(format!(
                "resource {} is not configured",
                self.resource
            )));
        };
        let mut container_responses = Vec::new();
        for c in request.into_inner().container_requests {
            let answer =
                container_allocation(&snapshot.inventory, resource, &c.devices_ids, self.options)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
            tracing::info!(resource = %self.resource, devices = ?c.devices_ids, "allocated");
            container_responses.push(to_proto_allocation(answer, &self.host_dev));
        }
        Ok(Response::new(dp::AllocateResponse {
            container_responses,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<dp::PreStartContainerRequest>,
    ) -> Result<Response<dp::PreStartContainerResponse>, Status> {
        Ok(Response::new(dp::PreStartContainerResponse {}))
    }
}

/// Sends the device list now and after every change, until the client goes
/// away or the server generation stops.
async fn stream_devices(
    resource: String,
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
    mut stopping: watch::Receiver<bool>,
    tx: mpsc::Sender<Result<dp::ListAndWatchResponse, Status>>,
) {
    let mut last: Option<Vec<dp::Device>> = None;
    loop {
        let devices = device_list(&snapshots.borrow_and_update(), &resource);
        if last.as_ref() != Some(&devices) {
            let response = dp::ListAndWatchResponse {
                devices: devices.clone(),
            };
            if tx.send(Ok(response)).await.is_err() {
                return;
            }
            last = Some(devices);
        }
        tokio::select! {
            changed = snapshots.changed() => if changed.is_err() { return },
            _ = stopping.wait_for(|s| *s) => return,
            () = tx.closed() => return,
        }
    }
}
