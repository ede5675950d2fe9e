//! What the slice publisher publishes: the device model built from the
//! node's labels and the fabric config in force, or no device at all when
//! the tenant fencing of the NICs is unknown.
//!
//! Fails closed (issue 29): the agent never publishes a NIC with less
//! fencing than its configuration asks for. A fabric config that does not
//! read or validate keeps the last valid one ([`FabricConfig`]); with none,
//! or when the node's labels give no valid model, nothing is published
//! (the publisher then deletes this node's slices). Each time that starts,
//! changes or ends it is said once: a log line naming the file, entry and
//! line, the metrics of [`ConfigMetrics`], an Event on the Node and
//! `/readyz` (not ready until fixed).

use std::collections::BTreeMap;
use std::sync::Arc;

use dra_model::ModelConfig;
use dra_model::fabric::FabricFile;
use k8s_openapi::api::core::v1::Node;
use kube::core::PartialObjectMeta;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};

use super::fabric_config::FabricConfig;
use super::node_events::{EventType, NodeEvents, post_soon};
use ainic_dra_daemon::follow::{Lifetime, Seen, watch_for};

/// Event reason: the fabric config file is invalid.
pub(crate) const FABRIC_INVALID: &str = "FabricConfigInvalid";
/// Event reason: the node's labels (with the flags) give no valid model.
pub(crate) const MODEL_INVALID: &str = "DeviceModelInvalid";
/// Event reason: the devices published are as configured again.
pub(crate) const CONFIG_VALID: &str = "ConfigValid";

/// Builds the device model from the node's labels and the fabric config
/// file in force (`None`: no file configured).
pub(crate) type Rebuild = Arc<
    dyn Fn(BTreeMap<String, String>, Option<&FabricFile>) -> anyhow::Result<ModelConfig>
        + Send
        + Sync,
>;

/// What the publisher publishes.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Desired {
    /// The devices of this model (boxed: the other variant is empty).
    Model(Box<ModelConfig>),
    /// No device: their tenant fencing is not known.
    Withheld,
}

/// Why the devices published are less than configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    /// The Event reason ([`FABRIC_INVALID`], [`MODEL_INVALID`]).
    pub reason: &'static str,
    /// One line: what is wrong (the file, entry and line) and what the
    /// agent does meanwhile.
    pub message: String,
}

/// What to publish with `fabric`, `build` making the model from the file
/// in force, and what is wrong if anything.
pub(crate) fn decide(
    fabric: &FabricConfig,
    build: impl FnOnce(Option<&FabricFile>) -> anyhow::Result<ModelConfig>,
) -> (Desired, Option<Problem>) {
    let Some(file) = fabric.in_force() else {
        let message = format!(
            "{}; no valid fabric config has been read since the agent started, so the tenant fencing of the NICs is unknown: publishing no devices until the file is fixed",
            fabric.error().unwrap_or("invalid fabric config")
        );
        let problem = Problem {
            reason: FABRIC_INVALID,
            message,
        };
        return (Desired::Withheld, Some(problem));
    };
    match build(file) {
        Ok(model) => {
            let problem = fabric.error().map(|error| Problem {
                reason: FABRIC_INVALID,
                message: format!(
                    "{error}; keeping the last valid fabric config until the file is fixed"
                ),
            });
            (Desired::Model(Box::new(model)), problem)
        }
        Err(error) => {
            let message = format!(
                "the node's labels give no valid device model: {error:#}; publishing no devices until they are fixed"
            );
            let problem = Problem {
                reason: MODEL_INVALID,
                message,
            };
            (Desired::Withheld, Some(problem))
        }
    }
}

/// Metrics of what is published against what is configured (prefixed
/// `ainic_dra_` in the agent's registry).
#[derive(Clone, Debug, Default)]
pub(crate) struct ConfigMetrics {
    fabric_valid: Gauge,
    fabric_errors: Counter,
    withheld: Gauge,
}

impl ConfigMetrics {
    /// Adds the metrics to `registry`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "fabric_config_valid",
            "1 when the fabric config file read and validated at its last read (or none is configured); 0 while its content is invalid and ignored",
            self.fabric_valid.clone(),
        );
        registry.register(
            "fabric_config_errors",
            "Invalid contents of the fabric config file seen (each is logged once and posted as an Event on the Node)",
            self.fabric_errors.clone(),
        );
        registry.register(
            "devices_withheld",
            "1 while the agent publishes no devices because their tenant fencing is unknown (no valid fabric config read yet, or node labels that give no valid device model)",
            self.withheld.clone(),
        );
    }
}

