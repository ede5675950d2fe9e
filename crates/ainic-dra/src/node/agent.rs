//! The whole node agent as one task: the DRA plugin ([`super::start`]),
//! the ResourceSlice publisher and, when asked, the classic device plugin,
//! all following the same inventory, until SIGTERM/SIGINT.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use dra_model::{FeatureGate, ModelConfig, Release};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::ResourceSlice;
use tokio::sync::{mpsc, watch};

use super::follow::{Seen, watch as watch_objects};
use super::http::metrics::Metrics;
use super::plugin::claims::KubeClaims;
use super::publisher::{Backoff, PublisherConfig, PublisherMetrics, RunOptions, SlicePublisher};
use super::{NodeConfig, server_version, shutdown_signal, start};
use crate::classic::ClassicSettings;
use dra_model::classic::ClassicConfig;

/// What the agent runs.
pub struct AgentConfig {
    /// The DRA plugin's settings.
    pub node: NodeConfig,
    /// Builds the device model from the node's labels, at start and
    /// whenever they change.
    pub model: Box<dyn Fn(BTreeMap<String, String>) -> Result<ModelConfig> + Send + Sync>,
    /// The classic device plugin, when `--device-plugin` is set.
    pub classic: Option<ClassicSettings>,
    /// How often the publisher re-checks its slices in the API even when
    /// nothing changed (repairs slices someone else changed or deleted).
    pub resync_every: Duration,
    /// The release to publish for (`--kubernetes-version`); the API
    /// server's when `None`.
    pub kubernetes_version: Option<Release>,
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

/// The node's labels (fabric facts may come from them); empty when the
/// Node cannot be read, which the publisher will report on its own.
async fn node_labels(client: &kube::Client, node: &str) -> BTreeMap<String, String> {
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    match nodes.get_opt(node).await {
        Ok(Some(n)) => n.metadata.labels.unwrap_or_default(),
        Ok(None) => {
            tracing::warn!(
                node,
                "node object not found; building the model without its labels"
            );
            BTreeMap::new()
        }
        Err(error) => {
            tracing::warn!(node, %error, "cannot read the node object; building the model without its labels");
            BTreeMap::new()
        }
    }
}

/// Nudges the publisher whenever a watch sees this node's slices of this
/// driver change: someone else's edit or delete is repaired within
/// moments, not at the next resync. Our own writes nudge too; the sync
/// they cause finds nothing to do and writes nothing.
fn nudge_on_slice_changes(
    client: &kube::Client,
    node: &str,
    driver: &str,
    nudge: mpsc::Sender<()>,
) {
    let slices: kube::Api<ResourceSlice> = kube::Api::all(client.clone());
    let fields = format!("spec.nodeName={node},spec.driver={driver}");
    let mut seen = watch_objects(slices, fields, "resource slices");
    tokio::spawn(async move {
        while seen.recv().await.is_some() {
            // Full means a nudge is already waiting: one is enough.
            if let Err(mpsc::error::TrySendError::Closed(())) = nudge.try_send(()) {
                return;
            }
        }
    });
}

/// Rebuilds the device model whenever the node's labels (fabric facts)
/// change, and nudges the publisher. A change that gives no valid model is
/// logged and the last model kept.
fn follow_node_labels(
    client: &kube::Client,
    node: &str,
    mut labels: BTreeMap<String, String>,
    model: ModelConfig,
    rebuild: Box<dyn Fn(BTreeMap<String, String>) -> Result<ModelConfig> + Send + Sync>,
    nudge: mpsc::Sender<()>,
) -> watch::Receiver<ModelConfig> {
    let (models_tx, models) = watch::channel(model);
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let mut seen = watch_objects(nodes, format!("metadata.name={node}"), "node");
    let node = node.to_string();
    let rebuild: Arc<dyn Fn(BTreeMap<String, String>) -> Result<ModelConfig> + Send + Sync> =
        Arc::from(rebuild);
    tokio::spawn(async move {
        while let Some(event) = seen.recv().await {
            let Seen::Applied(object) = event else {
                continue;
            };
            let now = object.metadata.labels.unwrap_or_default();
            if now == labels {
                continue;
            }
            labels = now;
            // Off the async workers: the fabric sources may run a command (LLDP).
            let (rebuild, labels) = (rebuild.clone(), labels.clone());
            let built = tokio::task::spawn_blocking(move || rebuild(labels))
                .await
                .unwrap_or_else(|e| Err(anyhow::anyhow!("the model rebuild failed: {e}")));
            match built {
                Ok(model) => {
                    if models_tx.send_if_modified(|m| std::mem::replace(m, model) != *m) {
                        tracing::info!(%node, "node labels changed the device model; republishing");
                        let _ = nudge.try_send(());
                    }
                }
                Err(error) => {
                    tracing::warn!(%node, error = %format!("{error:#}"), "node labels changed but give no valid device model; keeping the last one")
                }
            }
        }
    });
    models
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

/// Runs every part of the agent until a shutdown signal.
pub async fn run(client: kube::Client, config: AgentConfig) -> Result<()> {
    crate::node::memory::spawn_trimmer();
    let node_name = config.node.scope.pool.clone();
    let driver_name = config.node.scope.driver.clone();
    let labels = node_labels(&client, &node_name).await;
    let model = (config.model)(labels.clone())?;
    // Checked at start and on every label change: a model that both paths
    // would serve is refused.
    let classic_config = config.classic.as_ref().map(|c| c.config.clone());
    let both_paths = move |model: &ModelConfig| match &classic_config {
        Some(classic) if model.options().extended_resources => {
            refuse_both_paths(model.node_name(), model.driver(), classic)
        }
        _ => Ok(()),
    };
    both_paths(&model)?;

    let mut metrics = Metrics::default();
    let publisher_metrics = PublisherMetrics::default();
    // The agent's own metrics carry the prefix in their names.
    publisher_metrics.register(metrics.registry_mut().sub_registry_with_prefix("ainic_dra"));
    let metrics = Arc::new(metrics);

    // A classic spec left by a run with --cdi-enabled: nothing would keep
    // its device numbers current now.
    if config.classic.as_ref().is_none_or(|s| s.cdi_dir.is_none()) {
        crate::classic::cdi::remove(&config.node.cdi_dir);
    }

    let claims = Arc::new(KubeClaims::new(client.clone()));
    let started = start(config.node, claims, metrics).await?;
    let (stop_tx, stop_rx) = watch::channel(false);

    // With the classic path on, DRA publishes only the devices left to it.
    let dra_split = config.classic.as_ref().map(|s| s.config.clone());
    let classic = match config.classic {
        Some(mut settings) => {
            // The scoring's rails come from the same fabric facts as DRA's.
            settings.fabric = Some(model.clone());
            Some(
                crate::classic::start(settings, started.inventory.clone(), stop_rx.clone())
                    .context("failed to start the classic device plugin")?,
            )
        }
        None => None,
    };

    let (nudge_tx, nudges) = mpsc::channel(1);
    nudge_on_slice_changes(&client, &node_name, &driver_name, nudge_tx.clone());
    let rebuild = config.model;
    let checked = Box::new(move |labels| {
        let model = rebuild(labels)?;
        both_paths(&model)?;
        Ok(model)
    });
    let release_nudge = nudge_tx.clone();
    let models = follow_node_labels(&client, &node_name, labels, model, checked, nudge_tx);
    let publisher = SlicePublisher::new(
        client.clone(),
        PublisherConfig {
            node_name,
            driver_name,
            backoff: Backoff::default(),
        },
    )
    .with_metrics(publisher_metrics);
    let refused = publisher.refused_gates();
    let inventory = started.inventory.clone();
    let attributes = started.attributes.clone();
    let mut options = RunOptions::new(config.resync_every);
    options.follow = Some(started.inventory.clone());
    options.nudges = Some(nudges);
    let mut stopped = stop_rx.clone();
    let explicit = config.kubernetes_version;
    // The plugin serves meanwhile: prepares need no slices of ours.
    let publishing = tokio::spawn(async move {
        let release = match explicit {
            Some(release) => release,
            None => match server_version::learn(&client, Backoff::default(), &mut stopped).await {
                Some(release) => release,
                None => return,
            },
        };
        let (release_tx, releases) = watch::channel(release);
        if explicit.is_none() {
            // A control plane upgraded under a running agent.
            let every = options.resync_every;
            tokio::spawn(server_version::follow(
                client,
                every,
                release_tx,
                release_nudge,
            ));
        }
        let build = move || {
            let release = *releases.borrow();
            let mut current = inventory.borrow().clone();
            if let Some(split) = &dra_split {
                current = Arc::new(dra_model::classic::dra_share(split, &current));
            }
            let model = for_server(models.borrow().clone(), release, &refused.get());
            let slices = crate::cli::slices::build_checked(&current, &model)?.slices;
            let published = crate::node::metadata::DeviceAttributes::of(&slices);
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
    });

    shutdown_signal().await;
    tracing::info!("shutting down");
    stop_tx.send_replace(true);
    let _ = publishing.await;
    for socket in &started.sockets {
        if let Err(error) = std::fs::remove_file(socket) {
            tracing::warn!(socket = %socket.display(), %error, "cannot remove socket");
        }
    }
    if let Some(mut tasks) = classic {
        while tasks.join_next().await.is_some() {}
    }
    Ok(())
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
