//! The whole node agent as one task: the DRA plugin ([`super::serve`]),
//! the ResourceSlice publisher and, when asked, the classic device plugin,
//! all following the same inventory, until SIGTERM/SIGINT.
//!
//! The plugin serves at once; nothing is published before the Node is
//! read (with retries: its labels may fence NICs to a tenant), and then
//! only what [`super::desired`] decides from the labels and the fabric
//! config file.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use dra_model::health::Verdicts;
use dra_model::{FeatureGate, ModelConfig, Release};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use tokio::sync::{Notify, mpsc, watch};

use super::desired::{self, ConfigMetrics, Desired, Inputs, Rebuild, Reporter};
use super::fabric_config;
use super::health::counters::HealthEvent;
use super::http::metrics::Metrics;
use super::node_events::{KubeNodeEvents, NodeEvents, post_soon};
use super::plugin::claims::KubeClaims;
use super::publisher::{Backoff, PublisherConfig, PublisherMetrics, RunOptions, SlicePublisher};
use super::{NodeConfig, Serving, serve};
use crate::classic::ClassicSettings;
use ainic_dra_daemon::follow::{Lifetime, Seen, watch_for};
use ainic_dra_daemon::server_version;
use ainic_dra_daemon::supervise::Done;
use ainic_dra_daemon::{Stopped, Supervisor, TaskFailed, Tasks, shutdown_signal};
use dra_model::classic::ClassicConfig;

/// What the agent runs.
pub struct AgentConfig {
    /// The DRA plugin's settings.
    pub node: NodeConfig,
    /// Builds the device model from the node's labels and the fabric
    /// config file in force, at start and whenever either changes.
    pub model: Rebuild,
    /// The fabric config file (`--fabric-config`), followed while running.
    pub fabric_config: Option<PathBuf>,
    /// How often the fabric config file is read for changes.
    pub fabric_poll_every: Duration,
    /// The classic device plugin, when `--device-plugin` is set.
    pub classic: Option<ClassicSettings>,
    /// How often the publisher re-checks its slices in the API even when
    /// nothing changed (repairs slices someone else changed or deleted).
    pub resync_every: Duration,
    /// The release to publish for (`--kubernetes-version`); the API
    /// server's when `None`.
    pub kubernetes_version: Option<Release>,
    /// The DaemonSet this agent belongs to (namespace, name): when it is
    /// deleted the agent removes its node's files on exit
    /// ([`super::uninstall`]).
    pub daemonset: Option<(String, String)>,
    /// How long the agent's watches (its slices, Node and DaemonSet) last.
    pub watches: Lifetime,
}

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