/// Says, once per change, when the devices published are less than
/// configured: log, metrics, Event on the Node, readiness.
pub(crate) struct Reporter {
    /// The metrics it keeps.
    pub metrics: ConfigMetrics,
    /// `/readyz`'s reason to be not ready.
    pub readiness: watch::Sender<Option<String>>,
    /// Where Events about the Node go.
    pub events: Arc<dyn NodeEvents>,
    /// The problem last reported; `None` before the first report.
    last: Option<Option<Problem>>,
    last_fabric_error: Option<String>,
}

impl Reporter {
    /// A reporter that has reported nothing yet.
    pub(crate) fn new(
        metrics: ConfigMetrics,
        readiness: watch::Sender<Option<String>>,
        events: Arc<dyn NodeEvents>,
    ) -> Self {
        Reporter {
            metrics,
            readiness,
            events,
            last: None,
            last_fabric_error: None,
        }
    }

    /// Reports the outcome of one [`decide`].
    pub(crate) fn report(
        &mut self,
        fabric: &FabricConfig,
        desired: &Desired,
        problem: Option<Problem>,
    ) {
        let fabric_error = fabric.error().map(str::to_string);
        self.metrics
            .fabric_valid
            .set(i64::from(fabric_error.is_none()));
        if fabric_error.is_some() && fabric_error != self.last_fabric_error {
            self.metrics.fabric_errors.inc();
        }
        self.last_fabric_error = fabric_error;
        self.metrics
            .withheld
            .set(i64::from(*desired == Desired::Withheld));
        if self.last.as_ref() == Some(&problem) {
            return;
        }
        self.readiness
            .send_replace(problem.as_ref().map(|p| p.message.clone()));
        let events = self.events.clone();
        match &problem {
            Some(p) => {
                tracing::error!(reason = p.reason, "{}", p.message);
                post_soon(events, EventType::Warning, p.reason, p.message.clone());
            }
            None if matches!(self.last, Some(Some(_))) => {
                let note = "the fabric config and node labels are valid: publishing the devices as configured";
                tracing::info!("{note}");
                post_soon(events, EventType::Normal, CONFIG_VALID, note.into());
            }
            None => {}
        }
        self.last = Some(problem);
    }
}

/// What [`follow`] follows.
pub(crate) struct Inputs {
    /// This node's name.
    pub node: String,
    /// Its labels as last read.
    pub labels: BTreeMap<String, String>,
    /// The fabric config file.
    pub fabric: watch::Receiver<FabricConfig>,
    /// Builds the model.
    pub rebuild: Rebuild,
    /// How long each watch of the Node lasts.
    pub watches: Lifetime,
}

/// Follows the node's labels (a watch of the Node) and the fabric config;
/// on each change decides again, reports, and nudges the publisher when
/// what to publish changed. Starts from `first`.
pub(crate) fn follow(
    client: &kube::Client,
    mut inputs: Inputs,
    first: Desired,
    mut reporter: Reporter,
    nudge: mpsc::Sender<()>,
    tasks: &ainic_dra_daemon::Tasks,
) -> watch::Receiver<Desired> {
    let (desired_tx, desired) = watch::channel(first);
    // Its metadata alone: labels are all this follows, and the kubelet's
    // status updates then cost a small event, not a whole Node to decode.
    let nodes: kube::Api<PartialObjectMeta<Node>> = kube::Api::all(client.clone());
    let fields = format!("metadata.name={}", inputs.node);
    let mut seen = watch_for(nodes, fields, "node", inputs.watches);
    let mut fabric = Some(inputs.fabric.clone());
    tasks.spawn_critical("node label watch", async move {
        loop {
            tokio::select! {
                event = seen.recv() => match event {
                    Some(Seen::Applied(node)) => {
                        let now = node.metadata.labels.unwrap_or_default();
                        if now == inputs.labels {
                            continue;
                        }
                        inputs.labels = now;
                    }
                    Some(_) => continue,
                    None => return,
                },
                alive = changed(&mut fabric) => if !alive {
                    fabric = None;
                    continue;
                },
            }
            let state = inputs.fabric.borrow_and_update().clone();
            let (rebuild, labels, fabric_now) =
                (inputs.rebuild.clone(), inputs.labels.clone(), state.clone());
            // Off the async workers: the fabric sources may run a command (LLDP).
            let decided = tokio::task::spawn_blocking(move || {
                decide(&fabric_now, |file| rebuild(labels, file))
            })
            .await;
            let Ok((now, problem)) = decided else {
                tracing::error!("the device model rebuild panicked; keeping what is published");
                continue;
            };
            reporter.report(&state, &now, problem);
            if desired_tx.send_if_modified(|d| std::mem::replace(d, now) != *d) {
                tracing::info!(node = %inputs.node, "node labels or fabric config changed what is published; republishing");
                let _ = nudge.try_send(());
            }
        }
    });
    desired
}

