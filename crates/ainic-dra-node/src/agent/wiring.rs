//! The publishing side of the agent, wired once the Node is read: the
//! classic device plugin, the watches that nudge the publisher (its
//! slices, the Node's labels, counter verdicts, the fabric config file)
//! and the publisher itself, each a task of the supervisor's.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ainic_dra_daemon::Tasks;
use ainic_dra_daemon::follow::{Lifetime, Seen, watch_for};
use ainic_dra_daemon::server_version;
use ainic_dra_daemon::supervise::Done;
use anyhow::Result;
use dra_model::classic::ClassicConfig;
use dra_model::health::Verdicts;
use dra_model::{FeatureGate, ModelConfig, Release};
use k8s_openapi::api::resource::v1::ResourceSlice;
use tokio::sync::{Notify, mpsc, watch};

use crate::classic::ClassicSettings;
use crate::desired::{self, ConfigMetrics, Desired, Inputs, Rebuild, Reporter};
use crate::fabric_config;
use crate::health::counters::HealthEvent;
use crate::node_events::{KubeNodeEvents, NodeEvents, post_soon};
use crate::plugin::claims::KubeClaims;
use crate::publisher::{Backoff, PublisherConfig, PublisherMetrics, RunOptions, SlicePublisher};
use crate::{AgentError, Serving};

/// The model as published to a server of `release` that dropped the
/// fields of the `refused` gates: `release`'s defaults under the
/// configured overrides, the refused gates off whatever was configured.
fn for_server(
    model: ModelConfig,
    release: Release,
    refused: &BTreeSet<FeatureGate>,
) -> ModelConfig {
    let mut gates = model.gates().clone().with_release(release);
    for &gate in refused {
        gates.set(gate, false);
    }
    model.with_gates(gates)
}

/// Nudges the publisher whenever a watch sees this node's slices of this
/// driver change: someone else's edit or delete is repaired within
/// moments, not at the next resync. Our own writes nudge too; the sync
/// they cause finds nothing to do and writes nothing. A replay (the watch
/// could not resume: an API server restarted or long gone) also wakes
/// `replayed`, so the server's release is asked again (an upgrade).
fn nudge_on_slice_changes(
    client: &kube::Client,
    (node, driver): (&str, &str),
    (nudge, replayed): (mpsc::Sender<()>, Arc<Notify>),
    lifetime: Lifetime,
    tasks: &Tasks,
) {
    let slices: kube::Api<ResourceSlice> = kube::Api::all(client.clone());
    let fields = format!("spec.nodeName={node},spec.driver={driver}");
    let mut seen = watch_for(slices, fields, "resource slices", lifetime);
    tasks.spawn_critical("slice watch", async move {
        // The first replay is the start: the release was just learnt.
        let mut started = false;
        while let Some(seen) = seen.recv().await {
            if matches!(seen, Seen::Restarted) && std::mem::replace(&mut started, true) {
                replayed.notify_one();
            }
            // Full means a nudge is already waiting: one is enough.
            if let Err(mpsc::error::TrySendError::Closed(())) = nudge.try_send(()) {
                return;
            }
        }
    });
}

/// Nudges the publisher whenever a NIC's counter verdict changes, so its
/// taint is published at once, not at the next resync.
async fn nudge_on_verdicts(mut verdicts: watch::Receiver<Arc<Verdicts>>, nudge: mpsc::Sender<()>) {
    while verdicts.changed().await.is_ok() {
        // Full means a nudge is already waiting: one is enough.
        if let Err(mpsc::error::TrySendError::Closed(())) = nudge.try_send(()) {
            return;
        }
    }
    // No sender: counter health is off, and no verdict will ever come.
    // Waits rather than ends, which would stop the agent (a critical task).
    std::future::pending::<()>().await;
}

/// Posts the counter health Events queued since start, then each as it
/// comes, on the Node.
async fn post_health_events(mut queued: mpsc::Receiver<HealthEvent>, sink: Arc<dyn NodeEvents>) {
    while let Some(event) = queued.recv().await {
        post_soon(sink.clone(), event.kind, event.reason, event.note);
    }
}

/// A node switched to DRA for `amd.com/nic` / `amd.com/vnic` must not
/// offer them through the classic device plugin too: the scheduler would
/// use whichever the node advertises, and the other path would sit idle or
/// fight over the NICs.
fn refuse_both_paths(node: &str, driver: &str, classic: &ClassicConfig) -> Result<()> {
    let extended = [
        dra_model::names::EXTENDED_NIC,
        dra_model::names::EXTENDED_VNIC,
    ];
    let both: Vec<&str> = classic
        .resources
        .iter()
        .map(|r| r.name.as_str())
        .filter(|name| extended.contains(name))
        .collect();
    if both.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "node {node} is labelled {}/{}=dra, so DRA serves {}, but the classic device plugin (--device-plugin) is configured to serve it too: remove {} from the device plugin's resources, or label the node {}=classic",
        driver,
        dra_model::names::LABEL_EXTENDED_RESOURCES,
        both.join(" and "),
        both.join(", "),
        dra_model::names::LABEL_EXTENDED_RESOURCES,
    )
}

