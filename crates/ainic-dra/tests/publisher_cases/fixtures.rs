//! Shared fixtures of the publisher tests: a stand-in API server with nodes,
//! synthetic device pools, a recording sleeper and pool assertions.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{
    Device, DeviceAttribute, DeviceTaint, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use testkit::apiserver::ApiServer;

use crate::publisher::{Backoff, PublisherConfig, Sleeper, SlicePublisher};

pub const DRIVER: &str = "ainic.amd.com";

/// A sleeper that returns at once and remembers what it was asked to wait.
#[derive(Default)]
pub struct RecordingSleeper(pub Mutex<Vec<Duration>>);

impl Sleeper for RecordingSleeper {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.0.lock().unwrap().push(duration);
        Box::pin(async {})
    }
}

impl RecordingSleeper {
    pub fn delays(&self) -> Vec<Duration> {
        self.0.lock().unwrap().clone()
    }
}

pub fn backoff() -> Backoff {
    Backoff {
        initial: Duration::from_millis(100),
        max: Duration::from_millis(400),
        attempts: 5,
        jitter_percent: 0,
    }
}

/// A stand-in with Node objects `n1` and `n2`.
pub async fn server() -> ApiServer {
    let server = ApiServer::start().await.unwrap();
    for name in ["n1", "n2"] {
        server.seed(&Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        });
    }
    server
}

pub fn publisher(server: &ApiServer, node: &str) -> (SlicePublisher, Arc<RecordingSleeper>) {
    let sleeper = Arc::new(RecordingSleeper::default());
    let config = PublisherConfig {
        node_name: node.into(),
        driver_name: DRIVER.into(),
        backoff: backoff(),
    };
    let publisher = SlicePublisher::new(server.client(), config).with_sleeper(sleeper.clone());
    (publisher, sleeper)
}

/// A PF-like device; a down link carries the unhealthy taint.
pub fn device(name: &str, link_up: bool) -> Device {
    let attrs = [
        (
            "ainic.amd.com/type".to_string(),
            DeviceAttribute {
                string: Some("pf".into()),
                ..Default::default()
            },
        ),
        (
            "ainic.amd.com/linkUp".to_string(),
            DeviceAttribute {
                bool: Some(link_up),
                ..Default::default()
            },
        ),
    ];
    let taint = DeviceTaint {
        key: "ainic.amd.com/unhealthy".into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    Device {
        name: name.into(),
        attributes: Some(attrs.into()),
        taints: (!link_up).then(|| vec![taint]),
        ..Default::default()
    }
}

pub fn devices(prefix: &str, count: usize) -> Vec<Device> {
    (0..count)
        .map(|i| device(&format!("{prefix}-{i}"), true))
        .collect()
}

/// Desired slices as the device model shapes them: named per index, at most
/// `per_slice` devices each, generation left to the publisher.
pub fn pool(node: &str, devices: &[Device], per_slice: usize) -> Vec<ResourceSlice> {
    let chunks: Vec<&[Device]> = devices.chunks(per_slice).collect();
    chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| ResourceSlice {
            metadata: ObjectMeta {
                name: Some(format!("{node}-{DRIVER}-{i}")),
                ..Default::default()
            },
            spec: ResourceSliceSpec {
                driver: DRIVER.into(),
                node_name: Some(node.into()),
                pool: ResourcePool {
                    name: node.into(),
                    generation: 0,
                    resource_slice_count: chunks.len() as i64,
                },
                devices: Some(chunk.to_vec()),
                ..Default::default()
            },
        })
        .collect()
}

/// Slices of `driver` on `node` held by the server.
pub fn held(server: &ApiServer, node: &str, driver: &str) -> Vec<ResourceSlice> {
    let all = server.list::<ResourceSlice>();
    all.into_iter()
        .filter(|s| s.spec.node_name.as_deref() == Some(node) && s.spec.driver == driver)
        .collect()
}

/// Checks that the server holds exactly one complete pool of `node` at
/// `generation` with these device names, owned by the Node object.
pub fn assert_pool(server: &ApiServer, node: &str, generation: i64, device_names: &[String]) {
    let slices = held(server, node, DRIVER);
    let node_uid = server
        .get::<Node>(None, node)
        .unwrap()
        .metadata
        .uid
        .unwrap();
    for s in &slices {
        let name = s.metadata.name.as_deref().unwrap();
        assert_eq!(s.spec.pool.generation, generation, "generation of {name}");
        assert_eq!(
            s.spec.pool.resource_slice_count,
            slices.len() as i64,
            "count of {name}"
        );
        assert_eq!(s.spec.pool.name, node);
        let owner = &s
            .metadata
            .owner_references
            .as_ref()
            .expect("owner reference")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Node", node, node_uid.as_str())
        );
        assert_eq!(owner.controller, Some(true));
    }
    let published: Vec<String> = slices
        .iter()
        .flat_map(|s| s.spec.devices.iter().flatten())
        .map(|d| d.name.clone())
        .collect();
    let unique: BTreeSet<&String> = published.iter().collect();
    assert_eq!(unique.len(), published.len(), "a device is published twice");
    let expected: BTreeSet<&String> = device_names.iter().collect();
    assert_eq!(unique, expected);
}

pub fn names(devices: &[Device]) -> Vec<String> {
    devices.iter().map(|d| d.name.clone()).collect()
}