/// The Node, read with retries (capped backoff, for ever): nothing is
/// published before, since a model built without its labels would drop a
/// tenant label and publish fenced NICs unfenced.
async fn read_node(client: &kube::Client, node: &str, backoff: Backoff) -> Node {
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let mut failures = 0;
    loop {
        failures += 1;
        let delay = backoff.delay(failures);
        let delay_ms = delay.as_millis() as u64;
        match nodes.get_opt(node).await {
            Ok(Some(found)) => return found,
            Ok(None) => {
                tracing::warn!(
                    node,
                    failures,
                    delay_ms,
                    "node object not found; publishing nothing until it can be read"
                )
            }
            Err(error) => {
                tracing::warn!(node, %error, failures, delay_ms, "cannot read the node object; publishing nothing until it can be read")
            }
        }
        tokio::time::sleep(delay).await;
    }
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

/// Runs every part of the agent until a shutdown signal, or until one of
/// its tasks fails (then it stops the same way and returns the failure).
/// `client` is the API client being built: the kubelet's sockets are
/// served before it is awaited, since building it can take longer than
/// discovery (the TLS roots of the system: about 150 certificate files
/// read and parsed).
pub async fn run(
    client: impl Future<Output = Result<kube::Client>>,
    config: AgentConfig,
) -> Result<()> {
    let (mut supervisor, tasks) = Supervisor::new();
    ainic_dra_daemon::memory::spawn_trimmer(&tasks);
    let mut metrics = Metrics::default();
    let publisher_metrics = PublisherMetrics::default();
    let config_metrics = ConfigMetrics::default();
    // The agent's own metrics carry the prefix in their names.
    let ours = metrics.registry_mut().sub_registry_with_prefix("ainic_dra");
    publisher_metrics.register(ours);
    config_metrics.register(ours);

    // A classic spec left by a run with --cdi-enabled: nothing would keep
    // its device numbers current now.
    if config.classic.as_ref().is_none_or(|s| s.cdi_dir.is_none()) {
        crate::classic::cdi::remove(&config.node.cdi_dir);
    }

    let AgentConfig {
        node,
        model,
        fabric_config,
        fabric_poll_every,
        classic,
        resync_every,
        kubernetes_version,
        daemonset,
        watches,
    } = config;
    let waiting = format!(
        "waiting to read Node {}: its labels may fence NICs to a tenant",
        node.scope.pool
    );
    let (published_tx, published) = watch::channel(Some(waiting));
    let scope = node.scope.clone();
    let paths = super::uninstall::NodePaths {
        state: node.state_dir.clone(),
        cdi: node.cdi_dir.clone(),
        plugin: node.plugin_dir.clone(),
        registry: node.registry_dir.clone(),
        device_plugins: classic.as_ref().map(|c| c.dir.clone()),
        driver: node.scope.driver.clone(),
    };
    let mut serving = serve(node, Arc::new(metrics), published, &tasks).await?;
    let client = match client.await {
        Ok(client) => client,
        Err(error) => {
            remove_sockets(&serving);
            return Err(error);
        }
    };
    let uninstalling = daemonset
        .as_ref()
        .map(|ds| super::uninstall::follow_daemonset(client.clone(), ds, watches, &tasks));
    let health_events = serving.health_events.take();
    let (stop_tx, stop) = watch::channel(false);
    let wiring = Wiring {
        client,
        node: scope.pool,
        driver: scope.driver,
        model,
        fabric_config,
        fabric_poll_every,
        classic,
        resync_every,
        kubernetes_version,
        watches,
        publisher_metrics,
        config_metrics,
        published: published_tx,
        health_events,
        stop,
        tasks,
    };
    let mut failed = None;
    let running = {
        let watching = supervisor.watch(shutdown_signal());
        tokio::pin!(watching);
        // The plugin serves meanwhile: prepares wait only for the state.
        let wired = tokio::select! {
            stopped = &mut watching => {
                failed = failure(stopped);
                None
            }
            wired = wiring.wire(&mut serving) => Some(wired),
        };
        match wired {
            None => None,
            Some(Err(error)) => {
                remove_sockets(&serving);
                return Err(error);
            }
            Some(Ok(running)) => {
                failed = failure(watching.await);
                Some(running)
            }
        }
    };
    tracing::info!("shutting down");
    supervisor.shutting_down();
    // The kubelet sees the plugin go first: it sends nothing new here
    // (a newer agent of a rolling update takes the calls).
    remove_sockets(&serving);
    stop_tx.send_replace(true);
    if let Some(running) = running {
        running.publishing.wait().await;
        running.driver.drain(DRAIN_DEADLINE).await;
        for task in running.classic {
            task.wait().await;
        }
    }
    if uninstalling.is_some_and(|u| u.load(std::sync::atomic::Ordering::SeqCst)) {
        drop(serving);
        remove_node_state(&paths);
    }
    supervisor.stop(STOP_DEADLINE).await;
    match failed {
        Some(failed) => Err(failed.into()),
        None => Ok(()),
    }
}

/// The task that failed, if that is why the agent stops.
fn failure(stopped: Stopped) -> Option<TaskFailed> {
    match stopped {
        Stopped::Asked => None,
        Stopped::Failed(failed) => Some(failed),
    }
}

/// The chart is being uninstalled: removes the node's files if no claim
/// is prepared, and says what it did.
fn remove_node_state(paths: &super::uninstall::NodePaths) {
    use super::uninstall::Removed;
    let state_dir = &paths.state;
    match super::uninstall::remove_node_state(paths) {
        Ok(Removed::Files(files)) => {
            tracing::info!(
                removed = files.len(),
                "uninstalled: the node's files removed"
            );
        }
        Ok(Removed::KeptForPreparedClaims(n)) => tracing::warn!(
            prepared = n,
            state_dir = %state_dir.display(),
            "uninstalled while claims are still prepared: the node's files are kept (drain the node first; a reinstall takes them over)"
        ),
        Err(error) => {
            tracing::error!(%error, state_dir = %state_dir.display(), "uninstalled: cannot remove the node's files")
        }
    }
}

/// How long prepares and unprepares under way at SIGTERM may take to
/// finish: well inside the chart's 30 s grace period.
const DRAIN_DEADLINE: Duration = Duration::from_secs(20);

/// How long the tasks left after the drain may take to end once
/// cancelled (they end at their next await point).
const STOP_DEADLINE: Duration = Duration::from_secs(2);

/// Removes the plugin's sockets, so the kubelet sees the plugin go.
fn remove_sockets(serving: &Serving) {
    for socket in &serving.sockets {
        if let Err(error) = std::fs::remove_file(socket) {
            tracing::warn!(socket = %socket.display(), %error, "cannot remove socket");
        }
    }
}

/// What the publishing side of the agent is wired from.
struct Wiring {
    client: kube::Client,
    node: String,
    driver: String,
    model: Rebuild,
    fabric_config: Option<PathBuf>,
    fabric_poll_every: Duration,
    classic: Option<ClassicSettings>,
    resync_every: Duration,
    kubernetes_version: Option<Release>,
    watches: Lifetime,
    publisher_metrics: PublisherMetrics,
    config_metrics: ConfigMetrics,
    published: watch::Sender<Option<String>>,
    health_events: Option<mpsc::Receiver<HealthEvent>>,
    stop: watch::Receiver<bool>,
    tasks: Tasks,
}

/// The tasks to wait for at shutdown.
struct Running {
    publishing: Done,
    classic: Vec<Done>,
    driver: Arc<super::plugin::Driver>,
}

impl Wiring {
    /// Reads the Node, builds the first model, starts the classic device
    /// plugin, takes the state directory over, and starts the publisher.
    /// Fails when the node's labels or the flags give no valid model at
    /// start. The classic plugin serves before the state is owned (it keeps
    /// none), so a rolling update leaves `amd.com/nic` no moment without a
    /// plugin; the publisher starts after, so an old and a new agent never
    /// publish the node's slices at once.
    async fn wire(mut self, started: &mut Serving) -> Result<Running> {
        let node = read_node(&self.client, &self.node, Backoff::default()).await;
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
        }?;
        let (first, problem) = desired::decide(&state, |_| Ok(model.clone()));
        let events = Arc::new(KubeNodeEvents::new(&self.client, &node, &self.driver));
        if let Some(queued) = self.health_events.take() {
            let health = KubeNodeEvents::new(&self.client, &node, &self.driver)
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
                    .context("failed to start the classic device plugin")?
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
            super::publisher::run(publisher, build, options, stop).await;
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