/// What the publishing side of the agent is wired from.
pub(super) struct Wiring {
    pub(super) client: kube::Client,
    pub(super) node: String,
    pub(super) driver: String,
    pub(super) model: Rebuild,
    pub(super) fabric_config: Option<PathBuf>,
    pub(super) fabric_poll_every: Duration,
    pub(super) classic: Option<ClassicSettings>,
    pub(super) resync_every: Duration,
    pub(super) kubernetes_version: Option<Release>,
    pub(super) watches: Lifetime,
    pub(super) publisher_metrics: PublisherMetrics,
    pub(super) config_metrics: ConfigMetrics,
    pub(super) published: watch::Sender<Option<String>>,
    pub(super) health_events: Option<mpsc::Receiver<HealthEvent>>,
    pub(super) stop: watch::Receiver<bool>,
    pub(super) tasks: Tasks,
}

/// The tasks to wait for at shutdown.
pub(super) struct Running {
    pub(super) publishing: Done,
    pub(super) classic: Vec<Done>,
    pub(super) driver: Arc<crate::plugin::Driver>,
}

impl Running {
    /// Once the stop is sent: waits for the publisher's last round, the
    /// prepares and unprepares under way (up to `deadline`) and the
    /// classic plugin's tasks.
    pub(super) async fn finish(self, deadline: Duration) {
        self.publishing.wait().await;
        self.driver.drain(deadline).await;
        for task in self.classic {
            task.wait().await;
        }
    }
}

impl Wiring {
    /// Reads the Node, builds the first model, starts the classic device
    /// plugin, takes the state directory over, and starts the publisher.
    /// Fails when the node's labels or the flags give no valid model at
    /// start. The classic plugin serves before the state is owned (it keeps
    /// none), so a rolling update leaves `amd.com/nic` no moment without a
    /// plugin; the publisher starts after, so an old and a new agent never
    /// publish the node's slices at once.
    pub(super) async fn wire(mut self, started: &mut Serving) -> Result<Running, AgentError> {
        let node = super::read_node(&self.client, &self.node, Backoff::default()).await;
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let fabric = fabric_config::follow(
            self.fabric_config.clone(),
            self.fabric_poll_every,
            &self.tasks,
        );
        let state = fabric.borrow().clone();
        let rebuild = checked_rebuild(self.model.clone(), self.classic.as_ref());
        // Also what the classic path scores with; its error stops the agent.
        // Off the async workers: the fabric sources may run a command (LLDP).
        let fabric_now = state.in_force().flatten();
        let build = || rebuild(labels.clone(), fabric_now);
        let model = match tokio::runtime::Handle::current().runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(build),
            // A current-thread runtime has no other worker to hand off to.
            _ => build(),
        }
        .map_err(|e| AgentError::Model(e.into()))?;
        let (first, problem) = desired::decide(&state, |_| Ok(model.clone()));
        let events = Arc::new(KubeNodeEvents::new(
            &self.client,
            &node.metadata,
            &self.driver,
        ));
        if let Some(queued) = self.health_events.take() {
            let health = KubeNodeEvents::new(&self.client, &node.metadata, &self.driver)
                .with_action("AssessNicHealth");
            let posting = post_health_events(queued, Arc::new(health));
            self.tasks.spawn_critical("health events", posting);
        }
        let mut reporter =
            Reporter::new(self.config_metrics.clone(), self.published.clone(), events);
        reporter.report(&state, &first, problem);