/// Waits for the fabric config to change: `false` once nothing can change
/// it any more (no file configured), pending for ever after that.
async fn changed(fabric: &mut Option<watch::Receiver<FabricConfig>>) -> bool {
    match fabric {
        Some(rx) => rx.changed().await.is_ok(),
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Mutex;

    use super::*;
    use dra_model::ModelOptions;

    fn file(text: &str) -> Result<FabricFile, String> {
        FabricFile::parse(text, "fabric.yaml").map_err(|e| e.to_string())
    }

    fn model(labels: &BTreeMap<String, String>, fabric: Option<&FabricFile>) -> ModelConfig {
        let mut o = ModelOptions::new("node-a");
        o.fabric.file = fabric.cloned();
        o.fabric.node_labels = labels.clone();
        ModelConfig::new(o).unwrap()
    }

    #[derive(Default)]
    struct Recorded(Mutex<Vec<(EventType, String)>>);

    impl NodeEvents for Recorded {
        fn post(
            &self,
            kind: EventType,
            reason: &str,
            _note: &str,
        ) -> Pin<Box<dyn Future<Output = Result<(), kube::Error>> + Send + '_>> {
            self.0.lock().unwrap().push((kind, reason.to_string()));
            Box::pin(async { Ok(()) })
        }
    }

    /// Issue 29 item 1: an invalid entry anywhere in the file made the
    /// agent use no file at all, publishing fenced NICs with no tenant.
    #[test]
    fn an_invalid_first_config_publishes_nothing() {
        let state = FabricConfig::first(file(
            "defaults: {tenant: team-a}\nnodes: {b: {tenant: B_}}\n",
        ));
        let none = BTreeMap::new();
        let (desired, problem) = decide(&state, |f| Ok(model(&none, f)));
        assert_eq!(desired, Desired::Withheld);
        let problem = problem.unwrap();
        assert_eq!(problem.reason, FABRIC_INVALID);
        assert!(
            problem.message.contains("fabric.yaml")
                && problem.message.contains("nodes.b.tenant")
                && problem.message.contains("line 2")
                && problem.message.contains("publishing no devices"),
            "{}",
            problem.message
        );
    }

    #[test]
    fn an_invalid_later_config_keeps_the_last_valid_one() {
        let good = file("defaults: {tenant: team-a}\n");
        let state = FabricConfig::first(good.clone()).next(file("defaults: {tenant: 7_}\n"));
        let none = BTreeMap::new();
        let (desired, problem) = decide(&state, |f| Ok(model(&none, f)));
        assert_eq!(
            desired,
            Desired::Model(Box::new(model(&none, Some(&good.unwrap()))))
        );
        assert!(problem.unwrap().message.contains("keeping the last valid"));
    }

    #[test]
    fn labels_that_give_no_model_publish_nothing() {
        let (desired, problem) = decide(&FabricConfig::NotConfigured, |_| {
            anyhow::bail!("node label ainic.amd.com/extended-resources=\"maybe\"")
        });
        assert_eq!(desired, Desired::Withheld);
        assert_eq!(problem.unwrap().reason, MODEL_INVALID);
    }

    #[tokio::test]
    async fn each_change_is_reported_once() {
        let events = Arc::new(Recorded::default());
        let (ready_tx, ready) = watch::channel(Some("waiting".to_string()));
        let metrics = ConfigMetrics::default();
        let mut reporter = Reporter::new(metrics.clone(), ready_tx, events.clone());
        let none = BTreeMap::new();
        let mut state = FabricConfig::first(file("defaults: {tenant: team-a}\n"));
        let (desired, problem) = decide(&state, |f| Ok(model(&none, f)));
        reporter.report(&state, &desired, problem);
        assert_eq!(*ready.borrow(), None, "a valid start is ready");
        for _ in 0..2 {
            state = state.next(file("defaults: {tenant: X}\n"));
            let (desired, problem) = decide(&state, |f| Ok(model(&none, f)));
            reporter.report(&state, &desired, problem);
        }
        assert!(
            ready
                .borrow()
                .as_ref()
                .is_some_and(|r| r.contains("keeping"))
        );
        state = state.next(file("defaults: {tenant: team-b}\n"));
        let (desired, problem) = decide(&state, |f| Ok(model(&none, f)));
        reporter.report(&state, &desired, problem);
        assert_eq!(*ready.borrow(), None);
        for _ in 0..100 {
            if events.0.lock().unwrap().len() >= 2 {
                break;
            }
            tokio::task::yield_now().await;
        }
        let posted = events.0.lock().unwrap().clone();
        assert_eq!(
            posted,
            [
                (EventType::Warning, FABRIC_INVALID.to_string()),
                (EventType::Normal, CONFIG_VALID.to_string())
            ]
        );
        assert_eq!(metrics.fabric_errors.get(), 1);
        assert_eq!(metrics.fabric_valid.get(), 1);
    }
}
