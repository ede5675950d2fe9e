//! Prometheus metrics of the node agent: prepare/unprepare counts, errors
//! and latency, devices by health state, the NICs' hardware counter rates
//! and health levels, and whether the kubelet accepted the plugin.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use dra_model::health::{Level, Transition};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A kubelet call the driver serves.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Operation {
    /// NodePrepareResources, per claim.
    Prepare,
    /// NodeUnprepareResources, per claim.
    Unprepare,
}

impl Operation {
    /// The label value: `prepare` or `unprepare`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Prepare => "prepare",
            Operation::Unprepare => "unprepare",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RateLabels {
    device: String,
    source: String,
    counter: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceLabels {
    device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    device: String,
    to: &'static str,
    counter: String,
}

/// The NICs' counter health metrics.
#[derive(Default)]
struct NicMetrics {
    rates: Family<RateLabels, Gauge<f64, AtomicU64>>,
    levels: Family<DeviceLabels, Gauge>,
    transitions: Family<TransitionLabels, Counter>,
}

impl NicMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "ainic_dra_nic_counter_per_minute",
            "Rate of a NIC's hardware error counter over the health window, per minute, by PF device, port or netdev, and counter",
            self.rates.clone(),
        );
        registry.register(
            "ainic_dra_nic_health_level",
            "A PF's health by its hardware counters (its VFs share it): 0 healthy, 1 degraded, 2 unhealthy",
            self.levels.clone(),
        );
        registry.register(
            "ainic_dra_nic_health_transitions",
            "Times a PF changed health level, by the level entered and the counter that crossed its threshold (for a recovery, the one it recovered from)",
            self.transitions.clone(),
        );
    }
}

/// The registry and every metric in it.
pub struct Metrics {
    registry: Registry,
    claims: Family<OperationLabels, Counter>,
    errors: Family<OperationLabels, Counter>,
    latency: Family<OperationLabels, Histogram>,
    devices: Family<StateLabels, Gauge>,
    registered: Gauge,
    reclaimed: Counter,
    respecs: Counter,
    stale: Counter,
    http_accept_errors: Counter,
    http_evicted: Counter,
    nics: NicMetrics,
}

fn latency_histogram() -> Histogram {
    // 50 µs .. ~1.6 s.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let claims = Family::<OperationLabels, Counter>::default();
        let errors = Family::<OperationLabels, Counter>::default();
        let latency = Family::<OperationLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let devices = Family::<StateLabels, Gauge>::default();
        let registered = Gauge::default();
        let reclaimed = Counter::default();
        let respecs = Counter::default();
        let stale = Counter::default();
        let http_accept_errors = Counter::default();
        let http_evicted = Counter::default();
        registry.register(
            "ainic_dra_claims",
            "Claims handled, by operation",
            claims.clone(),
        );
        registry.register(
            "ainic_dra_claim_errors",
            "Claims that failed, by operation",
            errors.clone(),
        );
        registry.register(
            "ainic_dra_claim_duration_seconds",
            "Time to prepare or unprepare one claim",
            latency.clone(),
        );
        registry.register(
            "ainic_dra_devices",
            "Devices on this node, by health state",
            devices.clone(),
        );
        registry.register(
            "ainic_dra_kubelet_registered",
            "1 when the kubelet accepted the DRA plugin",
            registered.clone(),
        );
        registry.register(
            "ainic_dra_orphaned_claims_reclaimed",
            "Prepared claims the orphan sweep unprepared (gone, recreated or allocated elsewhere)",
            reclaimed.clone(),
        );
        registry.register(
            "ainic_dra_cdi_specs_rebuilt",
            "CDI specs of prepared claims rebuilt because the kernel renumbered or renamed their devices",
            respecs.clone(),
        );
        registry.register(
            "ainic_dra_stale_claims",
            "Times a prepared claim was found naming a device that is gone (its CDI spec was removed)",
            stale.clone(),
        );
        registry.register(
            "ainic_dra_http_accept_errors",
            "Times the HTTP endpoint could not accept a connection (e.g. out of file descriptors); each is followed by a backoff",
            http_accept_errors.clone(),
        );
        registry.register(
            "ainic_dra_http_connections_evicted",
            "HTTP connections closed to make room for a newer one at the connection cap",
            http_evicted.clone(),
        );
        let nics = NicMetrics::default();
        nics.register(&mut registry);
        Self {
            nics,
            registry,
            claims,
            errors,
            latency,
            devices,
            registered,
            reclaimed,
            respecs,
            stale,
            http_accept_errors,
            http_evicted,
        }
    }
}

