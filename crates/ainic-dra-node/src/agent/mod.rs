//! The whole node agent as one task: the DRA plugin ([`super::serve`]),
//! the ResourceSlice publisher and, when asked, the classic device plugin,
//! all following the same inventory, until SIGTERM/SIGINT.
//!
//! The plugin serves at once; nothing is published before the Node is
//! read (with retries: its labels may fence NICs to a tenant), and then
//! only what `super::desired` decides from the labels and the fabric
//! config file.

mod wiring;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ainic_dra_daemon::follow::Lifetime;
use ainic_dra_daemon::{Supervisor, TaskFailed, shutdown_signal};
use dra_model::Release;
use k8s_openapi::api::core::v1::Node;
use kube::core::PartialObjectMeta;
use tokio::sync::watch;

use crate::classic::ClassicSettings;
use crate::desired::{ConfigMetrics, Rebuild};
use crate::http::metrics::Metrics;
use crate::publisher::{Backoff, PublisherMetrics};
use crate::{AgentError, BoxError, NodeConfig, Serving, serve};
use wiring::{Running, Wiring};

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
    /// (`super::uninstall`).
    pub daemonset: Option<(String, String)>,
    /// How long the agent's watches (its slices, Node and DaemonSet) last.
    pub watches: Lifetime,
}

/// The Node, read with retries (capped backoff, for ever): nothing is
/// published before, since a model built without its labels would drop a
/// tenant label and publish fenced NICs unfenced.
async fn read_node(client: &kube::Client, node: &str, backoff: Backoff) -> PartialObjectMeta<Node> {
    // Its metadata alone (labels, uid): nothing here reads its status.
    let nodes: kube::Api<PartialObjectMeta<Node>> = kube::Api::all(client.clone());
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

/// Runs every part of the agent until a shutdown signal, or until one of
/// its tasks fails (then it stops the same way and returns the failure).
/// `client` is the API client being built: the kubelet's sockets are
/// served before it is awaited, since building it can take longer than
/// discovery (the TLS roots of the system: about 150 certificate files
/// read and parsed).
pub async fn run(
    client: impl Future<Output = Result<kube::Client, BoxError>>,
    config: AgentConfig,
) -> Result<(), AgentError> {
    let (mut supervisor, tasks) = Supervisor::new();
    ainic_dra_daemon::memory::spawn_trimmer(&tasks);
    let (metrics, publisher_metrics, config_metrics) = registered_metrics();
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
    let paths = node_paths(&node, classic.as_ref());
    let mut serving = serve(node, Arc::new(metrics), published, &tasks).await?;
    let client = match client.await {
        Ok(client) => client,
        Err(error) => {
            remove_sockets(&serving);
            return Err(AgentError::Client(error));
        }
    };
    let uninstalling = daemonset
        .as_ref()
        .map(|ds| super::uninstall::follow_daemonset(client.clone(), ds, watches, &tasks));
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
        health_events: serving.health_events.take(),
        stop,
        tasks,
    };
    let (running, failed) = match wire_until_stopped(&mut supervisor, wiring, &mut serving).await {
        Ok(wired) => wired,
        Err(error) => {
            remove_sockets(&serving);
            return Err(error);
        }
    };
    tracing::info!("shutting down");
    supervisor.shutting_down();
    // The kubelet sees the plugin go first: it sends nothing new here
    // (a newer agent of a rolling update takes the calls).
    remove_sockets(&serving);
    stop_tx.send_replace(true);
    if let Some(running) = running {
        running.finish(DRAIN_DEADLINE).await;
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

/// The agent's metrics, with the publisher's and the config's registered
/// under the `ainic_dra` prefix.
fn registered_metrics() -> (Metrics, PublisherMetrics, ConfigMetrics) {
    let mut metrics = Metrics::default();
    let publisher_metrics = PublisherMetrics::default();
    let config_metrics = ConfigMetrics::default();
    // The agent's own metrics carry the prefix in their names.
    let ours = metrics.registry_mut().sub_registry_with_prefix("ainic_dra");
    publisher_metrics.register(ours);
    config_metrics.register(ours);
    (metrics, publisher_metrics, config_metrics)
}

/// The node's files, for an uninstall.
fn node_paths(node: &NodeConfig, classic: Option<&ClassicSettings>) -> super::uninstall::NodePaths {
    super::uninstall::NodePaths {
        state: node.state_dir.clone(),
        cdi: node.cdi_dir.clone(),
        plugin: node.plugin_dir.clone(),
        metadata: node.metadata_dir.clone(),
        registry: node.registry_dir.clone(),
        device_plugins: classic.map(|c| c.dir.clone()),
        driver: node.scope.driver.clone(),
    }
}

/// Wires the publishing side while the plugin serves (prepares wait only
/// for the state), then waits for a stop: the running parts (none when the
/// stop came first) and the task failure that stopped it, if one did.
async fn wire_until_stopped(
    supervisor: &mut Supervisor,
    wiring: Wiring,
    serving: &mut Serving,
) -> Result<(Option<Running>, Option<TaskFailed>), AgentError> {
    let watching = supervisor.watch(shutdown_signal());
    tokio::pin!(watching);
    tokio::select! {
        stopped = &mut watching => Ok((None, stopped.failure())),
        wired = wiring.wire(serving) => {
            let running = wired?;
            Ok((Some(running), watching.await.failure()))
        }
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