        // With the classic path on, DRA publishes only the devices left to it.
        let dra_split = self.classic.as_ref().map(|s| s.config.clone());
        let classic = match self.classic.take() {
            Some(mut settings) => {
                // The scoring's rails come from the same fabric facts as DRA's.
                settings.fabric = Some(model);
                let inventory = started.inventory.clone();
                crate::classic::start(settings, inventory, self.stop.clone(), &self.tasks)
                    .map_err(|e| AgentError::Classic(e.into()))?
            }
            None => Vec::new(),
        };
        let (nudge_tx, nudges) = mpsc::channel(1);
        let replayed = Arc::new(Notify::new());
        let scope = (self.node.as_str(), self.driver.as_str());
        let nudging = (nudge_tx.clone(), replayed.clone());
        nudge_on_slice_changes(&self.client, scope, nudging, self.watches, &self.tasks);
        let inputs = Inputs {
            node: self.node.clone(),
            labels,
            fabric,
            rebuild,
            watches: self.watches,
        };
        let nudge = nudge_tx.clone();
        let desired = desired::follow(&self.client, inputs, first, reporter, nudge, &self.tasks);
        let claims = Arc::new(KubeClaims::new(self.client.clone()));
        let driver = started.own_state(claims).await?;
        let nudging = (nudge_tx, nudges, replayed);
        let publishing = self.spawn_publisher(started, desired, dra_split, nudging);
        Ok(Running {
            publishing,
            classic,
            driver,
        })
    }

    /// The publish loop on a task of its own: learns the server's release
    /// (unless given), then publishes what `desired` says, nothing while
    /// it is [`Desired::Withheld`].
    fn spawn_publisher(
        self,
        started: &Serving,
        desired: watch::Receiver<Desired>,
        dra_split: Option<ClassicConfig>,
        (nudge, nudges, replayed): (mpsc::Sender<()>, mpsc::Receiver<()>, Arc<Notify>),
    ) -> Done {
        let publisher = SlicePublisher::new(
            self.client.clone(),
            PublisherConfig {
                node_name: self.node,
                driver_name: self.driver,
                backoff: Backoff::default(),
            },
        )
        .with_metrics(self.publisher_metrics);
        let refused = publisher.refused_gates();
        let inventory = started.inventory.clone();
        let verdicts = started.verdicts.clone();
        let nudging = nudge_on_verdicts(started.verdicts.clone(), nudge.clone());
        self.tasks.spawn_critical("verdict nudges", nudging);
        let attributes = started.attributes.clone();
        let mut options = RunOptions::new(self.resync_every);
        options.follow = Some(started.inventory.clone());
        options.nudges = Some(nudges);
        let (client, explicit, mut stopped) = (self.client, self.kubernetes_version, self.stop);
        let tasks = self.tasks.clone();
        self.tasks.spawn_critical("publisher", async move {
            let release = match explicit {
                Some(release) => release,
                None => {
                    match server_version::learn(&client, Backoff::default(), &mut stopped).await {
                        Some(release) => release,
                        None => return,
                    }
                }
            };
            let (release_tx, releases) = watch::channel(release);
            if explicit.is_none() {
                // A control plane upgraded under a running agent.
                let every = options.resync_every;
                let asked = server_version::Asked { every, replayed };
                let following = server_version::follow(client, asked, release_tx, nudge);
                tasks.spawn_critical("server version follower", following);
            }
            let build = move || {
                let Desired::Model(model) = desired.borrow().clone() else {
                    // Fencing unknown: no device at all (the sync deletes ours).
                    return Ok(Vec::new());
                };
                let release = *releases.borrow();
                let mut current = inventory.borrow().clone();
                if let Some(split) = &dra_split {
                    current = Arc::new(dra_model::classic::dra_share(split, &current));
                }
                let health = (**verdicts.borrow()).clone();
                let model = for_server(*model, release, &refused.get()).with_health(health);
                let slices = dra_model::build_slices_checked(&current, &model)?.slices;
                let published = crate::metadata::DeviceAttributes::of(&slices);
                attributes.send_if_modified(|old| {
                    let changed = old.as_deref() != Some(&published);
                    if changed {
                        *old = Some(Arc::new(published));
                    }
                    changed
                });
                Ok(slices)
            };
            let stop = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            crate::publisher::run(publisher, build, options, stop).await;
        })
    }
}

/// `build` refusing a model that both the DRA and the classic path would
/// serve (checked at start and on every change).
fn checked_rebuild(build: Rebuild, classic: Option<&ClassicSettings>) -> Rebuild {
    let classic_config = classic.map(|c| c.config.clone());
    Arc::new(move |labels, file| {
        let model = build(labels, file)?;
        if let Some(classic) = &classic_config
            && model.options().extended_resources
        {
            refuse_both_paths(model.node_name(), model.driver(), classic)?;
        }
        Ok(model)
    })
}
#[cfg(test)]
mod tests {
    use super::*;
    use dra_model::{FeatureGates, ModelOptions};

    #[test]
    fn the_server_release_sets_defaults_flags_override_and_refused_gates_win() {
        let mut o = ModelOptions::new("n1");
        o.gates = "DRADeviceTaints=false,DRAConsumableCapacity=true"
            .parse::<FeatureGates>()
            .unwrap();
        let model = ModelConfig::new(o).unwrap();
        let r37 = Release::NEWEST;
        let none = BTreeSet::new();
        let published = for_server(model.clone(), r37, &none);
        assert_eq!(published.gates().release(), r37);
        assert!(
            published.gate(FeatureGate::DraPartitionableDevices),
            "1.37 default"
        );
        assert!(!published.gate(FeatureGate::DraDeviceTaints), "flag");
        let refused = BTreeSet::from([FeatureGate::DraConsumableCapacity]);
        let published = for_server(model, Release::OLDEST, &refused);
        assert!(
            !published.gate(FeatureGate::DraConsumableCapacity),
            "refused"
        );
        assert!(
            !published.gate(FeatureGate::DraPartitionableDevices),
            "1.34 default"
        );
    }
}