impl Metrics {
    /// The registry, for other components to add their metrics to.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// Records one claim handled by `operation`.
    pub fn observe(&self, operation: Operation, took: Duration, ok: bool) {
        let labels = OperationLabels {
            operation: operation.as_str(),
        };
        self.claims.get_or_create(&labels).inc();
        if !ok {
            self.errors.get_or_create(&labels).inc();
        }
        self.latency
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// Sets the device counts per state (`healthy`, `unhealthy`, `unknown`).
    pub fn set_devices(&self, by_state: &[(&str, usize)]) {
        for (state, count) in by_state {
            let labels = StateLabels {
                state: (*state).to_string(),
            };
            self.devices
                .get_or_create(&labels)
                .set(i64::try_from(*count).unwrap_or(i64::MAX));
        }
    }

    /// Sets the rate of one counter of a PF (`device`) port or netdev.
    pub fn set_counter_rate(&self, device: &str, source: &str, counter: &str, per_minute: f64) {
        let labels = RateLabels {
            device: device.to_string(),
            source: source.to_string(),
            counter: counter.to_string(),
        };
        self.nics.rates.get_or_create(&labels).set(per_minute);
    }

    /// Forgets every counter rate (the counters read changed).
    pub fn clear_counter_rates(&self) {
        self.nics.rates.clear();
    }

    /// Sets a PF's health level by its counters.
    pub fn set_nic_level(&self, device: &str, level: Level) {
        let labels = DeviceLabels {
            device: device.to_string(),
        };
        self.nics.levels.get_or_create(&labels).set(level as i64);
    }

    /// Counts a PF's change of level.
    pub fn nic_transition(&self, device: &str, t: &Transition) {
        let counter = t.cause.as_ref().or(t.was.as_ref());
        let labels = TransitionLabels {
            device: device.to_string(),
            to: t.to.as_str(),
            counter: counter.map(|c| c.counter.clone()).unwrap_or_default(),
        };
        self.nics.transitions.get_or_create(&labels).inc();
    }

    /// Counts claims the orphan sweep unprepared.
    pub fn reclaimed(&self, claims: usize) {
        self.reclaimed.inc_by(claims as u64);
    }

    /// Counts specs rebuilt from today's device numbers.
    pub fn respecced(&self) {
        self.respecs.inc();
    }

    /// Counts prepared claims found naming a device that is gone.
    pub fn stale(&self) {
        self.stale.inc();
    }

    /// Counts a failed accept of the HTTP endpoint.
    pub fn http_accept_failed(&self) {
        self.http_accept_errors.inc();
    }

    /// Counts an HTTP connection closed to make room at the cap.
    pub fn http_connection_evicted(&self) {
        self.http_evicted.inc();
    }

    /// Sets whether the kubelet accepted the plugin.
    pub fn set_registered(&self, registered: bool) {
        self.registered.set(i64::from(registered));
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_errors_and_latency_per_operation() {
        let m = Metrics::default();
        m.observe(Operation::Prepare, Duration::from_millis(1), true);
        m.observe(Operation::Prepare, Duration::from_millis(2), false);
        m.set_devices(&[("healthy", 3), ("unhealthy", 1)]);
        m.set_registered(true);
        let text = m.encode();
        assert!(
            text.contains("ainic_dra_claims_total{operation=\"prepare\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("ainic_dra_claim_errors_total{operation=\"prepare\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("ainic_dra_claim_duration_seconds_count{operation=\"prepare\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("ainic_dra_devices{state=\"unhealthy\"} 1"),
            "{text}"
        );
        assert!(text.contains("ainic_dra_kubelet_registered 1"), "{text}");
    }
}
