//! Device health: HEALTHY / DEGRADED / UNHEALTHY / UNKNOWN per published
//! device from link and RDMA-port state and the PFs' hardware error
//! counters ([`counters`]), served to the kubelet as the
//! `DRAResourceHealth.NodeWatchResources` stream, `v1` and `v1alpha1`
//! (the full device list first, then again every refresh interval).
//!
//! Rules (the same facts the slice builder turns into the `unhealthy` and
//! `degraded` taints): a netdev whose `operstate` is down, or an RDMA port
//! whose state is not ACTIVE, makes the function UNHEALTHY; a VF with
//! neither netdev nor RDMA device follows its PF; a function with no state
//! at all is UNKNOWN. Otherwise its PF's counter level decides (a VF shares
//! its PF's port): unhealthy is UNHEALTHY, degraded is reported HEALTHY to
//! the kubelet (it has no third state) with a message saying `degraded:`
//! and why.

pub(crate) mod counters;
pub(crate) mod refresh;

use std::collections::BTreeMap;

use std::pin::Pin;
use std::sync::Arc;

use dra_model::health::{Condition, Level};
use futures::Stream;
use kubelet_api::dra_health::{v1, v1alpha1};
use tokio::sync::watch;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::WatchStream;
use topology::{FunctionKind, Inventory, NicFunction, PciAddress};

/// What the driver knows of a device's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    /// Link and RDMA ports up.
    Healthy,
    /// Up, but its counters cross a `degraded` threshold (HEALTHY to the
    /// kubelet, with a message).
    Degraded,
    /// A link or RDMA port is down, or its counters cross an `unhealthy`
    /// threshold.
    Unhealthy,
    /// No state to judge by.
    Unknown,
}

/// The health of one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DeviceState {
    /// DRA device name.
    pub device: String,
    /// Its health.
    pub health: Health,
    /// Why, for humans.
    pub message: String,
}

/// One health report: every device, and when it was computed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct HealthReport {
    /// Devices in inventory order.
    pub devices: Vec<DeviceState>,
    /// Unix seconds of the refresh that produced it.
    pub updated_at: i64,
}

impl HealthReport {
    /// Counts per state: `healthy`, `degraded`, `unhealthy`, `unknown`.
    pub(crate) fn counts(&self) -> [(&'static str, usize); 4] {
        let count = |h| self.devices.iter().filter(|d| d.health == h).count();
        [
            ("healthy", count(Health::Healthy)),
            ("degraded", count(Health::Degraded)),
            ("unhealthy", count(Health::Unhealthy)),
            ("unknown", count(Health::Unknown)),
        ]
    }
}

/// The PFs below healthy by their counters, and why.
pub(crate) type CounterConditions = BTreeMap<PciAddress, Condition>;

/// The health of every NIC function of `inventory`, its PFs' counters
/// judged `counters`.
pub(crate) fn assess(
    inventory: &Inventory,
    counters: &CounterConditions,
    updated_at: i64,
) -> HealthReport {
    let devices = inventory
        .nics
        .iter()
        .map(|nic| {
            let (health, message) = state_of(nic, inventory, counters);
            DeviceState {
                device: dra_model::names::device_name(nic),
                health,
                message,
            }
        })
        .collect();
    HealthReport {
        devices,
        updated_at,
    }
}

/// Link state first (a link down is UNHEALTHY whatever the counters say),
/// then the counters of the function's PF.
fn state_of(
    nic: &NicFunction,
    inventory: &Inventory,
    counters: &CounterConditions,
) -> (Health, String) {
    let (health, message) = link_state(nic, inventory);
    if health == Health::Unhealthy {
        return (health, message);
    }
    let (pf, via) = match nic.kind {
        FunctionKind::Vf { physfn, .. } => (physfn, format!("follows PF {physfn}: ")),
        FunctionKind::Pf { .. } => (nic.address, String::new()),
    };
    match counters.get(&pf) {
        Some(c) if c.level == Level::Unhealthy => (Health::Unhealthy, format!("{via}{}", c.cause)),
        Some(c) if c.level == Level::Degraded => {
            (Health::Degraded, format!("{via}degraded: {}", c.cause))
        }
        _ => (health, message),
    }
}

/// The health by link and RDMA-port state alone.
fn link_state(nic: &NicFunction, inventory: &Inventory) -> (Health, String) {
    if let Some(n) = nic.netdevs.iter().find(|n| {
        matches!(
            n.operstate.as_deref(),
            Some("down" | "lowerlayerdown" | "notpresent")
        )
    }) {
        return (Health::Unhealthy, format!("link of {} is down", n.name));
    }
    for rdma in &nic.rdma {
        if let Some(p) = rdma.ports.iter().find(|p| {
            p.state
                .as_deref()
                .is_some_and(|s| !s.eq_ignore_ascii_case("ACTIVE"))
        }) {
            let state = p.state.as_deref().unwrap_or_default();
            let message = format!("RDMA port {}/{} is {state}", rdma.name, p.number);
            return (Health::Unhealthy, message);
        }
    }
    if let FunctionKind::Vf { physfn, .. } = nic.kind
        && nic.netdevs.is_empty()
        && nic.rdma.is_empty()
        && let Some(pf) = inventory.nic(physfn)
    {
        let (health, message) = link_state(pf, inventory);
        return (health, format!("follows PF {physfn}: {message}"));
    }
    let known = nic.netdevs.iter().any(|n| n.operstate.is_some())
        || nic
            .rdma
            .iter()
            .flat_map(|r| &r.ports)
            .any(|p| p.state.is_some());
    if known {
        (Health::Healthy, "link and RDMA ports up".to_string())
    } else {
        (Health::Unknown, "no link or port state".to_string())
    }
}

/// The `DRAResourceHealth` service, in both versions the kubelet knows:
/// `v1` (GA in 1.37, which the kubelet picks when both are listed) and
/// `v1alpha1` (the only one before 1.37). One stream of reports feeds both.
#[derive(Clone)]
pub(crate) struct HealthService {
    pool: String,
    reports: watch::Receiver<Arc<HealthReport>>,
    timeout_seconds: i64,
}

impl HealthService {
    /// Streams `reports` for devices of `pool`; the kubelet may treat a
    /// device as UNKNOWN after `timeout_seconds` without a report.
    pub(crate) fn new(
        pool: &str,
        reports: watch::Receiver<Arc<HealthReport>>,
        timeout_seconds: i64,
    ) -> Self {
        Self {
            pool: pool.to_string(),
            reports,
            timeout_seconds,
        }
    }

    /// Every report as `to_message` turns it, the current one first
    /// (`WatchStream` yields it at once), then each new one.
    fn stream<M: Send + 'static>(
        &self,
        to_message: impl Fn(&Self, &HealthReport) -> M + Send + 'static,
    ) -> Pin<Box<dyn Stream<Item = Result<M, tonic::Status>> + Send>> {
        let this = self.clone();
        Box::pin(WatchStream::new(self.reports.clone()).map(move |r| Ok(to_message(&this, &r))))
    }
}

/// The same message in both API versions: their types differ only by
/// package, so one macro writes the conversion and the server for each.
macro_rules! health_version {
    ($api:ident, $convert:ident) => {
        impl HealthService {
            fn $convert(&self, report: &HealthReport) -> $api::NodeWatchResourcesResponse {
                let devices = report.devices.iter().map(|d| $api::DeviceHealth {
                    device: Some($api::DeviceIdentifier {
                        pool_name: self.pool.clone(),
                        device_name: d.device.clone(),
                    }),
                    health: match d.health {
                        Health::Healthy | Health::Degraded => $api::HealthStatus::Healthy,
                        Health::Unhealthy => $api::HealthStatus::Unhealthy,
                        Health::Unknown => $api::HealthStatus::Unknown,
                    } as i32,
                    last_updated_time: report.updated_at,
                    health_check_timeout_seconds: self.timeout_seconds,
                    message: d.message.clone(),
                });
                $api::NodeWatchResourcesResponse {
                    devices: devices.collect(),
                }
            }
        }

        #[tonic::async_trait]
        impl $api::dra_resource_health_server::DraResourceHealth for HealthService {
            type NodeWatchResourcesStream = Pin<
                Box<
                    dyn Stream<Item = Result<$api::NodeWatchResourcesResponse, tonic::Status>>
                        + Send,
                >,
            >;

            async fn node_watch_resources(
                &self,
                _: tonic::Request<$api::NodeWatchResourcesRequest>,
            ) -> Result<tonic::Response<Self::NodeWatchResourcesStream>, tonic::Status> {
                Ok(tonic::Response::new(self.stream(Self::$convert)))
            }
        }
    };
}

health_version!(v1, to_v1);
health_version!(v1alpha1, to_v1alpha1);

#[cfg(test)]
mod tests;
